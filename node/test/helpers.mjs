// Shared by the tests: the repository, the `toolgate` CLI (built with cargo) and small
// inline policies (the same as python/tests/policies_for_tests.py).
import { spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, readdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')
export const POLICIES = path.join(ROOT, 'policies')
export const TRACES = path.join(ROOT, 'examples', 'traces')

let bin = null
/** The CLI to compare against: $TOOLGATE_BIN, else built with cargo (debug). */
export function toolgateBin() {
  if (bin) return bin
  if (process.env.TOOLGATE_BIN) {
    bin = process.env.TOOLGATE_BIN
    return bin
  }
  const r = spawnSync('cargo', ['build', '--quiet', '--bin', 'toolgate'], { cwd: ROOT, stdio: 'inherit' })
  if (r.status !== 0) throw new Error('cargo build --bin toolgate failed (cargo is needed to compare with the CLI)')
  const target = process.env.CARGO_TARGET_DIR ? path.resolve(ROOT, process.env.CARGO_TARGET_DIR) : path.join(ROOT, 'target')
  bin = path.join(target, 'debug', 'toolgate')
  if (!existsSync(bin)) throw new Error(`${bin} was not built`)
  return bin
}

/** Runs the CLI; returns {status, stdout, stderr}. */
export function cli(args, opts = {}) {
  const r = spawnSync(toolgateBin(), args, { encoding: 'utf8', ...opts })
  if (r.error) throw r.error
  return r
}

export function tmp() {
  return mkdtempSync(path.join(tmpdir(), 'toolgate-node-'))
}

export function rule(id, condition, effect, { tool = '*', reason, priority = 10, phase = 'tool.before', ...rest } = {}) {
  return {
    id,
    name: id,
    priority,
    enabled: true,
    selector: { phase, tool: { name: tool } },
    condition,
    effect: { type: effect, reason: reason ?? `rule ${id}` },
    ...rest,
  }
}

export function policy(...rules) {
  return { policy: { name: 'node-tests' }, rules }
}

export const ALWAYS = { kind: 'toolName', op: 'glob', value: '*' }

export const GATE = policy(
  rule('no-delete', ALWAYS, 'block', { tool: 'delete*', reason: 'Deleting is not allowed.' }),
  rule('big-refund', { kind: 'toolArg', type: 'number', op: 'gt', path: 'amount', value: 100 }, 'hitl', {
    tool: 'refund',
    reason: 'Refunds above $100 need a team lead.',
  }),
  rule(
    'vip',
    { kind: 'signal', key: 'crm.vip', op: 'eq', value: true, args: { user: { from: 'toolArg', path: 'user' } } },
    'block',
    { tool: 'close_account', reason: 'VIP accounts are closed by people.' },
  ),
)

export function maxCalls(n, per = 'run') {
  return policy(
    rule('cap', { kind: 'maxCalls', selector: { by: 'toolName', patterns: ['search'] }, max: n, per }, 'block', {
      tool: 'search',
      reason: 'Too many searches.',
    }),
  )
}

/** A token budget (design §17): the next model call is blocked once the run's input tokens reach `tokens`. */
export function budget(tokens, extra = []) {
  return policy(
    rule(
      'token-budget',
      { kind: 'metricWindow', scope: 'run', metric: { kind: 'inbuilt', key: 'llm_tokens_in' }, aggregate: 'sum', op: 'gte', value: tokens },
      'block',
      { phase: 'llm.before', reason: 'Token budget spent.' },
    ),
    ...GATE.rules,
    ...extra,
  )
}

/** Model calls past the first `n` of a run are held for human review (an `llm.before` hitl). */
export function modelReview(n) {
  return policy(
    rule('model-review', { kind: 'maxCalls', selector: { by: 'toolName', patterns: ['*'] }, max: n, per: 'run' }, 'hitl', {
      phase: 'llm.before',
      reason: 'More model calls need a human.',
    }),
    ...GATE.rules,
  )
}

/** Every event of the JSONL audit trail in folder `dir`. */
export function auditEvents(dir) {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.jsonl'))
    .flatMap((f) => readFileSync(path.join(dir, f), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)))
}

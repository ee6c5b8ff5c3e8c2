// The shipped policies and traces give the same decisions through Node as through
// `toolgate replay` (a replayer of design §5 driven through the Node API; the same steps as
// python/tests/pyreplay.py).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync, readdirSync, writeFileSync } from 'node:fs'
import path from 'node:path'

import { Engine, ManualClock } from 'toolgate'
import { POLICIES, TRACES, cli, tmp } from './helpers.mjs'

const readJsonl = (text) => text.split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l))

class Replayer {
  constructor(policies, orgTimezone) {
    this.clock = new ManualClock(0)
    this.engine = new Engine({ policies, orgTimezone, clock: this.clock })
    this.signals = new Map()
    this.runs = new Map()
    this.reviewsByCall = new Map()
    this.toolsByCall = new Map()
    this.subjects = []
    this.engine.registerSubjects('*', () =>
      this.subjects.map((s) => {
        const d = { subjectType: s.subjectType, id: s.value }
        for (const k of ['role', 'idSystem']) if (s[k] != null) d[k] = s[k]
        return d
      }),
    )
    this.rows = []
    this.line = 0
  }

  register(key) {
    this.engine.registerSignal(key, async () => {
      const b = this.signals.get(key)
      if (b.delayMs) await new Promise((r) => setTimeout(r, b.delayMs))
      if (b.error != null) throw new Error(b.error)
      return b.value
    })
  }

  run(runId) {
    if (runId == null) {
      assert.equal(this.runs.size, 1)
      return [...this.runs.entries()][0]
    }
    return [runId, this.runs.get(runId)]
  }

  row(runId, callId, tool, d) {
    const row = {
      line: this.line,
      runId,
      callId,
      phase: d.phase,
      tool,
      effect: d.effect,
      code: d.code,
      ruleId: d.ruleId,
      reason: d.reason,
      abortRun: d.abortRun,
    }
    if (d.shadowEffect !== null) row.shadowEffect = d.shadowEffect
    this.rows.push(row)
    if (d.reviewId !== null && d.effect === 'hitl') this.reviewsByCall.set(callId, d.reviewId)
  }

  async step(line) {
    this.line++
    if ('at' in line) this.clock.set(line.at)
    switch (line.type) {
      case 'run.start':
        this.runs.set(line.runId, this.engine.startRun({ agentId: line.agentId, runId: line.runId, enduser: line.enduser, agentTags: line.agentTags }))
        break
      case 'signal': {
        const fresh = !this.signals.has(line.key)
        this.signals.set(line.key, line)
        if (fresh) this.register(line.key)
        break
      }
      case 'tool.call': {
        const [runId, run] = this.run(line.runId)
        this.subjects = line.subjects ?? []
        const d = await run.beforeTool({ name: line.tool.name, args: line.args ?? {}, tags: line.tool.tags ?? [], callId: line.id })
        this.toolsByCall.set(`${runId}\u0000${line.id}`, line.tool.name)
        this.row(runId, line.id, line.tool.name, d)
        break
      }
      case 'tool.result': {
        const [runId, run] = this.run(line.runId)
        const after = await run.afterTool(line.id, { output: line.output ?? undefined, durationMs: line.durationMs, error: line.error ?? undefined })
        // The CLI prints an after row when after-phase rules were in play for the call.
        if (after.toJSON().evaluated.length > 0) this.row(runId, line.id, this.toolsByCall.get(`${runId}\u0000${line.id}`) ?? '', after)
        break
      }
      case 'metric':
        this.run(line.runId)[1].recordMetric(line.key, line.value)
        break
      case 'llm.call': {
        const [runId, run] = this.run(line.runId)
        const d = await run.beforeLlm(line.model, line.messages ?? [], { callId: line.id })
        this.llmRefused ??= new Set()
        if (d.allowed) this.llmRefused.delete(`${runId}\u0000${line.id}`)
        else this.llmRefused.add(`${runId}\u0000${line.id}`)
        this.row(runId, line.id, line.model, d)
        break
      }
      case 'llm': {
        const [runId, run] = this.run(line.runId)
        // The usage of a model call that was not allowed: the model was not called.
        if (line.id != null && this.llmRefused?.has(`${runId}\u0000${line.id}`)) break
        run.recordLlm({
          tokensIn: line.tokensIn ?? 0,
          tokensOut: line.tokensOut ?? 0,
          costUsd: line.costUsd,
          model: line.model,
          durationMs: line.durationMs,
          callId: line.id,
        })
        break
      }
      case 'review': {
        const id = this.reviewsByCall.get(line.fingerprintOf)
        if (line.decision === 'approved') await this.engine.reviews.approve(id)
        else await this.engine.reviews.deny(id)
        break
      }
      case 'run.end': {
        const [runId, run] = this.run(line.runId)
        await run.end(line.status ?? 'success', line.finalResponse ?? undefined)
        this.runs.delete(runId)
        break
      }
      default:
        throw new Error(`unknown line type ${line.type}`)
    }
  }

  async replay(lines) {
    for (const line of lines) await this.step(line)
    for (const run of this.runs.values()) await run.end('incomplete')
    this.runs.clear()
    return this.rows
  }
}

function cases() {
  const out = []
  for (const f of readdirSync(POLICIES).filter((f) => f.endsWith('.tests.json')).sort()) {
    const doc = JSON.parse(readFileSync(path.join(POLICIES, f), 'utf8'))
    const policy = path.resolve(POLICIES, doc.policy)
    for (const c of doc.cases) out.push([`${f}: ${c.name.slice(0, 60)}`, policy, c.trace, doc.orgTimezone])
  }
  out.push([
    'examples/traces/support.jsonl',
    path.join(POLICIES, 'customer-support.json'),
    readJsonl(readFileSync(path.join(TRACES, 'support.jsonl'), 'utf8')),
    undefined,
  ])
  return out
}

const CASES = cases()

function cliRows(policy, trace, tz, dir) {
  const file = path.join(dir, 'trace.jsonl')
  writeFileSync(file, trace.map((l) => JSON.stringify(l) + '\n').join(''))
  const args = ['replay', '--policy', policy, '--trace', file, '--format', 'jsonl']
  if (tz) args.push('--org-timezone', tz)
  const r = cli(args)
  assert.equal(r.status, 0, r.stderr)
  return readJsonl(r.stdout)
}

test('every shipped policy has cases', () => {
  const covered = new Set(CASES.map((c) => path.basename(c[1])))
  for (const f of readdirSync(POLICIES).filter((f) => f.endsWith('.json') && !f.endsWith('.tests.json'))) {
    assert.ok(covered.has(f), `${f} has no replay case`)
  }
})

for (const [name, policy, trace, tz] of CASES) {
  test(`same decisions as toolgate replay: ${name}`, async () => {
    const expected = cliRows(policy, trace, tz, tmp())
    assert.ok(expected.length > 0, 'the CLI printed no decision')
    const got = await new Replayer(policy, tz).replay(trace)
    assert.deepEqual(got, expected)
  })
}

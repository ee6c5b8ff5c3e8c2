// The model's side (issue 36, design §17) through the addon: run.beforeLlm decided by
// llm.before rules, run.recordLlm({tokensIn, tokensOut, costUsd?, model?, durationMs?}) priced
// from new Engine({prices}), recordMessages writing redacted llm.messages events.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync, readdirSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'

import { Engine, Decision, ToolgateError, PolicyError } from 'toolgate'

const metric = (key, op, value) => ({
  kind: 'metricWindow',
  scope: 'run',
  metric: { kind: 'inbuilt', key },
  aggregate: 'sum',
  op,
  value,
})

const BUDGET = {
  policy: { name: 'budget' },
  rules: [
    {
      id: 'token-budget',
      name: 'token budget',
      selector: { phase: 'llm.before', tool: { name: 'gpt-*' } },
      condition: metric('llm_tokens_in', 'gte', 1000),
      effect: { type: 'block', reason: 'token budget spent' },
    },
    {
      id: 'cost-review',
      name: 'cost review',
      selector: { phase: 'llm.before' },
      condition: metric('llm_cost_usd', 'gte', 1.0),
      effect: { type: 'hitl', reason: 'a human approves spending more' },
    },
    {
      id: 'no-keys',
      name: 'no keys to the model',
      selector: { phase: 'llm.before' },
      condition: { kind: 'sensitiveData', target: 'llmInput', detectors: [{ detector: 'credit_card' }] },
      effect: { type: 'block', reason: 'card numbers must not reach the model' },
    },
  ],
}

const MSGS = [
  { role: 'system', content: 'be brief' },
  { role: 'user', content: 'hi' },
]

function events(dir) {
  const out = []
  const walk = (d) => {
    for (const f of readdirSync(d)) {
      const p = path.join(d, f)
      if (statSync(p).isDirectory()) walk(p)
      else if (p.endsWith('.jsonl')) {
        for (const line of readFileSync(p, 'utf8').split('\n')) if (line.trim()) out.push(JSON.parse(line))
      }
    }
  }
  walk(dir)
  return out
}

test('beforeLlm is decided by the llm.before rules; recordLlm feeds the budget', async () => {
  const engine = new Engine({ policies: BUDGET })
  const run = engine.startRun({ agentId: 'bot', runId: 'r1' })
  const ok = await run.beforeLlm('gpt-4o', MSGS)
  assert.ok(ok instanceof Decision)
  assert.deepEqual([ok.effect, ok.code, ok.phase, ok.callId], ['allow', 'ALLOWED', 'llm.before', 'llm-1'])
  run.recordLlm({ tokensIn: 1200, tokensOut: 10, model: 'gpt-4o', durationMs: 250 })
  const no = await run.beforeLlm('gpt-4o', MSGS, { callId: 'x' })
  assert.deepEqual(
    [no.effect, no.code, no.ruleId, no.reason, no.callId],
    ['block', 'BLOCKED_RULE', 'token-budget', 'token budget spent', 'x'],
  )
  assert.equal(no.toJSON().phase, 'llm.before')
  // The budget rule selects gpt-* only.
  assert.ok((await run.beforeLlm('claude-sonnet', MSGS)).allowed)
  await run.end('budget_exceeded')
})

test('prices turn tokens into cost; a cost budget asks a human', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'tg-llm-'))
  const engine = new Engine({ policies: BUDGET, audit: dir, prices: { 'claude-*': { in: 3, out: 15 } } })
  const run = engine.startRun({ agentId: 'bot', runId: 'r1' })
  run.recordLlm({ tokensIn: 100_000, tokensOut: 50_000, model: 'claude-sonnet-4' })
  const d = await run.beforeLlm('claude-sonnet-4', MSGS)
  assert.equal(d.effect, 'hitl')
  assert.equal(d.code, 'BLOCKED_HITL_REQUESTED')
  assert.ok(d.reviewId && run.aborted)
  await engine.reviews.approve(d.reviewId)
  assert.equal(await run.resume(), true)
  assert.equal((await run.beforeLlm('claude-sonnet-4', MSGS)).code, 'ALLOWED_HITL_APPROVED')
  await run.end()
  await engine.flush()
  const result = events(dir).find((e) => e.kind === 'llm.result')
  assert.ok(Math.abs(result.costUsd - 1.05) < 1e-9)
  assert.equal(result.model, 'claude-sonnet-4')
})

test('the positional recordLlm still works; bad usage and prices are refused', async () => {
  const engine = new Engine({ policies: BUDGET })
  const run = engine.startRun({ agentId: 'bot' })
  run.recordLlm(1500, 0, 0.01)
  assert.equal((await run.beforeLlm('gpt-4o', MSGS)).ruleId, 'token-budget')
  assert.throws(() => run.recordLlm({ tokensIn: -1, tokensOut: 0 }), /non-negative/)
  assert.throws(() => run.recordLlm({ tokensIn: Number.NaN, tokensOut: 0 }), /non-negative/)
  assert.throws(() => run.recordLlm({ tokensIn: '5', tokensOut: 0 }), TypeError)
  assert.throws(() => run.recordLlm(null), TypeError)
  assert.throws(() => new Engine({ policies: BUDGET, prices: { m: { in: -1, out: 1 } } }), /prices\.m\.in/)
  assert.throws(() => new Engine({ policies: BUDGET, prices: { m: { in: 1, out: 1, cached: 1 } } }), /unknown key/)
  await assert.rejects(run.beforeLlm(42, MSGS), TypeError)
})

test('recordMessages writes the messages, redacted and bounded', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'tg-llm-'))
  const engine = new Engine({ policies: BUDGET, audit: dir, recordMessages: true })
  const run = engine.startRun({ agentId: 'bot', runId: 'r1' })
  const blocked = await run.beforeLlm('gpt-4o', [{ role: 'user', content: 'pay with 4111 1111 1111 1111' }])
  assert.equal(blocked.ruleId, 'no-keys')
  await run.beforeLlm('gpt-4o', [{ role: 'user', content: 'y'.repeat(40_000) }])
  await run.end()
  await engine.flush()
  const all = events(dir)
  const msgs = all.filter((e) => e.kind === 'llm.messages')
  assert.equal(msgs.length, 2)
  assert.equal(msgs[0].messages[0].content, 'pay with [redacted:credit_card]')
  assert.equal(msgs[1].messages[0].truncated, true)
  assert.equal(msgs[1].messages[0].content.length, 16 * 1024)
  assert.ok(!JSON.stringify(all).includes('4111 1111'))
})

test('beforeLlm after the run ended rejects; messages that are not JSON are refused', async () => {
  const engine = new Engine({ policies: BUDGET })
  const run = engine.startRun({ agentId: 'bot' })
  const cyclic = {}
  cyclic.self = cyclic
  const r = await run.beforeLlm('m', [cyclic]).catch((e) => e)
  // A cycle becomes its string (jsonable) or is refused: never a crash.
  assert.ok(r instanceof Decision || r instanceof TypeError)
  await run.end()
  await assert.rejects(run.beforeLlm('gpt-4o', MSGS), ToolgateError)
  const plain = new Engine({ policies: { policy: { name: 'p' }, rules: [] } }).startRun({ agentId: 'bot' })
  assert.ok((await plain.beforeLlm('m')).allowed)
  await plain.end()
  await assert.rejects(plain.beforeLlm('m'), ToolgateError)
})

test('an llm.before rule with a tool-only condition fails to load, naming the rule', () => {
  const bad = {
    rules: [
      {
        id: 'r',
        name: 'r',
        selector: { phase: 'llm.before' },
        condition: { kind: 'sequence', mustHaveCalled: ['x'] },
        effect: { type: 'block' },
      },
    ],
  }
  assert.throws(
    () => new Engine({ policies: bad }),
    (e) => e instanceof PolicyError && e.path === 'rules[0].condition.kind' && /rule "r"/.test(e.message),
  )
})

// Issue 33 (Node, point 11): hung callbacks. A callback that never answers is missing data at
// the timeout and holds no slot past it; one that keeps hanging is not called without end
// (its unanswered calls are capped); healthy callbacks on the same engine keep answering.
import { test } from 'node:test'
import assert from 'node:assert/strict'

import { Engine } from 'toolgate'
import { policy, rule } from './helpers.mjs'

const SIGNALS = policy(
  rule('hung', { kind: 'signal', key: 'hung', op: 'eq', value: true }, 'block', { tool: 'a' }),
  rule('healthy', { kind: 'signal', key: 'healthy', op: 'eq', value: true }, 'block', { tool: 'b' }),
)

test('a hung callback is not called without end; healthy callbacks keep answering', async () => {
  const engine = new Engine({ policies: SIGNALS, signalTimeoutMs: 250 })
  let hungCalls = 0
  engine.registerSignal('hung', () => {
    hungCalls++
    return new Promise(() => {}) // never answers
  })
  engine.registerSignal('healthy', async () => true)
  const run = engine.startRun('bot')
  const rounds = 10
  const per = 100
  for (let i = 0; i < rounds; i++) {
    const ds = await Promise.all(Array.from({ length: per }, (_, j) => run.beforeTool({ name: 'a', args: { i, j } })))
    // Missing data each time (the rule is not matched: allow), with the reason recorded.
    assert.ok(ds.every((d) => d.effect === 'allow'))
    assert.ok(ds.every((d) => typeof d.toJSON().signals[0].error === 'string'))
  }
  // The hung callback holds its unanswered calls: past its cap (256) it is not called again.
  assert.ok(hungCalls <= 256 + 2 * per, `the hung callback was called ${hungCalls} times for ${rounds * per} decisions`)
  const last = await run.beforeTool({ name: 'a', args: { last: true } })
  assert.match(last.toJSON().signals[0].error, /unanswered/)
  // Healthy callbacks are not starved.
  const ok = await Promise.all(Array.from({ length: per }, (_, j) => run.beforeTool({ name: 'b', args: { j } })))
  assert.ok(ok.every((d) => d.effect === 'block' && d.toJSON().signals[0].value === true), JSON.stringify(ok.find((d) => d.effect !== 'block')?.toJSON()))
  // Registering the provider again starts it afresh.
  engine.registerSignal('hung', async () => true)
  assert.equal((await run.beforeTool({ name: 'a', args: {} })).effect, 'block')
})

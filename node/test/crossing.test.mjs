// The fast crossing of decisions made at once (src/fast.rs, `Crossing` in index.js): the
// fields arrive as numbers and strings by number; they must be exactly the Rust decision's.
import { test } from 'node:test'
import assert from 'node:assert/strict'

import { Engine } from 'toolgate'
import { policy, rule, ALWAYS } from './helpers.mjs'

const FIELDS = ['phase', 'effect', 'code', 'reason', 'ruleId', 'abortRun', 'latencyNs']

/** The decision's fields against its whole Rust JSON (`toJSON()`, read from the run). */
function assertSameAsRust(d) {
  const full = d.toJSON()
  assert.ok(Array.isArray(full.evaluated), 'toJSON() is the whole Rust decision')
  for (const k of FIELDS) assert.deepEqual(d[k], full[k] ?? null, k)
  assert.equal(d.shadowEffect, full.shadowEffect ?? null)
  assert.equal(d.reviewId, full.hitl?.reviewId ?? null)
  assert.equal(d.allowed, full.effect === 'allow')
}

test('fields crossed by number equal the Rust decision: allow, block, shadow, hitl, given and numbered call ids', async () => {
  const engine = new Engine([
    policy(
      rule('no-delete', ALWAYS, 'block', { tool: 'delete*', reason: 'Deleting is not allowed.' }),
      rule('ask-refund', ALWAYS, 'hitl', { tool: 'refund', reason: 'Refunds need a human.' }),
      rule('no-drop', ALWAYS, 'block', { tool: 'drop*', reason: 'Dropping is not allowed.', priority: 20 }),
    ),
    { policy: { name: 'watching', mode: 'shadow' }, rules: [rule('would-block-export', ALWAYS, 'block', { tool: 'export', reason: 'Exports are watched.' })] },
  ])
  const run = engine.startRun('bot')
  const seen = []
  for (const [name, callId] of [['search', undefined], ['deleteUser', 'c-7'], ['export', undefined], ['search', 42], ['dropTable', undefined], ['deleteUser', undefined]]) {
    const d = await run.beforeTool({ name, args: { n: 1 }, callId })
    assert.equal(d.callId, callId === undefined ? `call-${seen.filter((c) => c === undefined).length + 1}` : String(callId))
    seen.push(callId)
    assertSameAsRust(d)
  }
  const shadow = await run.beforeTool('export', {})
  assert.deepEqual([shadow.effect, shadow.code, shadow.shadowEffect, shadow.ruleId], ['allow', 'ALLOWED', 'block', null])
  const hitl = await run.beforeTool('refund', { amount: 5 })
  assert.equal(hitl.effect, 'hitl')
  assert.match(hitl.reviewId, /.+/)
  assertSameAsRust(hitl)
  // Stopped by the hitl: the run's later calls.
  const after = await run.beforeTool('search', {})
  assertSameAsRust(after)
  assert.equal(after.allowed, false)
})

test('two engines keep their own strings', async () => {
  const a = new Engine(policy(rule('a-rule', ALWAYS, 'block', { reason: 'engine A says no' })))
  const b = new Engine(policy(rule('b-rule', ALWAYS, 'block', { reason: 'engine B says no' })))
  for (let i = 0; i < 3; i++) {
    const [da, db] = [await a.startRun('x').beforeTool('t', {}), await b.startRun('x').beforeTool('t', {})]
    assert.deepEqual([da.ruleId, da.reason], ['a-rule', 'engine A says no'])
    assert.deepEqual([db.ruleId, db.reason], ['b-rule', 'engine B says no'])
  }
})

test('past the bound on numbered strings (4,096), decisions cross as JSON text and stay exact', async () => {
  // 2,100 rules, each its own id and reason: 4,200 strings (and the phase, effects, codes).
  const n = 2100
  const rules = Array.from({ length: n }, (_, i) => rule(`r-${i}`, ALWAYS, 'block', { tool: `tool_${i}`, reason: `reason number ${i}` }))
  const engine = new Engine(policy(...rules))
  const run = engine.startRun('bot')
  const check = async (i) => {
    const d = await run.beforeTool(`tool_${i}`, {})
    assert.deepEqual([d.ruleId, d.reason, d.effect, d.code, d.phase], [`r-${i}`, `reason number ${i}`, 'block', 'BLOCKED_RULE', 'tool.before'], `tool_${i}`)
    return d
  }
  for (let i = 0; i < n; i++) await check(i)
  // Strings numbered before the table filled, and the ones after, still right.
  for (const i of [0, 1, 1000, 2040, 2099]) assertSameAsRust(await check(i))
  const ok = await run.beforeTool('other', {})
  assert.deepEqual([ok.effect, ok.code, ok.ruleId, ok.reason], ['allow', 'ALLOWED', null, null])
})

test('numbers past 16 bits cross whole: call numbers and decision numbers beyond 65,536', async () => {
  const engine = new Engine(policy(rule('no-drop', ALWAYS, 'block', { tool: 'drop*', reason: 'No.' })))
  const run = engine.startRun('bot')
  let d
  for (let i = 1; i <= 70_000; i++) {
    d = await run.beforeTool(i % 2 ? 'search' : 'dropTable', {})
    if (i === 65_535 || i === 65_536 || i === 65_537) assert.equal(d.callId, `call-${i}`)
  }
  assert.equal(d.callId, 'call-70000')
  assert.deepEqual([d.effect, d.ruleId], ['block', 'no-drop'])
  // The run keeps its last decisions whole: the newest one reads back by its number.
  assertSameAsRust(d)
  assert.equal(d.toJSON().effect, 'block')
})

test('a decision that has to await (a signal) still settles through the packed crossing', async () => {
  const engine = new Engine(
    policy(rule('risky', { kind: 'signal', key: 'risk', op: 'gt', value: 5 }, 'block', { reason: 'Too risky.' })),
  )
  engine.registerSignal('risk', async () => 9)
  const run = engine.startRun('bot')
  const p = run.beforeTool({ name: 'pay', args: { amount: 1 }, tags: ['money'] })
  assert.ok(p instanceof Promise)
  const d = await p
  assert.deepEqual([d.effect, d.ruleId, d.callId], ['block', 'risky', 'call-1'])
  const next = await run.beforeTool('search', {})
  assert.equal(next.callId, 'call-2')
})

// The engine from Node: decisions, Decision, errors, clock, guard, reviews, reload.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import path from 'node:path'

import {
  Engine,
  Decision,
  ManualClock,
  ToolgateError,
  PolicyError,
  BlockedError,
  ReviewRequiredError,
  refusalText,
} from 'toolgate'
import { GATE, POLICIES, policy, rule, ALWAYS } from './helpers.mjs'

test('beforeTool allows, blocks and asks for review; Decision carries the fields', async () => {
  const engine = new Engine({ policies: GATE })
  const run = engine.startRun({ agentId: 'bot', runId: 'r1' })
  assert.equal(run.runId, 'r1')
  assert.equal(run.agentId, 'bot')
  const ok = await run.beforeTool({ name: 'search', args: { q: 'x' } })
  assert.ok(ok instanceof Decision)
  assert.deepEqual(
    [ok.effect, ok.code, ok.allowed, ok.ruleId, ok.reason, ok.callId, ok.phase],
    ['allow', 'ALLOWED', true, null, null, 'call-1', 'tool.before'],
  )
  const no = await run.beforeTool({ name: 'deleteUser', args: { id: 7 }, callId: 'c-del' })
  assert.deepEqual(
    [no.effect, no.code, no.allowed, no.ruleId, no.reason, no.callId, no.abortRun],
    ['block', 'BLOCKED_RULE', false, 'no-delete', 'Deleting is not allowed.', 'c-del', false],
  )
  assert.equal(refusalText(no), 'toolgate blocked this call: Deleting is not allowed. [BLOCKED_RULE, rule no-delete]')
  const hitl = await run.beforeTool({ name: 'refund', args: { amount: 500 } })
  assert.equal(hitl.effect, 'hitl')
  assert.equal(hitl.code, 'BLOCKED_HITL_REQUESTED')
  assert.match(hitl.reviewId, /.+/)
  assert.ok(hitl.abortRun)
  assert.ok(run.aborted)
  assert.ok(hitl.latencyNs > 0)
  // toJSON: the Rust Decision's JSON.
  const full = JSON.parse(JSON.stringify(no))
  assert.equal(full.effect, 'block')
  assert.equal(full.ruleId, 'no-delete')
  assert.ok(Array.isArray(full.evaluated))
  await run.end('aborted')
})

test('string shorthands: startRun(agentId), beforeTool(name, args); afterTool allows without after rules', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  assert.match(run.runId, /^[0-9a-f]{32}$/)
  const d = await run.beforeTool('search', { q: 1 })
  assert.equal(d.allowed, true)
  assert.equal((await run.afterTool(d.callId, { output: { hits: 3 }, durationMs: 4 })).code, 'ALLOWED')
  await run.end('success', { answer: 'done' })
})

test('after-phase rules decide afterTool', async () => {
  const p = policy(
    rule('slow', { kind: 'executionTime', scope: 'tool', op: 'gt', ms: 10 }, 'block', {
      phase: 'tool.after',
      reason: 'Too slow.',
    }),
  )
  const engine = new Engine({ policies: p })
  const run = engine.startRun('bot')
  const d = await run.beforeTool('read', { f: 1 })
  const after = await run.afterTool(d.callId, { output: { text: 'x' }, durationMs: 50 })
  assert.ok(after instanceof Decision)
  assert.deepEqual([after.phase, after.effect, after.ruleId], ['tool.after', 'block', 'slow'])
  const d2 = await run.beforeTool('read', { f: 2 })
  assert.equal((await run.afterTool(d2.callId, { output: 'ok', durationMs: 1 })).effect, 'allow')
  const d3 = await run.beforeTool('read', { f: 3 })
  assert.equal((await run.afterTool(d3.callId, { error: new Error('disk'), durationMs: 1 })).effect, 'allow')
})

test('PolicyError names the JSON path; other errors are ToolgateError or TypeError', () => {
  const bad = policy(
    rule('x', { kind: 'timeGate', timezone: { source: 'static', tz: 'UTC' }, windows: [{ days: ['mon'], start: '25:00', end: '26:00' }] }, 'block'),
  )
  assert.throws(
    () => new Engine({ policies: bad }),
    (e) => e instanceof PolicyError && e instanceof ToolgateError && typeof e.path === 'string' && e.path.length > 0,
  )
  assert.throws(() => new Engine({ policies: path.join(POLICIES, 'nope.json') }), PolicyError)
  assert.throws(() => new Engine({ policies: GATE, failureMode: 'sideways' }), TypeError)
  assert.throws(() => new Engine({ policies: GATE, orgTimezone: 'Mars/Olympus' }), TypeError)
  assert.throws(() => new Engine({ policies: GATE, signalTimeoutMs: 0 }), TypeError)
  assert.throws(() => new Engine({ policies: GATE, state: 'http://nope' }), TypeError)
  const engine = new Engine({ policies: GATE })
  assert.throws(() => engine.startRun({}), TypeError)
  assert.throws(() => engine.registerSignal('k', 42), TypeError)
  assert.throws(() => engine.registerSubjects('[', () => []), ToolgateError)
})

test('beforeTool rejects arguments that are not JSON', async () => {
  const run = new Engine(GATE).startRun('bot')
  const cycle = {}
  cycle.self = cycle
  await assert.rejects(run.beforeTool({ name: 'x', args: cycle }), TypeError)
  await assert.rejects(run.beforeTool({ args: {} }), TypeError)
})

test('shipped policy folder loads; reload swaps atomically and keeps the old on error', async () => {
  const engine = new Engine({ policies: POLICIES + '/customer-support.json' })
  const n = engine.activeRules
  assert.ok(n > 0)
  engine.reload(GATE)
  assert.equal(engine.activeRules, 3)
  assert.throws(() => engine.reload(policy(rule('x', { kind: 'nope' }, 'block'))), PolicyError)
  assert.equal(engine.activeRules, 3)
})

test('ManualClock: set, advance, now; an engine decides time windows by it', async () => {
  const clock = new ManualClock(new Date('2026-03-02T10:00:00Z'))
  assert.equal(clock.now().toISOString(), '2026-03-02T10:00:00.000Z')
  clock.advance(90_000)
  assert.equal(clock.now().toISOString(), '2026-03-02T10:01:30.000Z')
  clock.set('2026-03-07T23:00:00Z')
  assert.equal(clock.now().getUTCDay(), 6)
  assert.throws(() => new ManualClock('not a date'), TypeError)
  const weekend = policy(
    rule('weekend', { kind: 'timeGate', timezone: { source: 'static', tz: 'UTC' }, windows: [{ days: ['sat', 'sun'], start: '00:00', end: '24:00' }] }, 'block', {
      reason: 'Not on weekends.',
    }),
  )
  const engine = new Engine({ policies: weekend, clock, orgTimezone: 'UTC' })
  const run = engine.startRun('bot')
  assert.equal((await run.beforeTool('x')).effect, 'block')
  clock.set(new Date('2026-03-09T12:00:00Z'))
  assert.equal((await run.beforeTool('x')).effect, 'allow')
})

test('guard runs allowed calls, refuses blocked and hitl ones, records errors', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  let ran = 0
  const search = run.guard(async function search({ q }) {
    ran++
    return { hits: [q] }
  })
  assert.equal(search.name, 'search')
  assert.deepEqual(await search({ q: 'a' }), { hits: ['a'] })
  const del = run.guard(() => ran++, { name: 'deleteUser' })
  await assert.rejects(del({ id: 1 }), (e) => e instanceof BlockedError && e.decision.ruleId === 'no-delete')
  const boom = run.guard(() => {
    throw new RangeError('bad')
  }, { name: 'calc' })
  await assert.rejects(boom({}), RangeError)
  const refund = run.guard(() => ran++, { name: 'refund', tags: ['payments'] })
  await assert.rejects(refund({ amount: 500 }), (e) => e instanceof ReviewRequiredError && e.reviewId === e.decision.reviewId)
  assert.equal(ran, 1)
})

test('reviews: list, pending, approve lets the identical call through; deny; unknown id', async () => {
  const engine = new Engine(GATE)
  const d = await engine.startRun('bot').beforeTool('refund', { amount: 500 })
  const pending = await engine.reviews.pending()
  assert.deepEqual(pending.map((r) => r.id), [d.reviewId])
  assert.equal(pending[0].toolName, 'refund')
  const approved = await engine.reviews.approve(d.reviewId)
  assert.equal(approved.status, 'approved')
  const again = await engine.startRun('bot').beforeTool('refund', { amount: 500 })
  assert.equal(again.code, 'ALLOWED_HITL_APPROVED')
  assert.ok(again.allowed)
  const d2 = await engine.startRun('bot').beforeTool('refund', { amount: 900 })
  assert.equal((await engine.reviews.deny(d2.reviewId)).status, 'denied')
  assert.equal((await engine.startRun('bot').beforeTool('refund', { amount: 900 })).code, 'BLOCKED_HITL_DENIED')
  await assert.rejects(engine.reviews.approve('no-such-review'), ToolgateError)
  assert.equal((await engine.reviews.list()).length, 2)
})

test('a run resumes after its review is decided', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  const d = await run.beforeTool('refund', { amount: 500 })
  assert.ok(run.aborted)
  assert.equal((await run.beforeTool('search')).code, 'BLOCKED_RUN_ABORTED')
  await engine.reviews.approve(d.reviewId)
  assert.equal(await run.resume(), true)
  assert.equal((await run.beforeTool('search')).code, 'ALLOWED')
})

test('agentTags and enduser reach the engine (agentSelector)', async () => {
  const p = policy(rule('prod-only', ALWAYS, 'block', { tool: 'deploy' }))
  p.policy.agentSelector = { anyOfTags: ['prod'] }
  const engine = new Engine(p)
  assert.equal((await engine.startRun({ agentId: 'a', agentTags: ['prod'] }).beforeTool('deploy')).effect, 'block')
  assert.equal((await engine.startRun({ agentId: 'a', agentTags: 'dev' }).beforeTool('deploy')).effect, 'allow')
  const run = engine.startRun({ agentId: 'a', enduser: { id: 'u1', tags: { tier: 'gold', n: 3 } } })
  assert.equal((await run.beforeTool('x')).effect, 'allow')
  assert.throws(() => engine.startRun({ agentId: 'a', enduser: { tags: {} } }), TypeError)
})

test('toJSON: whole for the run\'s last 256 decisions, the fields for older fast ones', async () => {
  const run = new Engine(GATE).startRun('bot')
  const first = await run.beforeTool('deleteUser', { id: 0 })
  assert.ok(Array.isArray(first.toJSON().evaluated))
  for (let i = 0; i < 300; i++) await run.beforeTool('search', { i })
  const old = first.toJSON()
  assert.equal(old.evaluated, undefined)
  assert.deepEqual([old.effect, old.ruleId, old.callId], ['block', 'no-delete', first.callId])
  assert.equal(JSON.parse(JSON.stringify(first)).code, 'BLOCKED_RULE')
})

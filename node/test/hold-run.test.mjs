// Issue 33 (Node): the core Run API holds — guard() names positional arguments or refuses,
// resume() keeps a run stopped while its review is pending, afterTool always answers a
// Decision, and a run dropped without end() is ended (reclaimed), not kept for ever.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync, readdirSync } from 'node:fs'
import path from 'node:path'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'

import { Engine, Decision, ReviewRequiredError } from 'toolgate'
import { GATE, tmp } from './helpers.mjs'

setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc')

test('guard: positional arguments are decided by the names argNames gives them', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  const ran = []
  const refund = run.guard((orderId, amount) => ran.push([orderId, amount]), {
    name: 'refund',
    argNames: ['orderId', 'amount'],
  })
  await refund('o-1', 5)
  // 500 is above the hitl threshold: held, whatever the first argument.
  await assert.rejects(refund('o-1', 500), ReviewRequiredError)
  assert.deepEqual(ran, [['o-1', 5]])
  const [review] = await engine.reviews.pending()
  assert.deepEqual(review.args, { orderId: 'o-1', amount: 500 })
})

test('guard: a mapper names the arguments; a function whose arguments cannot be named is refused', async () => {
  const engine = new Engine(GATE)
  let run = engine.startRun('bot')
  const ran = []
  const refund = run.guard((orderId, amount) => ran.push(amount), {
    name: 'refund',
    mapArgs: (orderId, amount) => ({ orderId, amount }),
  })
  await assert.rejects(refund('o-2', 900), ReviewRequiredError)
  assert.deepEqual(ran, [])
  run = engine.startRun('bot') // that run is stopped for review
  // Two positional parameters and no names: the wrapper cannot know what it decides.
  assert.throws(() => run.guard((orderId, amount) => amount, { name: 'refund' }), /argNames/)
  // One parameter: its one argument must be the args object; more arguments, or a value that
  // is not an object, cannot be named.
  const one = run.guard(({ amount }) => ran.push(amount), { name: 'refund' })
  await one({ amount: 5 })
  await assert.rejects(one({ amount: 5 }, 99999), TypeError)
  await assert.rejects(one(99999), TypeError)
  assert.deepEqual(ran, [5])
  assert.throws(() => run.guard(() => 1, { argNames: 'amount' }), TypeError)
  // More positional arguments than names: the extra ones would reach the tool undecided.
  const named = run.guard((a) => a, { name: 'search', argNames: ['q'] })
  await assert.rejects(named('x', 'extra'), TypeError)
})

test('resume() does not lift the stop while the run\'s review is pending; it does once it is decided', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  const held = await run.beforeTool({ name: 'refund', args: { amount: 500 } })
  assert.equal(held.code, 'BLOCKED_HITL_REQUESTED')
  assert.ok(run.aborted)
  assert.equal(await run.resume(), false, 'the review is still pending')
  assert.ok(run.aborted, 'still stopped')
  assert.equal((await run.beforeTool({ name: 'search', args: { q: 'x' } })).code, 'BLOCKED_RUN_ABORTED')
  await engine.reviews.approve(held.reviewId)
  assert.equal(await run.resume(), true)
  assert.ok(!run.aborted)
  assert.equal((await run.beforeTool({ name: 'refund', args: { amount: 500 } })).code, 'ALLOWED_HITL_APPROVED')
  // A review raised by another run for the identical call holds this one too.
  const other = engine.startRun('bot')
  const first = await other.beforeTool({ name: 'refund', args: { amount: 700 } })
  const run2 = engine.startRun('bot')
  const same = await run2.beforeTool({ name: 'refund', args: { amount: 700 } })
  assert.equal(same.code, 'BLOCKED_HITL_PENDING')
  assert.equal(same.reviewId, first.reviewId)
  assert.equal(await run2.resume(), false)
  assert.ok(run2.aborted)
  await engine.reviews.deny(first.reviewId)
  assert.equal(await run2.resume(), true)
  assert.equal((await run2.beforeTool({ name: 'refund', args: { amount: 700 } })).code, 'BLOCKED_HITL_DENIED')
})

test('afterTool answers a Decision whether or not an after-phase rule is in play', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  const d = await run.beforeTool('search', { q: 1 })
  const after = await run.afterTool(d.callId, { output: { hits: 3 }, durationMs: 4 })
  assert.ok(after instanceof Decision)
  assert.deepEqual([after.phase, after.effect, after.code, after.allowed, after.callId], ['tool.after', 'allow', 'ALLOWED', true, d.callId])
  assert.equal(after.toJSON().phase, 'tool.after')
  // A call this run has no pending call for (its result is not recorded): no after-phase
  // rule decides it either.
  const unknown = await run.afterTool('no-such-call', { output: 'x' })
  assert.ok(unknown instanceof Decision)
  assert.deepEqual([unknown.phase, unknown.code, unknown.callId], ['tool.after', 'ALLOWED', 'no-such-call'])
})

test('a run dropped without end() is ended by the engine once collected (status dropped), its state released', async () => {
  const dir = tmp()
  const engine = new Engine({ policies: GATE, audit: dir })
  const n = 50
  ;(() => {
    for (let i = 0; i < n; i++) engine.startRun('bot').beforeTool('search', { q: i }) // then forgotten
  })()
  const ended = () => {
    let count = 0
    for (const f of readdirSync(dir)) {
      for (const line of readFileSync(path.join(dir, f), 'utf8').split('\n')) {
        if (line.includes('"run.ended"') && line.includes('"dropped"')) count++
      }
    }
    return count
  }
  // Collected, then finalized on a later turn of the event loop.
  for (let i = 0; i < 200 && ended() < n; i++) {
    gc()
    await new Promise((r) => setImmediate(r))
    await engine.flush()
  }
  assert.equal(ended(), n)
  await engine.shutdown()
})

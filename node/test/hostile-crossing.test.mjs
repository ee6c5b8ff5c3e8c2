// The crossing as a hostile caller of the addon would use it (session 17's red team): run
// numbers that name no live run, an answer read with another engine's list of strings, a
// second call while a decision is pending, call ids that are not well-formed Unicode.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'

import { Engine } from 'toolgate'
import { policy, rule, ALWAYS } from './helpers.mjs'

const require = createRequire(import.meta.url)
const { native } = require('../lib/addon.js')
const { kNative, kCrossing } = require('../lib/symbols.js')
const decide = native.beforeToolFunction()

/** `name` with no tags and `{}` as args, packed as `lib/run.js` packs it. */
const packed = (name) => `\u0000${name}\u0000{}`

test('a run number is exact: truncated, wrapped, non-finite or of another generation names no run', () => {
  const engine = new Engine(policy(rule('no-drop', ALWAYS, 'block', { tool: 'drop*', reason: 'No.' })))
  const no = engine.startRun('bot')[kNative].no
  assert.equal(typeof decide(no, packed('search')), 'string')
  for (const bad of [no + 0.5, no + 2 ** 32, no + 2 ** 24, no - 2 ** 24, NaN, Infinity, -1, 2 ** 60]) {
    assert.throws(() => decide(bad, packed('search')), /no such run/, String(bad))
    assert.throws(() => native.runBeforeTool(bad, 'search', '{}', [], undefined), /no such run/, String(bad))
  }
})

test("an answer read with another engine's strings is the run's own decision, never missing fields", () => {
  const a = new Engine(policy(rule('a-rule', ALWAYS, 'block', { reason: 'engine A says no' })))
  const b = new Engine(policy(rule('b-rule', ALWAYS, 'block', { tool: 'wire*', reason: 'B: wires blocked' })))
  // A's list of strings learns A's strings first.
  const ra = a.startRun('bot')
  a[kCrossing].read(decide(ra[kNative].no, packed('x')), undefined, ra[kNative])
  const rb = b.startRun('bot')[kNative]
  const d = a[kCrossing].read(decide(rb.no, packed('wireMoney')), undefined, rb)
  assert.deepEqual([d.effect, d.code, d.ruleId, d.reason, d.phase, d.allowed], ['block', 'BLOCKED_RULE', 'b-rule', 'B: wires blocked', 'tool.before', false])
  // B's own list is still whole: its next decision reads right through B.
  const next = b.startRun('bot')
  const e = b[kCrossing].read(decide(next[kNative].no, packed('wireMoney')), undefined, next[kNative])
  assert.deepEqual([e.effect, e.ruleId, e.reason], ['block', 'b-rule', 'B: wires blocked'])
})

test('a second packed call while a decision is pending is refused; the pending one still settles', async () => {
  const engine = new Engine(policy(rule('risky', { kind: 'signal', key: 'risk', op: 'gt', value: 5 }, 'block', { reason: 'Too risky.' })))
  engine.registerSignal('risk', async () => 9)
  const run = engine.startRun('bot')
  const no = run[kNative].no
  assert.equal(decide(no, packed('pay')), '')
  assert.throws(() => decide(no, packed('pay')), /a decision is pending/)
  const d = engine[kCrossing].read(await native.runPending(no), undefined, run[kNative])
  assert.deepEqual([d.effect, d.ruleId, d.callId], ['block', 'risky', 'call-1'])
  // Nothing pending now: the run decides again, numbering on from the first call.
  const next = await run.beforeTool('pay', {})
  assert.equal(next.callId, 'call-2')
})

test('call ids that are not well-formed Unicode are refused (two of them would name one call)', async () => {
  const engine = new Engine(policy(rule('no-drop', ALWAYS, 'block', { tool: 'drop*', reason: 'No.' })))
  const run = engine.startRun('bot')
  for (const id of ['c\ud800', 'c\udc00', '\udfff']) {
    await assert.rejects(run.beforeTool({ name: 'read', args: {}, callId: id }), /not well-formed Unicode/)
    await assert.rejects(run.afterTool(id, { output: 'x' }), /not well-formed Unicode/)
    await assert.rejects(run.beforeLlm('m', [], { callId: id }), /not well-formed Unicode/)
  }
  const ok = await run.beforeTool({ name: 'read', args: {}, callId: 'c\ud83d\ude00' })
  assert.equal(ok.callId, 'c\ud83d\ude00')
})

// The packed crossing of a call (`args NUL name (NUL tag)*`, src/run.rs `runBeforeToolPacked`)
// against the unpacked one (`runBeforeTool`, taken when a name or a tag holds a NUL, or
// called here directly): the same call decides the same, to the whole Rust decision.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'

import { Engine } from 'toolgate'
import { policy, rule, ALWAYS } from './helpers.mjs'

const require = createRequire(import.meta.url)
const { native } = require('../lib/addon.js')
const { kNative, kCrossing } = require('../lib/symbols.js')

const POLICY = policy(
  rule('no-pii-export', ALWAYS, 'block', { tool: 'export*', reason: 'No PII exports.' }),
  {
    ...rule('tagged', ALWAYS, 'hitl', { reason: 'Payments need a human.' }),
    selector: { phase: 'tool.before', tool: { tagsAny: ['payments'] } },
  },
  rule('big', { kind: 'toolArg', type: 'number', op: 'gt', path: 'amount', value: 100 }, 'block', {
    tool: 'refund*',
    reason: 'Too big.',
  }),
)

// What a decision says, without what differs from call to call (its latency, a new review's id).
function whole(d) {
  const { latencyNs, ...rest } = d.toJSON()
  if (rest.hitl) rest.hitl = { ...rest.hitl, reviewId: typeof rest.hitl.reviewId }
  return rest
}

const CALLS = [
  ['search', { q: 'x' }, undefined],
  ['search', undefined, ['read', 'pii']],
  ['exportUsers', { all: true }, ['pii']],
  ['refund_small', { amount: 5, note: 'a\u0001b' }, []],
  ['refund_big', { amount: 500 }, ['']],
  ['pay', { amount: 1 }, ['x', 'payments']],
  ['', null, ['', '']],
]

test('a call packed into one string decides as the same call crossed unpacked', async () => {
  for (const [name, args, tags] of CALLS) {
    // Through the package (packed), then through the unpacked native call, each in an engine
    // of its own (a review raised by one would be found pending by the other).
    const packed = await new Engine(POLICY).startRun('bot').beforeTool({ name, args, tags })
    const engine = new Engine(POLICY)
    const run = engine.startRun('bot')
    const n = run[kNative]
    const r = native.runBeforeTool(n.no, name, args === undefined ? undefined : JSON.stringify(args), tags, undefined)
    const plain = engine[kCrossing].read(r, undefined, n)
    assert.deepEqual(whole(packed), whole(plain), `${JSON.stringify(name)} ${JSON.stringify(tags)}`)
    for (const k of ['callId', 'phase', 'effect', 'code', 'reason', 'ruleId', 'allowed', 'abortRun', 'shadowEffect', 'error']) {
      assert.deepEqual(packed[k], plain[k], k)
    }
    assert.equal(typeof packed.reviewId, typeof plain.reviewId)
  }
})

test('names and tags holding a NUL are not packed, and decide as given', async () => {
  const engine = new Engine(POLICY)
  // A run per call: the hitl stops its run.
  const run = { beforeTool: (...a) => engine.startRun('bot').beforeTool(...a) }
  const a = await run.beforeTool({ name: 'pay', args: {}, tags: ['a\u0000payments', 'payments'] })
  assert.equal(a.ruleId, 'tagged')
  const b = await run.beforeTool({ name: 'pay', args: {}, tags: ['a\u0000payments'] })
  assert.deepEqual([b.effect, b.ruleId], ['allow', null])
  const c = await run.beforeTool({ name: 'export\u0000x', args: {} })
  assert.deepEqual([c.effect, c.ruleId], ['block', 'no-pii-export'])
  const d = await run.beforeTool('search\u0000', { q: 1 })
  assert.equal(d.effect, 'allow')
  // The args' own NULs are escaped in JSON: packed as any other.
  const e = await run.beforeTool({ name: 'refund', args: { amount: 500, note: '\u0000' } })
  assert.equal(e.ruleId, 'big')
})

test('names, tags and args beyond ASCII (and a lone surrogate) decide packed as unpacked', async () => {
  const odd = [
    ['zahlungsübersicht', { q: 'Grüße 東京 🙂' }, ['geld', 'ñ']],
    ['exportÜsers', { all: true }, ['pii']],
    // (A lone surrogate inside the args is refused as not JSON by both crossings: serde_json.)
    ['search\ud800', { q: 'no surrogate here' }, ['a\udfff']],
    ['pay', { amount: 1 }, ['x', 'payments', 'ü']],
  ]
  for (const [name, args, tags] of odd) {
    const packed = await new Engine(POLICY).startRun('bot').beforeTool({ name, args, tags })
    const engine = new Engine(POLICY)
    const run = engine.startRun('bot')
    const n = run[kNative]
    const r = native.runBeforeTool(n.no, name, JSON.stringify(args), tags, undefined)
    const plain = await (r instanceof Promise ? r.then((t) => engine[kCrossing].read(t, undefined, n)) : engine[kCrossing].read(r, undefined, n))
    assert.deepEqual(whole(packed), whole(plain), JSON.stringify(name))
  }
})

test('many tags (a count past one byte, and past what is packed) decide packed as unpacked', async () => {
  for (const n of [0, 1, 63, 64, 127, 128, 300, 0xd800]) {
    const tags = Array.from({ length: n }, (_, i) => (i === n - 1 ? 'payments' : `t${i}`))
    const d = await new Engine(POLICY).startRun('bot').beforeTool({ name: 'pay', args: { amount: 1 }, tags })
    assert.equal(d.ruleId, n === 0 ? null : 'tagged', `${n} tags`)
  }
})

// JavaScript callbacks (signals, subjects, custom conditions): sync or async; one that throws,
// rejects, hangs or answers something else is missing data with an error, never a crash or an
// unhandled rejection; 1,000 concurrent decisions waiting on an async signal are not serialised.
import { test } from 'node:test'
import assert from 'node:assert/strict'

import { Engine } from 'toolgate'
import { GATE, maxCalls, policy, rule } from './helpers.mjs'

const unhandled = []
process.on('unhandledRejection', (e) => unhandled.push(e))

test('1,000 concurrent beforeTool calls with an async signal are all in flight at once', async () => {
  const n = 1000
  const engine = new Engine({ policies: GATE, signalTimeoutMs: 60_000 })
  let inside = 0
  let most = 0
  let open
  const everyoneIn = new Promise((resolve) => (open = resolve))
  // Each signal call waits until all 1,000 are pending at once: were decisions serialised (or
  // the event loop blocked), the first would wait for the others until the timeout (missing
  // data, and the decision would be allow, not block).
  engine.registerSignal('crm.vip', async ({ user }) => {
    inside++
    most = Math.max(most, inside)
    if (inside === n) open()
    await everyoneIn
    inside--
    return user >= 0
  })
  const run = engine.startRun('bot')
  let ticks = 0
  let ticking = true
  const ticker = (async () => {
    while (ticking) {
      ticks++
      await new Promise((r) => setImmediate(r))
    }
  })()
  const decisions = await Promise.all(
    Array.from({ length: n }, (_, i) => run.beforeTool({ name: 'close_account', args: { user: i } })),
  )
  ticking = false
  await ticker
  assert.equal(most, n)
  assert.deepEqual(new Set(decisions.map((d) => d.effect)), new Set(['block']))
  assert.ok(decisions.every((d) => d.toJSON().signals[0].value === true))
  assert.ok(ticks > 0, 'the event loop kept turning while decisions were in flight')
})

test('a sync signal decides; the engine passes the resolved args', async () => {
  const engine = new Engine({ policies: GATE })
  const seen = []
  engine.registerSignal('crm.vip', (args) => {
    seen.push(args)
    return args.user % 2 === 0
  })
  const run = engine.startRun('bot')
  assert.equal((await run.beforeTool('close_account', { user: 2 })).effect, 'block')
  assert.equal((await run.beforeTool('close_account', { user: 3 })).effect, 'allow')
  assert.deepEqual(seen, [{ user: 2 }, { user: 3 }])
})

for (const [label, fn, expect] of [
  ['throws', () => { throw new Error('CRM is down') }, /Error: CRM is down/],
  ['rejects', async () => { throw new TypeError('no CRM') }, /TypeError: no CRM/],
  ['rejects with a non-Error', () => Promise.reject('nope'), /nope/],
  ['returns undefined', () => undefined, /undefined/],
  ['returns a cycle', () => { const o = {}; o.o = o; return o }, /circular/i],
  ['hangs past the timeout', () => new Promise(() => {}), /timed out|timeout/i],
]) {
  test(`a signal that ${label} is missing data with its error`, async () => {
    const engine = new Engine({ policies: GATE, signalTimeoutMs: 50 })
    engine.registerSignal('crm.vip', fn)
    const d = await engine.startRun('bot').beforeTool('close_account', { user: 1 })
    const sig = d.toJSON().signals[0]
    assert.match(String(sig.error), expect, JSON.stringify(sig))
    assert.equal(d.effect, 'allow') // onMissing: the rule's default (ignore) → not triggered
    assert.deepEqual(unhandled, [])
  })
}

const FRAUD_POLICY = policy(
  rule('fraud', { kind: 'custom', name: 'fraud.suspect', args: { limit: 100 } }, 'block', {
    tool: 'refund',
    reason: 'Suspected fraud.',
    onMissing: 'block',
  }),
)

function missing(d) {
  const ev = d.toJSON().evaluated
  assert.equal(ev[0].ruleId, 'fraud')
  return ev[0].missing ?? []
}

test('custom conditions: sync and async, see the call; errors are missing data', async () => {
  const engine = new Engine({ policies: FRAUD_POLICY, signalTimeoutMs: 50 })
  const seen = []
  engine.registerCondition('fraud.suspect', (args, call) => {
    seen.push([args, call])
    return call.args.amount > args.limit
  })
  const run = engine.startRun({ agentId: 'support-bot', runId: 'r-custom', enduser: { id: 'cust-1', tags: { tier: 'gold' } }, agentTags: ['prod', 'eu'] })
  let d = await run.beforeTool({ name: 'refund', args: { amount: 500 }, tags: ['payments'] })
  assert.deepEqual([d.effect, d.ruleId, missing(d)], ['block', 'fraud', []])
  assert.equal((await run.beforeTool('refund', { amount: 5 })).effect, 'allow')
  assert.deepEqual(seen[0], [
    { limit: 100 },
    {
      toolName: 'refund', toolTags: ['payments'], args: { amount: 500 }, runId: 'r-custom', agentId: 'support-bot',
      agentTags: ['prod', 'eu'], sessionId: null, enduser: { id: 'cust-1', tags: { tier: 'gold' } },
    },
  ])
  engine.registerCondition('fraud.suspect', async (args, call) => {
    await new Promise((r) => setTimeout(r, 1))
    return call.args.amount > args.limit
  })
  assert.equal((await run.beforeTool('refund', { amount: 101 })).effect, 'block')
  assert.equal((await run.beforeTool('refund', { amount: 100 })).effect, 'allow')
  for (const [fn, text] of [
    [() => { throw new Error('service down') }, 'Error: service down'],
    [async () => Promise.reject(new Error('later')), 'Error: later'],
    [() => 1, 'boolean'],
    [() => new Promise(() => {}), 'timed out'],
  ]) {
    engine.registerCondition('fraud.suspect', fn)
    d = await run.beforeTool('refund', { amount: 1 })
    assert.equal(d.effect, 'block')
    assert.match(missing(d).join(' '), new RegExp(text))
  }
  assert.deepEqual(unhandled, [])
})

test('subject extractors: sync and async; a throwing one is recorded, not fatal', async () => {
  const p = policy(
    rule('need-customer', { kind: 'not', not: { kind: 'requireSubject', subjectType: 'customer', idSystem: 'crm' } }, 'block', {
      tool: 'get_customer*',
      reason: 'Needs an identified customer.',
    }),
  )
  const engine = new Engine({ policies: p, signalTimeoutMs: 200 })
  const got = []
  engine.registerSubjects('get_customer', async (toolName, args) => {
    got.push([toolName, args])
    await new Promise((r) => setTimeout(r, 1))
    return [{ subjectType: 'customer', id: String(args.id), idSystem: 'crm' }]
  })
  engine.registerSubjects('get_customer_orders', (toolName, args) => [{ subjectType: 'customer', id: args.id, idSystem: 'crm' }])
  engine.registerSubjects('get_customer_notes', () => {
    throw new Error('extractor broke')
  })
  const run = engine.startRun('bot')
  assert.equal((await run.beforeTool('get_customer', { id: 7 })).effect, 'allow')
  assert.deepEqual(got, [['get_customer', { id: 7 }]])
  assert.equal((await run.beforeTool('get_customer_orders', { id: 8 })).effect, 'allow')
  const d = await run.beforeTool('get_customer_notes', { id: 9 })
  assert.equal(d.effect, 'block') // no subjects: the requirement fails
  assert.match(JSON.stringify(d.toJSON()), /extractor broke/)
  assert.deepEqual(unhandled, [])
})

test('maxCalls stays exact with many concurrent decisions', async () => {
  const engine = new Engine(maxCalls(50))
  const run = engine.startRun('bot')
  const ds = await Promise.all(Array.from({ length: 200 }, (_, i) => run.beforeTool('search', { q: i })))
  assert.equal(ds.filter((d) => d.allowed).length, 50)
})

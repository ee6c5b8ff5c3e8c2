// Issue 33 (Node): toolgate/langchain holds, through LangChain v1's createAgent with its fake
// tool-calling model: the arguments decided are those the tool receives (after its schema
// coerced them), `.call()` and `.func` are governed, tools added to the list later are
// governed, huge integers are decided.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { z } from 'zod'

import { tool } from '@langchain/core/tools'
import { HumanMessage, ToolMessage } from '@langchain/core/messages'
import { createAgent, FakeToolCallingModel } from 'langchain'
import { Engine } from 'toolgate'
import { wrapTools } from 'toolgate/langchain'
import { GATE, policy, rule } from './helpers.mjs'

function refundTool(ran, schema = z.object({ amount: z.coerce.number() })) {
  return tool(
    async ({ amount }) => {
      ran.push(amount)
      return `refunded ${amount}`
    },
    { name: 'refund', description: 'Refund', schema },
  )
}

test('LangChain.js: a number sent as a string is decided as the number the tool receives', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  const ran = []
  const model = new FakeToolCallingModel({ toolCalls: [[{ name: 'refund', args: { amount: '5000' }, id: 'tc1' }], []] })
  const agent = createAgent({ model, tools: wrapTools([refundTool(ran)], run) })
  const out = await agent.invoke({ messages: [new HumanMessage('refund')] })
  assert.deepEqual(ran, [], 'the coerced 5000 is held for review')
  const answer = out.messages.find((m) => m instanceof ToolMessage)
  assert.equal(answer.status, 'error')
  assert.match(answer.content, /BLOCKED_HITL_REQUESTED, rule big-refund/)
  const [review] = await engine.reviews.pending()
  assert.deepEqual(review.args, { amount: 5000 })
})

test('LangChain.js: .call() and .func of a wrapped tool are governed', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  const ran = []
  const [refund] = wrapTools([refundTool(ran)], run)
  const viaCall = await refund.call({ amount: 500 })
  assert.match(viaCall, /^toolgate blocked this call: .*big-refund/)
  const viaCallToolCall = await refund.call({ name: 'refund', args: { amount: 600 }, id: 'tc7', type: 'tool_call' })
  assert.ok(viaCallToolCall instanceof ToolMessage)
  assert.equal(viaCallToolCall.status, 'error')
  assert.equal(viaCallToolCall.tool_call_id, 'tc7')
  const viaFunc = await refund.func({ amount: 700 })
  assert.match(viaFunc, /^toolgate blocked this call/)
  assert.deepEqual(ran, [])
  // Allowed calls run once, decided once (a fresh run: that one is stopped for review).
  const run2 = engine.startRun('bot')
  let decided = 0
  const before = run2.beforeTool.bind(run2)
  run2.beforeTool = (call) => {
    decided++
    return before(call)
  }
  const [refund2] = wrapTools([refundTool(ran)], run2)
  assert.equal(await refund2.call({ amount: 5 }), 'refunded 5')
  assert.equal(await refund2.func({ amount: 6 }), 'refunded 6')
  assert.equal((await refund2.invoke({ name: 'refund', args: { amount: 7 }, id: 'tc8', type: 'tool_call' })).content, 'refunded 7')
  assert.deepEqual(ran, [5, 6, 7])
  assert.equal(decided, 3, 'each call decided exactly once')
})

test('LangChain.js: a tool pushed onto the wrapped list later is governed too', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  const ran = []
  const tools = wrapTools([], run)
  tools.push(refundTool(ran))
  const model = new FakeToolCallingModel({ toolCalls: [[{ name: 'refund', args: { amount: 900 }, id: 'tc1' }], []] })
  await createAgent({ model, tools }).invoke({ messages: [new HumanMessage('refund')] })
  assert.deepEqual(ran, [])
  assert.equal((await engine.reviews.pending()).length, 1)
})

test('LangChain.js: integers beyond 64 bits are decided (as numbers), never a crash', async () => {
  const engine = new Engine(
    policy(rule('big-credit', { kind: 'toolArg', type: 'number', op: 'gt', path: 'cents', value: 1000 }, 'block', { tool: 'credit' })),
  )
  const run = engine.startRun('bot')
  const ran = []
  const credit = tool(
    async ({ cents }) => {
      ran.push(cents)
      return 'credited'
    },
    { name: 'credit', description: 'Credit', schema: z.object({ cents: z.union([z.string(), z.number()]).transform((v) => BigInt(v)) }) },
  )
  const [governed] = wrapTools([credit], run)
  const big = '123456789012345678901234567890'
  const out = await governed.invoke({ name: 'credit', args: { cents: big }, id: 'tc1', type: 'tool_call' })
  assert.equal(out.status, 'error')
  assert.match(out.content, /BLOCKED_RULE, rule big-credit/)
  // Past 2^1024 (a double's range): decided as the largest number, not as missing data.
  const huge = await governed.invoke({ cents: '1' + '0'.repeat(400) })
  assert.match(huge, /BLOCKED_RULE, rule big-credit/)
  const ok = await governed.invoke({ cents: 7 })
  assert.equal(ok, 'credited')
  assert.deepEqual(ran, [7n])
})

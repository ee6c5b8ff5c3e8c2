// toolgate/langchain: wrapTools on LangChain.js tools, driven by @langchain/core's fake chat
// model (tool calls from the model, each invoked as a ToolNode does: tool.invoke(toolCall)).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { z } from 'zod'

import { tool } from '@langchain/core/tools'
import { ToolMessage, HumanMessage } from '@langchain/core/messages'
import { FakeStreamingChatModel } from '@langchain/core/utils/testing'
import { Engine } from 'toolgate'
import { createAgent, FakeToolCallingModel } from 'langchain'
import { wrapTools, toolgateMiddleware } from 'toolgate/langchain'
import { GATE } from './helpers.mjs'

function lcTools(ran) {
  return [
    tool(async ({ q }) => { ran.push(['search', q]); return `hits for ${q}` }, { name: 'search', description: 'Search', schema: z.object({ q: z.string() }) }),
    tool(async ({ id }) => { ran.push(['deleteUser', id]); return 'deleted' }, { name: 'deleteUser', description: 'Delete a user', schema: z.object({ id: z.number() }) }),
    tool(async ({ amount }) => { ran.push(['refund', amount]); return 'refunded' }, { name: 'refund', description: 'Refund', schema: z.object({ amount: z.number() }) }),
    tool(async () => { throw new Error('KB offline') }, { name: 'kb', description: 'KB', schema: z.object({}) }),
  ]
}

test('LangChain.js: allowed calls run, a blocked one answers an error ToolMessage, hitl names the review', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  const ran = []
  const tools = wrapTools(lcTools(ran), run)
  const calls = [
    { name: 'search', args: { q: 'returns' }, id: 'tc1', type: 'tool_call' },
    { name: 'deleteUser', args: { id: 7 }, id: 'tc2', type: 'tool_call' },
    { name: 'refund', args: { amount: 500 }, id: 'tc3', type: 'tool_call' },
  ]
  const model = new FakeStreamingChatModel({ chunks: [{ content: '', tool_calls: calls }] }).bindTools(tools)
  // The model sees the original tools (name, description, schema).
  assert.deepEqual(model.config.tools.map((t) => t.function.name), ['search', 'deleteUser', 'refund', 'kb'])
  const ai = await model.invoke([new HumanMessage('go')])
  assert.equal(ai.tool_calls.length, 3)
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]))
  const answers = []
  for (const call of ai.tool_calls) answers.push(await byName[call.name].invoke({ ...call, type: 'tool_call' }))
  assert.ok(answers.every((m) => m instanceof ToolMessage))
  assert.deepEqual(answers.map((m) => [m.tool_call_id, m.status]), [['tc1', 'success'], ['tc2', 'error'], ['tc3', 'error']])
  assert.equal(answers[0].content, 'hits for returns')
  assert.equal(answers[1].content, 'toolgate blocked this call: Deleting is not allowed. [BLOCKED_RULE, rule no-delete]')
  const [review] = await engine.reviews.pending()
  assert.match(answers[2].content, new RegExp(`BLOCKED_HITL_REQUESTED, rule big-refund\\]; it waits for human review ${review.id}`))
  assert.deepEqual(ran, [['search', 'returns']])
  assert.ok(run.aborted)
})

test('LangChain.js: bare-args invoke answers the text; a failing tool is recorded and rethrown', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  const ran = []
  const [search, del, , kb] = wrapTools(lcTools(ran), run)
  assert.equal(await search.invoke({ q: 'x' }), 'hits for x')
  assert.equal(await del.invoke({ id: 1 }), 'toolgate blocked this call: Deleting is not allowed. [BLOCKED_RULE, rule no-delete]')
  await assert.rejects(kb.invoke({}), /KB offline/)
  assert.deepEqual(ran, [['search', 'x']])
  assert.throws(() => wrapTools([{}], run), TypeError)
})

test('LangChain.js createAgent: after a hitl refusal toolgateMiddleware ends the agent before the model is asked again', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  const ran = []
  // The model's turns: a refund held for review, then (were it asked again) a search.
  const model = new FakeToolCallingModel({
    toolCalls: [[{ name: 'refund', args: { amount: 500 }, id: 'tc1' }], [{ name: 'search', args: { q: 'more' }, id: 'tc2' }], []],
  })
  const agent = createAgent({ model, tools: wrapTools(lcTools(ran), run), middleware: [toolgateMiddleware(run)] })
  const out = await agent.invoke({ messages: [new HumanMessage('refund order 1')] })
  assert.ok(run.aborted)
  assert.deepEqual(ran, [])
  assert.equal(model.index, 1, 'the model was asked once')
  const last = out.messages.at(-1)
  assert.ok(last instanceof ToolMessage)
  assert.equal(last.status, 'error')
  const [review] = await engine.reviews.pending()
  assert.match(last.content, new RegExp(`BLOCKED_HITL_REQUESTED, rule big-refund\\]; it waits for human review ${review.id}`))
  // Without the middleware the agent goes on to ask the model again (its calls refused).
  const run2 = engine.startRun('bot')
  const model2 = new FakeToolCallingModel({
    toolCalls: [[{ name: 'refund', args: { amount: 500 }, id: 'tc1' }], [{ name: 'search', args: { q: 'more' }, id: 'tc2' }], []],
  })
  await createAgent({ model: model2, tools: wrapTools(lcTools(ran), run2) }).invoke({ messages: [new HumanMessage('refund order 1')] })
  assert.equal(model2.index, 0, 'asked three times (the index wraps around)')
  assert.deepEqual(ran, [])
  assert.throws(() => toolgateMiddleware({}), TypeError)
})

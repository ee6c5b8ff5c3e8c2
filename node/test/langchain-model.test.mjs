// toolgate/langchain's model side: toolgateMiddleware(run) in LangChain v1's createAgent gates
// and records every model call (langchain's FakeToolCallingModel, reporting usage_metadata).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import path from 'node:path'
import { z } from 'zod'

import { tool } from '@langchain/core/tools'
import { AIMessage, HumanMessage, ToolMessage } from '@langchain/core/messages'
import { Engine } from 'toolgate'
import { createAgent, FakeToolCallingModel } from 'langchain'
import { wrapTools, toolgateMiddleware } from 'toolgate/langchain'
import { GATE, auditEvents, budget, modelReview, tmp } from './helpers.mjs'

// langchain's fake tool-calling model, reporting `usage` (a function of the call's number).
class CountingModel extends FakeToolCallingModel {
  constructor(fields, usage = () => ({ input_tokens: 10, output_tokens: 5, total_tokens: 15 }), counter = { calls: 0 }) {
    super(fields)
    this.model = 'fake-chat'
    this.counter = counter
    this.usage = usage
  }
  get calls() {
    return this.counter.calls
  }
  bindTools(tools) {
    const bound = new CountingModel({ toolCalls: this.toolCalls, indexRef: this.indexRef }, this.usage, this.counter)
    bound.tools = [...this.tools, ...tools]
    return bound
  }
  async _generate(messages, options, runManager) {
    this.counter.calls++
    const r = await super._generate(messages, options, runManager)
    r.generations[0].message.usage_metadata = this.usage(this.counter.calls)
    return r
  }
}

function lcTools(ran) {
  return [
    tool(async ({ amount }) => (ran.push(['refund', amount]), 'refunded'), { name: 'refund', description: 'Refund', schema: z.object({ amount: z.number() }) }),
    tool(async ({ id }) => (ran.push(['deleteUser', id]), 'deleted'), { name: 'deleteUser', description: 'Delete', schema: z.object({ id: z.number() }) }),
  ]
}

const twoRefunds = () => ({
  toolCalls: [[{ name: 'refund', args: { amount: 5 }, id: 'tc1' }], [{ name: 'refund', args: { amount: 6 }, id: 'tc2' }], []],
})

test('LangChain.js createAgent: every model call records its usage (tokens, model, duration, cost)', async () => {
  const audit = path.join(tmp(), 'audit')
  const engine = new Engine({ policies: GATE, audit })
  const run = engine.startRun('bot')
  const ran = []
  const model = new CountingModel(twoRefunds())
  const agent = createAgent({ model, tools: wrapTools(lcTools(ran), run), middleware: [toolgateMiddleware(run, { prices: { 'fake-chat': { in: 4, out: 8 } } })] })
  await agent.invoke({ messages: [new HumanMessage('refund twice')] })
  assert.equal(model.calls, 3)
  await run.end('success')
  await engine.shutdown()
  const results = auditEvents(audit).filter((e) => e.kind === 'llm.result')
  assert.equal(results.length, 3)
  for (const r of results) {
    assert.deepEqual([r.tokensIn, r.tokensOut, r.model], [10, 5, 'fake-chat'])
    assert.ok(Math.abs(r.costUsd - 80 / 1e6) < 1e-12)
  }
})

test('LangChain.js createAgent: a spent budget ends the agent with the refusal; the model is not called', async () => {
  const audit = path.join(tmp(), 'audit')
  const engine = new Engine({ policies: budget(15), audit })
  const run = engine.startRun('bot')
  const ran = []
  const model = new CountingModel(twoRefunds())
  const agent = createAgent({ model, tools: wrapTools(lcTools(ran), run), middleware: [toolgateMiddleware(run)] })
  const out = await agent.invoke({ messages: [new HumanMessage('refund twice')] })
  assert.equal(model.calls, 2, 'the third model call is not made')
  const last = out.messages.at(-1)
  assert.ok(last instanceof AIMessage)
  assert.match(String(last.content), /^toolgate blocked this call: Token budget spent\. \[BLOCKED_RULE, rule token-budget\]/)
  await engine.shutdown()
  const events = auditEvents(audit)
  assert.equal(events.filter((e) => e.kind === 'llm.decision').at(-1).decision.effect, 'block')
  assert.equal(events.find((e) => e.kind === 'run.ended').status, 'budget_exceeded')
})

test('LangChain.js createAgent: an llm.before hitl ends the turn naming the review; the run is stopped', async () => {
  const engine = new Engine(modelReview(1))
  const run = engine.startRun('bot')
  const model = new CountingModel(twoRefunds())
  const agent = createAgent({ model, tools: wrapTools(lcTools([]), run), middleware: [toolgateMiddleware(run)] })
  const out = await agent.invoke({ messages: [new HumanMessage('refund twice')] })
  assert.equal(model.calls, 1)
  const [review] = await engine.reviews.pending()
  assert.equal(review.ruleId, 'model-review')
  assert.match(String(out.messages.at(-1).content), new RegExp(`it waits for human review ${review.id}`))
  assert.ok(run.aborted)
})

test('LangChain.js: a blocked tool call still reaches the model as the refusal (with the model side on)', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  const ran = []
  const model = new CountingModel({ toolCalls: [[{ name: 'deleteUser', args: { id: 7 }, id: 'tc1' }], []] })
  const agent = createAgent({ model, tools: wrapTools(lcTools(ran), run), middleware: [toolgateMiddleware(run)] })
  const out = await agent.invoke({ messages: [new HumanMessage('delete 7')] })
  assert.deepEqual(ran, [])
  const refusal = out.messages.find((m) => m instanceof ToolMessage)
  assert.equal(refusal.content, 'toolgate blocked this call: Deleting is not allowed. [BLOCKED_RULE, rule no-delete]')
  assert.equal(model.calls, 2, 'the model read the refusal')
})

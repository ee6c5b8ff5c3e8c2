// toolgate/openai-agents through the OpenAI Agents JS SDK's own run loop (`Runner.run`), with a
// scripted offline model implementing the SDK's `Model` interface (the SDK's own tests drive
// the runner the same way; no network, no key).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import path from 'node:path'
import { z } from 'zod'

import { Agent, Runner, tool } from '@openai/agents'
import { Engine, BlockedError, ReviewRequiredError } from 'toolgate'
import { govern, settled, LlmBlockedError } from 'toolgate/openai-agents'
import { GATE, auditEvents, budget, modelReview, tmp } from './helpers.mjs'
import { ScriptedModel } from './models.mjs'

const ran = []
const refund = tool({
  name: 'refund',
  description: 'Refunds an order.',
  parameters: z.object({ amount: z.number() }),
  execute: async ({ amount }) => {
    ran.push(['refund', amount])
    return `refunded ${amount}`
  },
})
const deleteUser = tool({
  name: 'delete_user',
  description: 'Deletes a user.',
  parameters: z.object({ id: z.string() }),
  execute: async ({ id }) => {
    ran.push(['delete_user', id])
    return 'deleted'
  },
})

const runner = new Runner({ tracingDisabled: true })

function setup(policies, steps, opts = {}) {
  const audit = path.join(tmp(), 'audit')
  const engine = new Engine({ policies, audit })
  const model = new ScriptedModel(steps, opts)
  const agent = new Agent({ name: 'support', instructions: 'Help the customer.', model, tools: [refund, deleteUser] })
  const governed = govern(agent, engine, { agentId: 'support-bot', enduser: { id: 'cust-1' }, prices: opts.prices })
  return { engine, model, agent, governed, audit }
}

function toolResults(request) {
  return (Array.isArray(request.input) ? request.input : []).filter((i) => i.type === 'function_call_result')
}

function resultText(item) {
  return typeof item.output === 'string' ? item.output : item.output?.text
}

test('a blocked tool call does not run and reaches the model as the refusal text', async () => {
  ran.length = 0
  const { engine, model, governed, agent } = setup(GATE, [{ calls: [['c1', 'delete_user', { id: 'u9' }]] }, { text: 'ok' }])
  const result = await runner.run(governed, 'delete u9')
  assert.equal(result.finalOutput, 'ok')
  assert.deepEqual(ran, [])
  const [r] = toolResults(model.requests[1])
  assert.match(resultText(r), /^toolgate blocked this call: Deleting is not allowed\. \[BLOCKED_RULE, rule no-delete\]/)
  assert.notEqual(governed, agent, 'a governed copy')
  assert.equal(agent.tools[1], deleteUser, 'the original agent is left as it is')
  await engine.shutdown()
})

test('hitl is an SDK approval interruption: approving it approves the review and the call runs', async () => {
  ran.length = 0
  const { engine, model, governed } = setup(GATE, [{ calls: [['c1', 'refund', { amount: 500 }]] }, { text: 'refunded' }])
  let result = await runner.run(governed, 'refund 500')
  assert.equal(result.interruptions.length, 1)
  assert.equal(result.interruptions[0].rawItem.name, 'refund')
  const [pending] = await engine.reviews.pending()
  assert.equal(pending.toolName, 'refund')
  assert.deepEqual(ran, [])
  result.state.approve(result.interruptions[0])
  result = await runner.run(governed, result.state)
  assert.equal(result.finalOutput, 'refunded')
  assert.deepEqual(ran, [['refund', 500]])
  const [review] = await engine.reviews.list()
  assert.equal(review.status, 'approved')
  assert.equal(resultText(toolResults(model.requests[1])[0]), 'refunded 500')
  await engine.shutdown()
})

test('rejecting the interruption denies the review; the tool does not run', async () => {
  ran.length = 0
  const { engine, governed } = setup(GATE, [{ calls: [['c1', 'refund', { amount: 700 }]] }, { text: 'not refunded' }])
  let result = await runner.run(governed, 'refund 700')
  result.state.reject(result.interruptions[0])
  result = await runner.run(governed, result.state)
  assert.equal(result.finalOutput, 'not refunded')
  assert.deepEqual(ran, [])
  const [review] = await engine.reviews.list()
  assert.equal(review.status, 'denied')
  await engine.shutdown()
})

test('every model call records its usage (llm.result: tokens, model, duration, cost from prices)', async () => {
  const { engine, governed, audit } = setup(GATE, [{ calls: [['c1', 'refund', { amount: 5 }]] }, { text: 'done' }], {
    prices: { 'fake-*': { in: 2, out: 10 } },
  })
  await runner.run(governed, 'refund 5')
  await settled(governed)
  await engine.shutdown()
  const results = auditEvents(audit).filter((e) => e.kind === 'llm.result')
  assert.equal(results.length, 2)
  for (const r of results) {
    assert.equal(r.tokensIn, 10)
    assert.equal(r.tokensOut, 5)
    assert.equal(r.model, 'fake-gpt')
    assert.ok(r.durationMs >= 0)
    assert.ok(Math.abs(r.costUsd - (10 * 2 + 5 * 10) / 1e6) < 1e-12)
  }
  const ended = auditEvents(audit).find((e) => e.kind === 'run.ended')
  assert.equal(ended.status, 'success')
})

test('the llm.before gate: a spent token budget stops the run before the next model call', async () => {
  const steps = [{ calls: [['c1', 'refund', { amount: 5 }]] }, { calls: [['c2', 'refund', { amount: 6 }]] }, { text: 'never' }]
  const { engine, model, governed, audit } = setup(budget(15), steps)
  await assert.rejects(runner.run(governed, 'refund twice'), (e) => e instanceof LlmBlockedError && e instanceof BlockedError && /Token budget spent/.test(e.message))
  assert.equal(model.requests.length, 2, 'the third model call is not made')
  await engine.shutdown()
  const events = auditEvents(audit)
  const gate = events.filter((e) => e.kind === 'llm.decision')
  assert.equal(gate.at(-1).decision.effect, 'block')
  assert.equal(events.find((e) => e.kind === 'run.ended').status, 'budget_exceeded')
})

test('an llm.before hitl pauses the run like a tool hitl (ReviewRequiredError, review pending)', async () => {
  const steps = [{ calls: [['c1', 'refund', { amount: 5 }]] }, { text: 'never' }]
  const { engine, model, governed } = setup(modelReview(1), steps)
  await assert.rejects(runner.run(governed, 'refund'), (e) => e instanceof ReviewRequiredError && e.reviewId !== null)
  assert.equal(model.requests.length, 1)
  const [review] = await engine.reviews.pending()
  assert.equal(review.ruleId, 'model-review')
  await engine.shutdown()
})

test('streaming runs record the usage of response_done', async () => {
  const { engine, governed, audit } = setup(GATE, [{ text: 'streamed' }], { usage: { inputTokens: 7, outputTokens: 3 } })
  const result = await runner.run(governed, 'hi', { stream: true })
  for await (const _ of result) {
    // consume
  }
  await result.completed
  assert.equal(result.finalOutput, 'streamed')
  await engine.shutdown()
  const [r] = auditEvents(audit).filter((e) => e.kind === 'llm.result')
  assert.equal(r.tokensIn, 7)
  assert.equal(r.tokensOut, 3)
})

test('a model given by name is resolved by modelProvider; its name is the one recorded', async () => {
  const audit = path.join(tmp(), 'audit')
  const engine = new Engine({ policies: GATE, audit })
  const model = new ScriptedModel([{ text: 'hi' }])
  const asked = []
  const modelProvider = { getModel: async (name) => (asked.push(name), model) }
  const governed = govern(new Agent({ name: 'named', model: 'gpt-4.1-mini' }), engine, { modelProvider })
  const result = await runner.run(governed, 'hello')
  assert.equal(result.finalOutput, 'hi')
  assert.deepEqual(asked, ['gpt-4.1-mini'])
  await settled(governed)
  await engine.shutdown()
  const [r] = auditEvents(audit).filter((e) => e.kind === 'llm.result')
  assert.equal(r.model, 'gpt-4.1-mini')
  assert.equal(model.requests[0].input[0].content, 'hello')
})

test('handoffs: each governed agent has its own run; the one that handed off ends "handoff", the last "success"', async () => {
  const audit = path.join(tmp(), 'audit')
  const engine = new Engine({ policies: GATE, audit })
  const billingModel = new ScriptedModel([{ text: 'billing here' }], { name: 'billing-model' })
  const billing = govern(new Agent({ name: 'billing', model: billingModel }), engine)
  const triageModel = {
    model: 'triage-model',
    async getResponse() {
      const { Usage } = await import('@openai/agents')
      return {
        usage: new Usage({ requests: 1, inputTokens: 3, outputTokens: 1, totalTokens: 4 }),
        output: [{ type: 'function_call', callId: 'h1', name: 'transfer_to_billing', arguments: '{}', status: 'completed' }],
      }
    },
    async *getStreamedResponse() {},
  }
  const triage = govern(new Agent({ name: 'triage', model: triageModel, handoffs: [billing] }), engine)
  const result = await runner.run(triage, 'my invoice')
  assert.equal(result.finalOutput, 'billing here')
  await settled(triage)
  await settled(billing)
  await engine.shutdown()
  const events = auditEvents(audit)
  const agentOf = new Map(events.filter((e) => e.kind === 'run.started').map((e) => [e.runId, e.agentId]))
  const ended = events.filter((e) => e.kind === 'run.ended').map((e) => [agentOf.get(e.runId), e.status]).sort()
  assert.deepEqual(ended, [['billing', 'success'], ['triage', 'handoff']])
  const models = events.filter((e) => e.kind === 'llm.result').map((e) => [agentOf.get(e.runId), e.model]).sort()
  assert.deepEqual(models, [['billing', 'billing-model'], ['triage', 'triage-model']])
})

test('approver: an SDK approval it refuses leaves the review pending and the call unrun', async () => {
  ran.length = 0
  const engine = new Engine(GATE)
  const model = new ScriptedModel([{ calls: [['c1', 'refund', { amount: 800 }]] }, { text: 'waiting' }])
  const seen = []
  const governed = govern(new Agent({ name: 'support', model, tools: [refund] }), engine, {
    approver: async (review, runContext) => (seen.push([review.toolName, typeof runContext?.isToolApproved]), false),
  })
  let result = await runner.run(governed, 'refund 800')
  result.state.approve(result.interruptions[0])
  result = await runner.run(governed, result.state)
  assert.deepEqual(ran, [])
  assert.deepEqual(seen, [['refund', 'function']])
  assert.equal((await engine.reviews.list())[0].status, 'pending')
  assert.match(resultText(toolResults(model.requests[1])[0]), /it waits for human review/)
  await engine.shutdown()
})

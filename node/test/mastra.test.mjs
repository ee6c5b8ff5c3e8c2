// toolgate/mastra through Mastra's own agent loop (`generate`, `stream`, `resumeStream`) with
// the AI SDK's offline MockLanguageModelV2 (what Mastra's own tests use; Mastra 0.24 runs AI SDK
// v5 models). Resuming a suspended run needs Mastra's storage: an InMemoryStore.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import path from 'node:path'
import { z } from 'zod'

import { Mastra } from '@mastra/core'
import { Agent } from '@mastra/core/agent'
import { InMemoryStore } from '@mastra/core/storage'
import { createTool } from '@mastra/core/tools'
import { Engine, BlockedError, ReviewRequiredError } from 'toolgate'
import { govern, LlmBlockedError } from 'toolgate/mastra'
import { GATE, auditEvents, budget, modelReview, tmp } from './helpers.mjs'
import { mastraModel } from './models.mjs'

const ran = []
const refund = createTool({
  id: 'refund',
  description: 'Refunds an order.',
  inputSchema: z.object({ amount: z.number() }),
  execute: async ({ context }) => {
    ran.push(['refund', context.amount])
    return `refunded ${context.amount}`
  },
})
const deleteUser = createTool({
  id: 'delete_user',
  description: 'Deletes a user.',
  inputSchema: z.object({ id: z.string() }),
  execute: async ({ context }) => {
    ran.push(['delete_user', context.id])
    return 'deleted'
  },
})

function setup(policies, steps, opts = {}) {
  const audit = path.join(tmp(), 'audit')
  const engine = new Engine({ policies, audit })
  const { model, prompts } = mastraModel(steps, opts)
  const agent = new Agent({ name: 'support', instructions: 'Help the customer.', model, tools: { refund, delete_user: deleteUser } })
  const mastra = new Mastra({ agents: { support: agent }, storage: new InMemoryStore(), logger: false })
  const governed = govern(mastra.getAgent('support'), engine, { agentId: 'support-bot', prices: opts.prices })
  return { engine, prompts, agent, governed, audit }
}

// The tool results the model was given in prompt `p`.
function toolResults(p) {
  return p.filter((m) => m.role === 'tool').flatMap((m) => m.content)
}

function resultText(part) {
  const o = part.output
  return typeof o === 'string' ? o : o?.value
}

async function drain(stream) {
  const chunks = []
  for await (const c of stream.fullStream) chunks.push(c)
  return chunks
}

test('a blocked tool call does not run and reaches the model as the refusal text', async () => {
  ran.length = 0
  const { engine, prompts, governed, agent } = setup(GATE, [{ calls: [['c1', 'delete_user', { id: 'u9' }]] }, { text: 'ok' }])
  const result = await governed.generate('delete u9')
  assert.equal(result.text, 'ok')
  assert.deepEqual(ran, [])
  const [r] = toolResults(prompts[1])
  assert.match(resultText(r), /^toolgate blocked this call: Deleting is not allowed\. \[BLOCKED_RULE, rule no-delete\]/)
  assert.notEqual(governed, agent)
  await engine.shutdown()
})

test('hitl suspends the tool; resuming with {approved: true} approves the review and the call runs', async () => {
  ran.length = 0
  const { engine, prompts, governed } = setup(GATE, [{ calls: [['c1', 'refund', { amount: 500 }]] }, { text: 'refunded' }])
  const first = await governed.stream('refund 500', { runId: 'r-approve' })
  const chunks = await drain(first)
  const suspended = chunks.find((c) => c.type === 'tool-call-suspended')
  assert.ok(suspended, 'a tool-call-suspended chunk')
  const [pending] = await engine.reviews.pending()
  assert.equal(suspended.payload.suspendPayload.toolgate.reviewId, pending.id)
  assert.deepEqual(ran, [])
  const resumed = await governed.resumeStream({ approved: true }, { runId: 'r-approve', toolCallId: 'c1' })
  await drain(resumed)
  assert.equal(await resumed.text, 'refunded')
  assert.deepEqual(ran, [['refund', 500]])
  assert.equal((await engine.reviews.list())[0].status, 'approved')
  assert.equal(resultText(toolResults(prompts.at(-1))[0]), 'refunded 500')
  await engine.shutdown()
})

test('resuming with {approved: false} denies the review; the tool does not run', async () => {
  ran.length = 0
  const { engine, prompts, governed } = setup(GATE, [{ calls: [['c1', 'refund', { amount: 700 }]] }, { text: 'not refunded' }])
  await drain(await governed.stream('refund 700', { runId: 'r-deny' }))
  const resumed = await governed.resumeStream({ approved: false }, { runId: 'r-deny', toolCallId: 'c1' })
  await drain(resumed)
  assert.deepEqual(ran, [])
  assert.equal((await engine.reviews.list())[0].status, 'denied')
  assert.match(resultText(toolResults(prompts.at(-1))[0]), /BLOCKED_HITL_DENIED/)
  await engine.shutdown()
})

test('every model call records its usage (llm.result: tokens, model, duration, cost from prices)', async () => {
  const { engine, governed, audit } = setup(GATE, [{ calls: [['c1', 'refund', { amount: 5 }]] }, { text: 'done' }], {
    prices: { 'mock-model': { in: 3, out: 15 } },
  })
  const result = await governed.generate('refund 5')
  assert.equal(result.text, 'done')
  await engine.shutdown()
  const results = auditEvents(audit).filter((e) => e.kind === 'llm.result')
  assert.equal(results.length, 2)
  for (const r of results) {
    assert.equal(r.tokensIn, 10)
    assert.equal(r.tokensOut, 5)
    assert.equal(r.model, 'mock-model')
    assert.ok(r.durationMs >= 0)
    assert.ok(Math.abs(r.costUsd - (10 * 3 + 5 * 15) / 1e6) < 1e-12)
  }
  assert.equal(auditEvents(audit).find((e) => e.kind === 'run.ended').status, 'success')
})

test('the llm.before gate: a spent token budget stops the run before the next model call', async () => {
  const steps = [{ calls: [['c1', 'refund', { amount: 5 }]] }, { calls: [['c2', 'refund', { amount: 6 }]] }, { text: 'never' }]
  const { engine, prompts, governed, audit } = setup(budget(15), steps)
  await assert.rejects(governed.generate('refund twice'), (e) => e instanceof LlmBlockedError && e instanceof BlockedError)
  assert.equal(prompts.length, 2, 'the third model call is not made')
  await engine.shutdown()
  const events = auditEvents(audit)
  assert.equal(events.filter((e) => e.kind === 'llm.decision').at(-1).decision.effect, 'block')
  assert.equal(events.find((e) => e.kind === 'run.ended').status, 'budget_exceeded')
})

test('an llm.before hitl pauses the run like a tool hitl (ReviewRequiredError, review pending)', async () => {
  const { engine, prompts, governed } = setup(modelReview(1), [{ calls: [['c1', 'refund', { amount: 5 }]] }, { text: 'never' }])
  await assert.rejects(governed.generate('refund'), (e) => e instanceof ReviewRequiredError)
  assert.equal(prompts.length, 1)
  assert.equal((await engine.reviews.pending())[0].ruleId, 'model-review')
  await engine.shutdown()
})

test('stream: a spent budget ends the stream with an LlmBlockedError chunk, at once (not retried), the model not called', async () => {
  const steps = [{ calls: [['c1', 'refund', { amount: 5 }]] }, { calls: [['c2', 'refund', { amount: 6 }]] }, { text: 'never' }]
  const { engine, prompts, governed, audit } = setup(budget(15), steps)
  const stream = await governed.stream('refund twice')
  const errors = (await drain(stream)).filter((c) => c.type === 'error').map((c) => c.payload.error)
  assert.equal(errors.length, 1)
  assert.ok(errors[0] instanceof LlmBlockedError)
  assert.equal(prompts.length, 2)
  await engine.shutdown()
  assert.equal(auditEvents(audit).find((e) => e.kind === 'run.ended').status, 'budget_exceeded')
})

test('approver: a resume it refuses leaves the review pending; the call suspends again', async () => {
  ran.length = 0
  const audit = path.join(tmp(), 'audit')
  const engine = new Engine({ policies: GATE, audit })
  const { model } = mastraModel([{ calls: [['c1', 'refund', { amount: 800 }]] }, { text: 'x' }])
  const agent = new Agent({ name: 'support', instructions: 'x', model, tools: { refund } })
  const mastra = new Mastra({ agents: { support: agent }, storage: new InMemoryStore(), logger: false })
  const seen = []
  const governed = govern(mastra.getAgent('support'), engine, { approver: (review, ctx) => (seen.push([review.toolName, ctx.approved, ctx.toolCallId]), false) })
  await drain(await governed.stream('refund 800', { runId: 'r-appr' }))
  const again = await drain(await governed.resumeStream({ approved: true }, { runId: 'r-appr', toolCallId: 'c1' }))
  assert.ok(again.some((c) => c.type === 'tool-call-suspended'))
  assert.deepEqual(seen, [['refund', true, 'c1']])
  assert.deepEqual(ran, [])
  assert.equal((await engine.reviews.list())[0].status, 'pending')
  await engine.shutdown()
})

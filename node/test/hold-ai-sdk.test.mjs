// Issue 33 (Node): toolgate/ai-sdk holds against a hostile model and a careless app, through
// the AI SDK's own generateText loop with its mock model (v6, MockLanguageModelV3): a call id
// re-sent with other arguments is decided afresh, only the app's `approver` may decide a
// review, huge integers are decided (never a crash), tools added later are governed.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { z } from 'zod'

import * as ai6 from 'ai'
import { MockLanguageModelV3 } from 'ai/test'
import { Engine } from 'toolgate'
import { governTools } from 'toolgate/ai-sdk'
import { GATE, policy, rule } from './helpers.mjs'

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } }

// A model answering `steps` in order: `{call: [id, tool, input]}` (input: an object, or the raw
// JSON text the model wrote), else text.
function scripted(steps) {
  const prompts = []
  const model = new MockLanguageModelV3({
    doGenerate: async (options) => {
      prompts.push(options.prompt)
      const s = steps[prompts.length - 1] ?? { text: 'done' }
      if (s.call) {
        const [id, toolName, input] = s.call
        const text = typeof input === 'string' ? input : JSON.stringify(input)
        return {
          content: [{ type: 'tool-call', toolCallId: id, toolName, input: text }],
          finishReason: { unified: 'tool-calls', raw: 'tool-calls' },
          usage,
          warnings: [],
        }
      }
      return { content: [{ type: 'text', text: s.text }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] }
    },
  })
  return { model, prompts }
}

function toolResult(prompts, id) {
  let out
  for (const prompt of prompts) {
    for (const m of prompt) {
      if (m.role !== 'tool') continue
      for (const p of m.content) if (p.type === 'tool-result' && p.toolCallId === id) out = p.output
    }
  }
  return out
}

// GATE plus a hard block on refunds above 1,000.
const HARD = policy(
  ...GATE.rules,
  rule('huge-refund', { kind: 'toolArg', type: 'number', op: 'gt', path: 'amount', value: 1000 }, 'block', {
    tool: 'refund',
    priority: 100,
    reason: 'Refunds above $1000 are never made.',
  }),
)

function refundTool(ran, extra = {}) {
  return ai6.tool({
    description: 'Refund an order',
    inputSchema: z.object({ amount: z.number() }),
    execute: async ({ amount }) => {
      ran.push(amount)
      return { refunded: amount }
    },
    ...extra,
  })
}

test('AI SDK v6: a call id the app denied, re-sent with other arguments, is decided afresh (the hard block holds)', async () => {
  const engine = new Engine(HARD)
  const run = engine.startRun('bot')
  const ran = []
  // The tool's own approval: small refunds are confirmed by the customer.
  const governed = governTools({ refund: refundTool(ran, { needsApproval: async ({ amount }) => amount < 10 }) }, run)
  const { model, prompts } = scripted([
    { call: ['c1', 'refund', { amount: 5 }] },
    { call: ['c1', 'refund', { amount: 99999 }] },
    { text: 'done' },
  ])
  const first = await ai6.generateText({ model, tools: governed, prompt: 'refund', stopWhen: ai6.stepCountIs(5) })
  const request = first.content.find((p) => p.type === 'tool-approval-request')
  assert.ok(request, 'the tool asked for its own approval')
  // The app denies it; the model then sends the same call id with 99999.
  const messages = [
    { role: 'user', content: 'refund' },
    ...first.response.messages,
    { role: 'tool', content: [{ type: 'tool-approval-response', approvalId: request.approvalId, approved: false }] },
  ]
  await ai6.generateText({ model, tools: governed, messages, stopWhen: ai6.stepCountIs(5) })
  assert.deepEqual(ran, [], 'refund(99999) never ran')
  assert.deepEqual(toolResult(prompts, 'c1'), {
    type: 'error-text',
    value: 'toolgate blocked this call: Refunds above $1000 are never made. [BLOCKED_RULE, rule huge-refund]',
  })
})

test('AI SDK v6: an approved call id re-sent with edited arguments is decided afresh', async () => {
  const engine = new Engine(HARD)
  const run = engine.startRun('bot')
  const ran = []
  const governed = governTools({ refund: refundTool(ran) }, run)
  const { model } = scripted([{ call: ['c1', 'refund', { amount: 500 }] }, { text: 'done' }])
  const first = await ai6.generateText({ model, tools: governed, prompt: 'refund', stopWhen: ai6.stepCountIs(5) })
  const request = first.content.find((p) => p.type === 'tool-approval-request')
  assert.ok(request)
  // The client approves, having edited the call's arguments in the history to 900.
  const edited = first.response.messages.map((m) =>
    m.role !== 'assistant'
      ? m
      : { ...m, content: m.content.map((p) => (p.type === 'tool-call' ? { ...p, input: { amount: 900 } } : p)) },
  )
  const messages = [
    { role: 'user', content: 'refund' },
    ...edited,
    { role: 'tool', content: [{ type: 'tool-approval-response', approvalId: request.approvalId, approved: true }] },
  ]
  await ai6.generateText({ model, tools: governed, messages, stopWhen: ai6.stepCountIs(5) })
  assert.deepEqual(ran, [], 'the approval of 500 does not run 900')
  const reviews = await engine.reviews.list()
  const r900 = reviews.find((r) => r.args.amount === 900)
  assert.ok(r900, 'a review for 900 was raised')
  assert.equal(r900.status, 'pending')
})

test('AI SDK v6: the approver decides who may answer a review; a refused answer leaves it pending and the call does not run', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  const ran = []
  const seen = []
  let lead = false
  const approver = async (review, ctx) => {
    seen.push([review.toolName, review.status, ctx.approved, ctx.toolCallId, ctx.approvalId === undefined])
    return lead
  }
  const governed = governTools({ refund: refundTool(ran) }, run, { approver })
  const { model, prompts } = scripted([{ call: ['c1', 'refund', { amount: 500 }] }, { text: 'waiting' }, { call: ['c2', 'refund', { amount: 600 }] }, { text: 'refunded' }])
  const first = await ai6.generateText({ model, tools: governed, prompt: 'refund', stopWhen: ai6.stepCountIs(5) })
  const request = first.content.find((p) => p.type === 'tool-approval-request')
  const messages = [
    { role: 'user', content: 'refund' },
    ...first.response.messages,
    { role: 'tool', content: [{ type: 'tool-approval-response', approvalId: request.approvalId, approved: true }] },
  ]
  // A useChat client approves; the approver says this answer may not decide it.
  await ai6.generateText({ model, tools: governed, messages, stopWhen: ai6.stepCountIs(5) })
  assert.deepEqual(ran, [])
  assert.deepEqual(seen, [['refund', 'pending', true, 'c1', false]])
  assert.deepEqual((await engine.reviews.list()).map((r) => r.status), ['pending'])
  assert.ok(run.aborted, 'the run stays stopped')
  assert.match(toolResult(prompts, 'c1').value, /it waits for human review/)

  // A team lead's answer is accepted.
  const run2 = engine.startRun('bot')
  const ran2 = []
  lead = true
  const governed2 = governTools({ refund: refundTool(ran2) }, run2, { approver: (review, ctx) => ctx.approved === true && lead })
  const { model: model2 } = scripted([{ call: ['c9', 'refund', { amount: 800 }] }, { text: 'refunded' }])
  const a = await ai6.generateText({ model: model2, tools: governed2, prompt: 'refund', stopWhen: ai6.stepCountIs(5) })
  const req2 = a.content.find((p) => p.type === 'tool-approval-request')
  const messages2 = [
    { role: 'user', content: 'refund' },
    ...a.response.messages,
    { role: 'tool', content: [{ type: 'tool-approval-response', approvalId: req2.approvalId, approved: true }] },
  ]
  await ai6.generateText({ model: model2, tools: governed2, messages: messages2, stopWhen: ai6.stepCountIs(5) })
  assert.deepEqual(ran2, [800])
  assert.throws(() => governTools({}, run, { approver: 'lead' }), TypeError)
})

test('AI SDK v6: integers beyond 64 bits from the model are decided, never a crash', async () => {
  const engine = new Engine(
    policy(
      ...HARD.rules,
      rule('big-credit', { kind: 'toolArg', type: 'number', op: 'gt', path: 'cents', value: 1000 }, 'block', { tool: 'credit' }),
    ),
  )
  const run = engine.startRun('bot')
  const ran = []
  const big = '123456789012345678901234567890'
  const governed = governTools(
    {
      refund: refundTool(ran),
      // A schema that turns the amount into a BigInt (the tool receives one).
      credit: ai6.tool({
        description: 'Credit an account',
        inputSchema: z.object({ cents: z.union([z.number(), z.string()]).transform((v) => BigInt(v)) }),
        execute: async ({ cents }) => {
          ran.push(String(cents))
          return 'credited'
        },
      }),
    },
    run,
  )
  const { model, prompts } = scripted([
    { call: ['c1', 'refund', `{"amount": ${big}}`] },
    { call: ['c2', 'credit', `{"cents": "${big}"}`] },
    { call: ['c3', 'credit', '{"cents": 7}'] },
    { text: 'done' },
  ])
  await ai6.generateText({ model, tools: governed, prompt: 'go', stopWhen: ai6.stepCountIs(6) })
  // 1.2e29 > 1000: the hard block decides it.
  assert.match(toolResult(prompts, 'c1').value, /BLOCKED_RULE, rule huge-refund/)
  // A BigInt is decided as the number it is: credits above 1,000 are blocked; 7 runs.
  assert.match(toolResult(prompts, 'c2').value, /BLOCKED_RULE, rule big-credit/)
  assert.deepEqual(toolResult(prompts, 'c3'), { type: 'text', value: 'credited' })
  assert.deepEqual(ran, ['7'])
})

test('AI SDK: a tool added to the governed tools later is governed too', async () => {
  const engine = new Engine(HARD)
  const run = engine.startRun('bot')
  const ran = []
  const governed = governTools({}, run)
  governed.refund = refundTool(ran)
  Object.assign(governed, { deleteOrder: refundTool(ran) })
  const { model, prompts } = scripted([{ call: ['c1', 'refund', { amount: 5000 }] }, { call: ['c2', 'deleteOrder', { amount: 1 }] }, { text: 'done' }])
  await ai6.generateText({ model, tools: governed, prompt: 'go', stopWhen: ai6.stepCountIs(5) })
  assert.deepEqual(ran, [])
  assert.match(toolResult(prompts, 'c1').value, /huge-refund/)
  assert.match(toolResult(prompts, 'c2').value, /no-delete/)
})

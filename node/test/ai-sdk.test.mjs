// toolgate/ai-sdk through the AI SDK's own generateText loop with its mock models: v6
// (MockLanguageModelV3, tool approval via needsApproval) and v5 (MockLanguageModelV2).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { z } from 'zod'

import * as ai6 from 'ai'
import { MockLanguageModelV3, convertArrayToReadableStream as toStream3 } from 'ai/test'
import * as ai5 from 'ai-v5'
import { MockLanguageModelV2, convertArrayToReadableStream as toStream2 } from 'ai-v5/test'
import { Engine } from 'toolgate'
import { governTools, settleApprovals } from 'toolgate/ai-sdk'
import { GATE } from './helpers.mjs'

const usage3 = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } }
const usage2 = { inputTokens: 1, outputTokens: 1, totalTokens: 2 }

// A scripted model: answers `steps` in order and records the prompts it was given.
function scripted(Mock, version, steps) {
  const prompts = []
  const finish = (r) => (version === 3 ? { unified: r, raw: r } : r)
  const usage = version === 3 ? usage3 : usage2
  const model = new Mock({
    doGenerate: async (options) => {
      prompts.push(options.prompt)
      const s = steps[prompts.length - 1] ?? { text: 'done' }
      if (s.call) {
        const [id, toolName, input] = s.call
        return {
          content: [{ type: 'tool-call', toolCallId: id, toolName, input: JSON.stringify(input) }],
          finishReason: finish('tool-calls'),
          usage,
          warnings: [],
        }
      }
      return { content: [{ type: 'text', text: s.text }], finishReason: finish('stop'), usage, warnings: [] }
    },
  })
  return { model, prompts }
}

// The same as a streaming model (`doStream`, for streamText): each step's parts as a stream.
function scriptedStream(Mock, version, toStream, steps) {
  const prompts = []
  const finish = (r) => (version === 3 ? { unified: r, raw: r } : r)
  const usage = version === 3 ? usage3 : usage2
  const model = new Mock({
    doStream: async (options) => {
      prompts.push(options.prompt)
      const s = steps[prompts.length - 1] ?? { text: 'done' }
      const parts = [{ type: 'stream-start', warnings: [] }]
      if (s.call) {
        const [id, toolName, input] = s.call
        parts.push({ type: 'tool-call', toolCallId: id, toolName, input: JSON.stringify(input) })
        parts.push({ type: 'finish', finishReason: finish('tool-calls'), usage })
      } else {
        parts.push({ type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: s.text }, { type: 'text-end', id: 't' })
        parts.push({ type: 'finish', finishReason: finish('stop'), usage })
      }
      return { stream: toStream(parts) }
    },
  })
  return { model, prompts }
}

// What the model was told about tool call `id` (the tool-result part of a later prompt).
function toolResult(prompts, id) {
  for (const prompt of prompts) {
    for (const m of prompt) {
      if (m.role !== 'tool') continue
      for (const p of m.content) if (p.type === 'tool-result' && p.toolCallId === id) return p.output
    }
  }
  return undefined
}

function tools(sdk, ran) {
  return {
    search: sdk.tool({
      description: 'Search the KB',
      inputSchema: z.object({ q: z.string() }),
      execute: async ({ q }) => {
        ran.push(['search', q])
        return { hits: [q] }
      },
    }),
    deleteUser: sdk.tool({
      description: 'Delete a user',
      inputSchema: z.object({ id: z.number() }),
      execute: async ({ id }) => {
        ran.push(['deleteUser', id])
        return 'deleted'
      },
    }),
    refund: sdk.tool({
      description: 'Refund an order',
      inputSchema: z.object({ amount: z.number() }),
      execute: async ({ amount }) => {
        ran.push(['refund', amount])
        return { refunded: amount }
      },
    }),
  }
}

for (const [label, sdk, Mock, version] of [
  ['v6', ai6, MockLanguageModelV3, 3],
  ['v5', ai5, MockLanguageModelV2, 2],
]) {
  test(`AI SDK ${label}: an allowed call runs and its result is recorded`, async () => {
    const engine = new Engine(GATE)
    const run = engine.startRun('bot')
    const ran = []
    const { model, prompts } = scripted(Mock, version, [{ call: ['c1', 'search', { q: 'refunds' }] }, { text: 'found it' }])
    const result = await sdk.generateText({ model, tools: governTools(tools(sdk, ran), run), prompt: 'go', stopWhen: sdk.stepCountIs(5) })
    assert.equal(result.text, 'found it')
    assert.deepEqual(ran, [['search', 'refunds']])
    assert.deepEqual(toolResult(prompts, 'c1'), { type: 'json', value: { hits: ['refunds'] } })
    await run.end('success', result.text)
  })

  test(`AI SDK ${label}: a blocked call never runs and the model reads why`, async () => {
    const engine = new Engine(GATE)
    const run = engine.startRun('bot')
    const ran = []
    const { model, prompts } = scripted(Mock, version, [{ call: ['c1', 'deleteUser', { id: 7 }] }, { text: 'could not' }])
    const result = await sdk.generateText({ model, tools: governTools(tools(sdk, ran), run), prompt: 'go', stopWhen: sdk.stepCountIs(5) })
    assert.deepEqual(ran, [])
    assert.equal(result.text, 'could not')
    assert.deepEqual(toolResult(prompts, 'c1'), {
      type: 'error-text',
      value: 'toolgate blocked this call: Deleting is not allowed. [BLOCKED_RULE, rule no-delete]',
    })
  })
}

for (const [label, sdk, Mock, version, toStream] of [
  ['v6', ai6, MockLanguageModelV3, 3, toStream3],
  ['v5', ai5, MockLanguageModelV2, 2, toStream2],
]) {
  test(`AI SDK ${label} streamText: a blocked call's refusal reaches the model, an allowed call runs`, async () => {
    const engine = new Engine(GATE)
    const run = engine.startRun('bot')
    const ran = []
    const { model, prompts } = scriptedStream(Mock, version, toStream, [
      { call: ['c1', 'deleteUser', { id: 7 }] },
      { call: ['c2', 'search', { q: 'refunds' }] },
      { text: 'found it' },
    ])
    const result = sdk.streamText({ model, tools: governTools(tools(sdk, ran), run), prompt: 'go', stopWhen: sdk.stepCountIs(5) })
    let streamed = ''
    for await (const chunk of result.textStream) streamed += chunk
    assert.equal(streamed, 'found it')
    assert.equal(await result.text, 'found it')
    assert.deepEqual(ran, [['search', 'refunds']])
    assert.deepEqual(toolResult(prompts, 'c1'), {
      type: 'error-text',
      value: 'toolgate blocked this call: Deleting is not allowed. [BLOCKED_RULE, rule no-delete]',
    })
    assert.deepEqual(toolResult(prompts, 'c2'), { type: 'json', value: { hits: ['refunds'] } })
    await run.end('success', streamed)
  })
}

test('AI SDK v6: hitl is a tool approval request; approving it in the app approves the review and runs the call', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  const ran = []
  const governed = governTools(tools(ai6, ran), run)
  const { model, prompts } = scripted(MockLanguageModelV3, 3, [{ call: ['c1', 'refund', { amount: 500 }] }, { text: 'refunded' }])
  const first = await ai6.generateText({ model, tools: governed, prompt: 'refund it', stopWhen: ai6.stepCountIs(5) })
  const request = first.content.find((p) => p.type === 'tool-approval-request')
  assert.ok(request, JSON.stringify(first.content))
  assert.equal(request.toolCall.toolCallId, 'c1')
  assert.deepEqual(ran, [])
  const [review] = await engine.reviews.pending()
  assert.equal(review.toolName, 'refund')
  // The app approves: the answer goes back in the messages of the next call.
  const messages = [
    { role: 'user', content: 'refund it' },
    ...first.response.messages,
    { role: 'tool', content: [{ type: 'tool-approval-response', approvalId: request.approvalId, approved: true }] },
  ]
  const second = await ai6.generateText({ model, tools: governed, messages, stopWhen: ai6.stepCountIs(5) })
  assert.deepEqual(ran, [['refund', 500]])
  assert.equal(second.text, 'refunded')
  assert.deepEqual(toolResult(prompts, 'c1'), { type: 'json', value: { refunded: 500 } })
  const reviews = await engine.reviews.list()
  assert.deepEqual(reviews.map((r) => [r.id, r.status]), [[review.id, 'approved']])
})

test('AI SDK v6: denying the approval in the app (settleApprovals) denies the review; the call never runs', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  const ran = []
  const governed = governTools(tools(ai6, ran), run)
  const { model } = scripted(MockLanguageModelV3, 3, [{ call: ['c1', 'refund', { amount: 700 }] }, { text: 'ok, no refund' }])
  const first = await ai6.generateText({ model, tools: governed, prompt: 'refund it', stopWhen: ai6.stepCountIs(5) })
  const request = first.content.find((p) => p.type === 'tool-approval-request')
  const messages = [
    { role: 'user', content: 'refund it' },
    ...first.response.messages,
    { role: 'tool', content: [{ type: 'tool-approval-response', approvalId: request.approvalId, approved: false }] },
  ]
  await settleApprovals(governed, messages)
  assert.deepEqual((await engine.reviews.list()).map((r) => r.status), ['denied'])
  const second = await ai6.generateText({ model, tools: governed, messages, stopWhen: ai6.stepCountIs(5) })
  assert.equal(second.text, 'ok, no refund')
  assert.deepEqual(ran, [])
  assert.ok(!run.aborted, 'the run goes on after the answer')
})

test('AI SDK v5 (no tool approval): hitl refuses the call with the review named, and stops the run', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  const ran = []
  const { model, prompts } = scripted(MockLanguageModelV2, 2, [{ call: ['c1', 'refund', { amount: 500 }] }, { text: 'waiting' }])
  await ai5.generateText({ model, tools: governTools(tools(ai5, ran), run), prompt: 'go', stopWhen: ai5.stepCountIs(5) })
  assert.deepEqual(ran, [])
  const out = toolResult(prompts, 'c1')
  assert.equal(out.type, 'error-text')
  const [review] = await engine.reviews.pending()
  assert.equal(
    out.value,
    `toolgate blocked this call: Refunds above $100 need a team lead. [BLOCKED_HITL_REQUESTED, rule big-refund]; it waits for human review ${review.id}: stop here until a human approves it`,
  )
  assert.ok(run.aborted)
})

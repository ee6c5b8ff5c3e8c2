// toolgate/ai-sdk's model side: toolgateModelMiddleware(run) in `wrapLanguageModel`, through
// generateText / streamText of AI SDK v6 (MockLanguageModelV3) and v5 (MockLanguageModelV2).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import path from 'node:path'

import * as ai6 from 'ai'
import { MockLanguageModelV3, convertArrayToReadableStream as toStream3 } from 'ai/test'
import * as ai5 from 'ai-v5'
import { MockLanguageModelV2, convertArrayToReadableStream as toStream2 } from 'ai-v5/test'
import { Engine, BlockedError, ReviewRequiredError } from 'toolgate'
import { governTools, toolgateModelMiddleware, LlmBlockedError } from 'toolgate/ai-sdk'
import { GATE, auditEvents, budget, modelReview, policy, rule, tmp } from './helpers.mjs'
import { scripted, tools } from './models.mjs'

const SDKS = [
  ['v6', ai6, MockLanguageModelV3, 3, toStream3],
  ['v5', ai5, MockLanguageModelV2, 2, toStream2],
]

for (const [label, sdk, Mock, version, toStream] of SDKS) {
  test(`AI SDK ${label}: every model call records its usage (tokens, model, duration, cost)`, async () => {
    const audit = path.join(tmp(), 'audit')
    const engine = new Engine({ policies: GATE, audit })
    const run = engine.startRun('bot')
    const ran = []
    const { model } = scripted(Mock, version, toStream, [{ calls: [['c1', 'refund', { amount: 5 }]] }, { text: 'done' }])
    const wrapped = sdk.wrapLanguageModel({ model, middleware: toolgateModelMiddleware(run, { prices: { 'MOCK-GPT': { in: 1, out: 2 } } }) })
    const result = await sdk.generateText({ model: wrapped, tools: governTools(tools(sdk, ran), run), prompt: 'go', stopWhen: sdk.stepCountIs(5) })
    assert.equal(result.text, 'done')
    await run.end('success')
    await engine.shutdown()
    const results = auditEvents(audit).filter((e) => e.kind === 'llm.result')
    assert.equal(results.length, 2)
    for (const r of results) {
      assert.deepEqual([r.tokensIn, r.tokensOut, r.model], [10, 5, 'mock-gpt'])
      assert.ok(r.durationMs >= 0)
      assert.ok(Math.abs(r.costUsd - 20 / 1e6) < 1e-12)
    }
  })

  test(`AI SDK ${label}: a spent budget blocks the next model call; generateText rejects, the run ends budget_exceeded`, async () => {
    const audit = path.join(tmp(), 'audit')
    const engine = new Engine({ policies: budget(15), audit })
    const run = engine.startRun('bot')
    const ran = []
    const steps = [{ calls: [['c1', 'refund', { amount: 5 }]] }, { calls: [['c2', 'refund', { amount: 6 }]] }, { text: 'never' }]
    const { model, prompts } = scripted(Mock, version, toStream, steps)
    const wrapped = sdk.wrapLanguageModel({ model, middleware: toolgateModelMiddleware(run) })
    await assert.rejects(
      sdk.generateText({ model: wrapped, tools: governTools(tools(sdk, ran), run), prompt: 'go', stopWhen: sdk.stepCountIs(5) }),
      (e) => e instanceof LlmBlockedError && e instanceof BlockedError && /Token budget spent/.test(e.message),
    )
    assert.equal(prompts.length, 2, 'the model is not called a third time')
    assert.deepEqual(ran, [['refund', 5], ['refund', 6]])
    await engine.shutdown()
    const events = auditEvents(audit)
    assert.equal(events.filter((e) => e.kind === 'llm.decision').at(-1).decision.effect, 'block')
    assert.equal(events.find((e) => e.kind === 'run.ended').status, 'budget_exceeded')
  })

  test(`AI SDK ${label}: streamText records the finish part's usage and honours the gate`, async () => {
    const audit = path.join(tmp(), 'audit')
    const engine = new Engine({ policies: budget(15), audit })
    const run = engine.startRun('bot')
    const { model, prompts } = scripted(Mock, version, toStream, [{ text: 'one' }, { text: 'two' }, { text: 'three' }])
    const wrapped = sdk.wrapLanguageModel({ model, middleware: toolgateModelMiddleware(run) })
    for (const want of ['one', 'two']) {
      const r = sdk.streamText({ model: wrapped, prompt: 'go' })
      assert.equal(await r.text, want)
    }
    let error
    const r = sdk.streamText({ model: wrapped, prompt: 'go', onError: ({ error: e }) => (error = e) })
    await r.consumeStream()
    assert.ok(error instanceof LlmBlockedError, String(error))
    assert.equal(prompts.length, 2)
    await engine.shutdown()
    const results = auditEvents(audit).filter((e) => e.kind === 'llm.result')
    assert.deepEqual(results.map((e) => e.tokensIn), [10, 10])
  })

  test(`AI SDK ${label}: an llm.before hitl raises ReviewRequiredError (run stopped, review pending)`, async () => {
    const engine = new Engine(modelReview(1))
    const run = engine.startRun('bot')
    const { model, prompts } = scripted(Mock, version, toStream, [{ calls: [['c1', 'refund', { amount: 5 }]] }, { text: 'never' }])
    const wrapped = sdk.wrapLanguageModel({ model, middleware: toolgateModelMiddleware(run) })
    await assert.rejects(
      sdk.generateText({ model: wrapped, tools: governTools(tools(sdk, []), run), prompt: 'go', stopWhen: sdk.stepCountIs(5) }),
      (e) => e instanceof ReviewRequiredError && e.reviewId !== null,
    )
    assert.equal(prompts.length, 1)
    assert.ok(run.aborted)
    assert.equal((await engine.reviews.pending())[0].ruleId, 'model-review')
  })
}

test('toolgateModelMiddleware refuses what is not a run and a bad price table', () => {
  assert.throws(() => toolgateModelMiddleware({}), TypeError)
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  assert.throws(() => toolgateModelMiddleware(run, { prices: { m: { in: -1, out: 1 } } }), /prices\["m"\]/)
  assert.throws(() => toolgateModelMiddleware(run, { prices: { m: { in: 1 } } }), TypeError)
  assert.throws(() => toolgateModelMiddleware(run, { prices: [] }), TypeError)
})

test('AI SDK: without prices of its own the adapter inherits the engine\'s; recordMessages writes llm.messages, redacted', async () => {
  const audit = path.join(tmp(), 'audit')
  const secretRule = rule(
    'no-keys-to-models',
    { kind: 'sensitiveData', target: 'llmInput', op: 'anyOf', detectors: [{ detector: 'secret_key' }] },
    'block',
    { phase: 'llm.before', reason: 'Keys are not sent to models.' },
  )
  const engine = new Engine({ policies: policy(secretRule), audit, prices: { 'mock-*': { in: 1, out: 1 } }, recordMessages: true })
  const run = engine.startRun('bot')
  const { model, prompts } = scripted(MockLanguageModelV3, 3, toStream3, [{ text: 'hello' }, { text: 'never' }])
  const wrapped = ai6.wrapLanguageModel({ model, middleware: toolgateModelMiddleware(run) })
  assert.equal((await ai6.generateText({ model: wrapped, system: 'Be brief.', prompt: 'hi there' })).text, 'hello')
  // A secret in the messages: the sensitiveData (llmInput) rule blocks the call before the model.
  const key = 'sk-live-' + 'a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6'
  await assert.rejects(ai6.generateText({ model: wrapped, prompt: `my key is ${key}` }), LlmBlockedError)
  assert.equal(prompts.length, 1)
  await engine.shutdown()
  const events = auditEvents(audit)
  const [result] = events.filter((e) => e.kind === 'llm.result')
  assert.ok(Math.abs(result.costUsd - 15 / 1e6) < 1e-12, 'priced by the engine')
  const recorded = events.filter((e) => e.kind === 'llm.messages')
  assert.equal(recorded.length, 2)
  assert.deepEqual(recorded[0].messages.map((m) => [m.role, m.content]), [['system', 'Be brief.'], ['user', 'hi there']])
  const text = JSON.stringify(events)
  assert.ok(!text.includes(key), 'the key is not in the trail')
  assert.match(JSON.stringify(recorded[1]), /\[redacted:secret_key\]/)
})

test('AI SDK v6: tool approval with budgets in play: approved, the call runs and the next model call is let through', async () => {
  const audit = path.join(tmp(), 'audit')
  const engine = new Engine({ policies: budget(1e9), audit })
  const run = engine.startRun('bot')
  const ran = []
  const governed = governTools(tools(ai6, ran), run)
  const { model, prompts } = scripted(MockLanguageModelV3, 3, toStream3, [{ calls: [['c1', 'refund', { amount: 500 }]] }, { text: 'refunded' }])
  const wrapped = ai6.wrapLanguageModel({ model, middleware: toolgateModelMiddleware(run) })
  const first = await ai6.generateText({ model: wrapped, tools: governed, prompt: 'refund it', stopWhen: ai6.stepCountIs(5) })
  const request = first.content.find((p) => p.type === 'tool-approval-request')
  assert.ok(request)
  assert.ok(run.aborted)
  const messages = [
    { role: 'user', content: 'refund it' },
    ...first.response.messages,
    { role: 'tool', content: [{ type: 'tool-approval-response', approvalId: request.approvalId, approved: true }] },
  ]
  const second = await ai6.generateText({ model: wrapped, tools: governed, messages, stopWhen: ai6.stepCountIs(5) })
  assert.deepEqual(ran, [['refund', 500]])
  assert.equal(second.text, 'refunded')
  assert.equal(prompts.length, 2)
  await run.end('success')
  await engine.shutdown()
  assert.deepEqual(auditEvents(audit).filter((e) => e.kind === 'llm.result').length, 2)
})

test('AI SDK v6: a denied approval reaches the review through the model middleware (no settleApprovals), the run goes on', async () => {
  const engine = new Engine(budget(1e9))
  const run = engine.startRun('bot')
  const ran = []
  const governed = governTools(tools(ai6, ran), run)
  const { model, prompts } = scripted(MockLanguageModelV3, 3, toStream3, [{ calls: [['c1', 'refund', { amount: 700 }]] }, { text: 'ok, no refund' }])
  const wrapped = ai6.wrapLanguageModel({ model, middleware: toolgateModelMiddleware(run) })
  const first = await ai6.generateText({ model: wrapped, tools: governed, prompt: 'refund it', stopWhen: ai6.stepCountIs(5) })
  const request = first.content.find((p) => p.type === 'tool-approval-request')
  const messages = [
    { role: 'user', content: 'refund it' },
    ...first.response.messages,
    { role: 'tool', content: [{ type: 'tool-approval-response', approvalId: request.approvalId, approved: false }] },
  ]
  const second = await ai6.generateText({ model: wrapped, tools: governed, messages, stopWhen: ai6.stepCountIs(5) })
  assert.equal(second.text, 'ok, no refund')
  assert.equal(prompts.length, 2)
  assert.deepEqual(ran, [])
  assert.deepEqual((await engine.reviews.list()).map((r) => r.status), ['denied'])
  assert.ok(!run.aborted)
})

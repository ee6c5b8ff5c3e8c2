// The model side against a hostile model and careless apps (issue 36, red team): usage that is
// huge, missing, negative or not a number; streams that repeat, drop or break their finish
// part; parallel tool calls; concurrent runs of one governed agent; exceptions in the model,
// the tools and the app's callbacks; oversized and deeply nested messages.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import path from 'node:path'

import * as ai5 from 'ai-v5'
import { MockLanguageModelV2, convertArrayToReadableStream as toStream2 } from 'ai-v5/test'
import { Agent, Runner } from '@openai/agents'
import { Engine } from 'toolgate'
import { governTools, toolgateModelMiddleware, LlmBlockedError } from 'toolgate/ai-sdk'
import { govern } from 'toolgate/openai-agents'
import { GATE, auditEvents, budget, tmp } from './helpers.mjs'
import { ScriptedModel, scripted, tools } from './models.mjs'

const MAX = Number.MAX_SAFE_INTEGER

async function generate(policies, usage, steps = [{ text: 'a' }, { text: 'b' }]) {
  const audit = path.join(tmp(), 'audit')
  const engine = new Engine({ policies, audit })
  const run = engine.startRun('bot')
  const { model, prompts } = scripted(MockLanguageModelV2, 2, toStream2, steps, usage)
  const wrapped = ai5.wrapLanguageModel({ model, middleware: toolgateModelMiddleware(run) })
  const outcomes = []
  for (let i = 0; i < steps.length; i++) {
    try {
      outcomes.push((await ai5.generateText({ model: wrapped, prompt: 'go' })).text)
    } catch (e) {
      outcomes.push(e)
    }
  }
  await engine.shutdown()
  return { outcomes, prompts, events: auditEvents(audit) }
}

test('hostile usage is recorded as a non-negative count: huge → 2^53−1, negative / missing / NaN → 0; never throws', async () => {
  const reported = [
    [1e300, Infinity],
    [-1e9, -5],
    [undefined, null],
    [NaN, '12'],
    [Number.MAX_VALUE, 3.7],
  ]
  const { outcomes, events } = await generate(GATE, (n) => reported[n - 1], reported.map((_, i) => ({ text: `t${i}` })))
  assert.deepEqual(outcomes, ['t0', 't1', 't2', 't3', 't4'])
  const got = events.filter((e) => e.kind === 'llm.result').map((e) => [e.tokensIn, e.tokensOut])
  assert.deepEqual(got, [
    [MAX, MAX],
    [0, 0],
    [0, 0],
    [0, 12],
    [MAX, 3],
  ])
})

test('a model reporting huge usage trips the budget at once; negative usage cannot buy budget back', async () => {
  const { outcomes, prompts } = await generate(budget(100), (n) => (n === 1 ? [-1e12, 0] : n === 2 ? [1e300, 0] : [1, 1]), [
    { text: 'a' },
    { text: 'b' },
    { text: 'c' },
  ])
  assert.equal(outcomes[0], 'a')
  assert.equal(outcomes[1], 'b')
  assert.ok(outcomes[2] instanceof LlmBlockedError)
  assert.equal(prompts.length, 2)
})

async function streamed(steps) {
  const audit = path.join(tmp(), 'audit')
  const engine = new Engine({ policies: GATE, audit })
  const run = engine.startRun('bot')
  const { model } = scripted(MockLanguageModelV2, 2, toStream2, steps)
  const wrapped = ai5.wrapLanguageModel({ model, middleware: toolgateModelMiddleware(run) })
  const texts = []
  for (let i = 0; i < steps.length; i++) {
    const r = ai5.streamText({ model: wrapped, prompt: 'go', onError: () => {} })
    await r.consumeStream()
    texts.push(await r.text.catch((e) => e))
  }
  await engine.shutdown()
  return { texts, results: auditEvents(audit).filter((e) => e.kind === 'llm.result') }
}

test('streams: a repeated finish part adds only what it reports beyond the first; none at all records the call once with 0', async () => {
  const { texts, results } = await streamed([
    { text: 'x', finishes: [[0, 0], [500, 7], [500, 7], [1, 1]] },
    { text: 'y', finishes: [] },
  ])
  assert.equal(texts[0], 'x')
  const first = results.slice(0, -1)
  assert.equal(first.reduce((s, e) => s + e.tokensIn, 0), 500)
  assert.equal(first.reduce((s, e) => s + e.tokensOut, 0), 7)
  assert.deepEqual([results.at(-1).tokensIn, results.at(-1).tokensOut], [0, 0])
})

test('a model that throws: its error reaches the app unchanged, nothing is recorded, the run goes on', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  let n = 0
  const model = new MockLanguageModelV2({
    modelId: 'flaky',
    doGenerate: async () => {
      if (++n === 1) throw new RangeError('provider down')
      return { content: [{ type: 'text', text: 'ok' }], finishReason: 'stop', usage: { inputTokens: 1, outputTokens: 1 }, warnings: [] }
    },
  })
  const wrapped = ai5.wrapLanguageModel({ model, middleware: toolgateModelMiddleware(run) })
  await assert.rejects(ai5.generateText({ model: wrapped, prompt: 'go', maxRetries: 0 }), /provider down/)
  assert.equal((await ai5.generateText({ model: wrapped, prompt: 'go', maxRetries: 0 })).text, 'ok')
  assert.ok(!run.aborted)
})

test('oversized and deeply nested messages: the gate gets bounded text, never a throw', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  let deep = { leaf: true }
  for (let i = 0; i < 100_000; i++) deep = { d: deep }
  const huge = 'x'.repeat(8 * 1024 * 1024)
  const model = new MockLanguageModelV2({
    modelId: 'm',
    doGenerate: async () => ({ content: [{ type: 'text', text: 'fine' }], finishReason: 'stop', usage: { inputTokens: 1, outputTokens: 1 }, warnings: [] }),
  })
  const wrapped = ai5.wrapLanguageModel({ model, middleware: toolgateModelMiddleware(run) })
  const messages = [
    { role: 'user', content: huge },
    { role: 'assistant', content: [{ type: 'tool-call', toolCallId: 'c', toolName: 't', input: deep }] },
    { role: 'tool', content: [{ type: 'tool-result', toolCallId: 'c', toolName: 't', output: { type: 'json', value: 1 } }] },
    ...Array.from({ length: 3000 }, (_, i) => ({ role: 'user', content: `m${i}` })),
  ]
  const r = await ai5.generateText({ model: wrapped, messages })
  assert.equal(r.text, 'fine')
})

test('OpenAI Agents JS: parallel tool calls in one turn are each decided (allowed runs, blocked refused, hitl interrupts)', async () => {
  const engine = new Engine(GATE)
  const ran = []
  const { tool } = await import('@openai/agents')
  const { z } = await import('zod')
  const mk = (name) =>
    tool({ name, description: name, parameters: z.object({ amount: z.number() }), execute: async ({ amount }) => (ran.push([name, amount]), 'ok') })
  const model = new ScriptedModel([
    { calls: [['c1', 'search', { amount: 1 }], ['c2', 'delete_all', { amount: 2 }], ['c3', 'refund', { amount: 900 }], ['c4', 'search', { amount: 3 }]] },
    { text: 'done' },
  ])
  const agent = new Agent({ name: 'p', model, tools: [mk('search'), mk('delete_all'), mk('refund')] })
  const result = await new Runner({ tracingDisabled: true }).run(govern(agent, engine), 'go')
  assert.deepEqual(result.interruptions.map((i) => i.rawItem.callId), ['c3'])
  assert.equal((await engine.reviews.pending()).length, 1)
  result.state.reject(result.interruptions[0])
  const done = await new Runner({ tracingDisabled: true }).run(govern(agent, engine), result.state)
  assert.equal(done.finalOutput, 'done')
  // The allowed call ran; the blocked one and the held one did not; a call after the held one
  // in the same turn is refused too (a hitl stops the run until its review is decided).
  assert.deepEqual(ran, [['search', 1]])
  const results = Object.fromEntries(
    model.requests[1].input.filter((i) => i.type === 'function_call_result').map((i) => [i.callId, i.output?.text ?? i.output]),
  )
  assert.match(results.c2, /BLOCKED_RULE, rule no-delete/)
  assert.match(results.c4, /BLOCKED_RUN_ABORTED|BLOCKED_HITL/)
})

test('OpenAI Agents JS: 40 concurrent runs of one governed agent: each run\'s model calls land on its own toolgate run', async () => {
  const audit = path.join(tmp(), 'audit')
  const engine = new Engine({ policies: GATE, audit })
  // Each SDK run: a tool call, then the answer; the model yields between calls so runs interleave.
  const model = {
    model: 'fake-gpt',
    async getResponse(request) {
      await new Promise((r) => setImmediate(r))
      const input = Array.isArray(request.input) ? request.input : []
      const user = input.find((i) => i.role === 'user')
      const who = typeof user?.content === 'string' ? user.content : 'x'
      const tokens = Number(who.slice(1))
      const { Usage } = await import('@openai/agents')
      const usage = new Usage({ requests: 1, inputTokens: tokens, outputTokens: 1, totalTokens: tokens + 1 })
      if (!input.some((i) => i.type === 'function_call_result')) {
        return { usage, output: [{ type: 'function_call', callId: `c-${who}`, name: 'search', arguments: '{"q":"a"}', status: 'completed' }] }
      }
      return { usage, output: [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: who }] }] }
    },
    async *getStreamedResponse() {},
  }
  const { tool } = await import('@openai/agents')
  const { z } = await import('zod')
  const search = tool({ name: 'search', description: 's', parameters: z.object({ q: z.string() }), execute: async () => 'hits' })
  const governed = govern(new Agent({ name: 'c', model, tools: [search] }), engine)
  const runner = new Runner({ tracingDisabled: true })
  const outs = await Promise.all(Array.from({ length: 40 }, (_, i) => runner.run(governed, `u${i + 1}`)))
  assert.deepEqual(outs.map((o) => o.finalOutput), Array.from({ length: 40 }, (_, i) => `u${i + 1}`))
  await engine.shutdown()
  const events = auditEvents(audit)
  const byRun = new Map()
  for (const e of events.filter((e) => e.kind === 'llm.result')) byRun.set(e.runId, [...(byRun.get(e.runId) ?? []), e.tokensIn])
  assert.equal(byRun.size, 40)
  for (const tokens of byRun.values()) {
    assert.equal(tokens.length, 2)
    assert.equal(tokens[0], tokens[1], 'both model calls of one SDK run are on the same toolgate run')
  }
})

test('AI SDK: a tool that throws and an app callback that throws leave the model side consistent', async () => {
  const audit = path.join(tmp(), 'audit')
  const engine = new Engine({ policies: GATE, audit })
  const run = engine.startRun('bot')
  const { model } = scripted(MockLanguageModelV2, 2, toStream2, [{ calls: [['c1', 'refund', { amount: 5 }]] }, { text: 'after' }])
  const wrapped = ai5.wrapLanguageModel({ model, middleware: toolgateModelMiddleware(run) })
  const t = tools(ai5, [])
  t.refund.execute = async () => {
    throw new Error('tool blew up')
  }
  await assert.rejects(
    ai5.generateText({
      model: wrapped,
      tools: governTools(t, run),
      prompt: 'go',
      stopWhen: ai5.stepCountIs(5),
      onStepFinish: () => {
        throw new TypeError('app callback blew up')
      },
    }),
    /app callback blew up/,
  )
  await run.end('error')
  await engine.shutdown()
  const events = auditEvents(audit)
  assert.equal(events.filter((e) => e.kind === 'llm.result').length, 1)
  assert.ok(events.some((e) => e.kind === 'tool.result' || e.kind === 'tool.error' || e.error))
})

test('OpenAI Agents JS streaming: a repeated response_done is not double-counted', async () => {
  const audit = path.join(tmp(), 'audit')
  const engine = new Engine({ policies: GATE, audit })
  const { Usage } = await import('@openai/agents')
  const done = (tin, tout) => ({
    type: 'response_done',
    response: { id: 'r', usage: new Usage({ requests: 1, inputTokens: tin, outputTokens: tout, totalTokens: tin + tout }), output: [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'hi' }] }] },
  })
  const model = {
    async getResponse() {
      throw new Error('streaming only')
    },
    async *getStreamedResponse() {
      yield { type: 'output_text_delta', delta: 'hi' }
      yield done(0, 0)
      yield done(300, 9)
      yield done(300, 9)
    },
  }
  const governed = govern(new Agent({ name: 's', model }), engine)
  const r = await new Runner({ tracingDisabled: true }).run(governed, 'go', { stream: true })
  for await (const _ of r) {
    // consume
  }
  await r.completed
  const { settled } = await import('toolgate/openai-agents')
  await settled(governed)
  await engine.shutdown()
  const results = auditEvents(audit).filter((e) => e.kind === 'llm.result')
  assert.equal(results.reduce((s, e) => s + e.tokensIn, 0), 300)
  assert.equal(results.reduce((s, e) => s + e.tokensOut, 0), 9)
})

test('a gate that cannot decide (the app ended the run) rejects the call with a ToolgateError; the model is not called', async () => {
  const engine = new Engine(GATE)
  const run = engine.startRun('bot')
  const { model, prompts } = scripted(MockLanguageModelV2, 2, toStream2, [{ text: 'a' }])
  const wrapped = ai5.wrapLanguageModel({ model, middleware: toolgateModelMiddleware(run) })
  await run.end('success')
  const { ToolgateError } = await import('toolgate')
  await assert.rejects(ai5.generateText({ model: wrapped, prompt: 'go', maxRetries: 0 }), ToolgateError)
  assert.equal(prompts.length, 0)
})

test('a blocked model call retried by the framework finds the same refusal (not "the run has ended") and stays final', async () => {
  const engine = new Engine(budget(1))
  const run = engine.startRun('bot')
  run.recordLlm({ tokensIn: 5, tokensOut: 0 })
  const { model, prompts } = scripted(MockLanguageModelV2, 2, toStream2, [{ text: 'a' }])
  const wrapped = ai5.wrapLanguageModel({ model, middleware: toolgateModelMiddleware(run) })
  for (let i = 0; i < 3; i++) {
    await assert.rejects(ai5.generateText({ model: wrapped, prompt: 'go', maxRetries: 3 }), (e) => {
      assert.ok(e instanceof LlmBlockedError, String(e))
      assert.equal(e.isRetryable, false)
      return true
    })
  }
  assert.equal(prompts.length, 0)
})

test('hostile model names: a 1 MB modelId is cut to 256 characters in the gate and the trail', async () => {
  const audit = path.join(tmp(), 'audit')
  const engine = new Engine({ policies: GATE, audit })
  const run = engine.startRun('bot')
  const model = new MockLanguageModelV2({
    modelId: 'm'.repeat(1 << 20),
    doGenerate: async () => ({ content: [{ type: 'text', text: 'ok' }], finishReason: 'stop', usage: { inputTokens: 1, outputTokens: 1 }, warnings: [] }),
  })
  const wrapped = ai5.wrapLanguageModel({ model, middleware: toolgateModelMiddleware(run) })
  assert.equal((await ai5.generateText({ model: wrapped, prompt: 'go' })).text, 'ok')
  await run.end('success')
  await engine.shutdown()
  const [r] = auditEvents(audit).filter((e) => e.kind === 'llm.result')
  assert.equal(r.model.length, 256)
})

test('Mastra: parallel tool calls in one step (allowed, blocked, hitl): the held one suspends, the others answer', async () => {
  const { Mastra } = await import('@mastra/core')
  const { Agent: MastraAgent } = await import('@mastra/core/agent')
  const { InMemoryStore } = await import('@mastra/core/storage')
  const { createTool } = await import('@mastra/core/tools')
  const { govern: governMastra } = await import('toolgate/mastra')
  const { mastraModel } = await import('./models.mjs')
  const { z } = await import('zod')
  const ran = []
  const mk = (id) => createTool({ id, description: id, inputSchema: z.object({ amount: z.number() }), execute: async ({ context }) => (ran.push([id, context.amount]), 'ok') })
  const engine = new Engine(GATE)
  const { model } = mastraModel([{ calls: [['c1', 'search', { amount: 1 }], ['c2', 'delete_all', { amount: 2 }], ['c3', 'refund', { amount: 900 }]] }, { text: 'done' }])
  const agent = new MastraAgent({ name: 'p', instructions: 'x', model, tools: { search: mk('search'), delete_all: mk('delete_all'), refund: mk('refund') } })
  const mastra = new Mastra({ agents: { p: agent }, storage: new InMemoryStore(), logger: false })
  const governed = governMastra(mastra.getAgent('p'), engine)
  const s = await governed.stream('go', { runId: 'par' })
  const chunks = []
  for await (const c of s.fullStream) chunks.push(c)
  const suspended = chunks.filter((c) => c.type === 'tool-call-suspended').map((c) => c.payload.toolCallId)
  assert.deepEqual(suspended, ['c3'])
  assert.ok(!ran.some(([t]) => t === 'delete_all' || t === 'refund'))
  assert.equal((await engine.reviews.pending()).length, 1)
})

test('a model call while a tool review is pending is refused without ending the run; approved, the run goes on', async () => {
  const audit = path.join(tmp(), 'audit')
  const engine = new Engine({ policies: budget(1e9), audit })
  const run = engine.startRun('bot')
  const ran = []
  // AI SDK v5 has no tool approval: a hitl tool call answers the refusal and stops the run.
  const steps = [{ calls: [['c1', 'refund', { amount: 500 }]] }, { calls: [['c2', 'refund', { amount: 500 }]] }, { text: 'after review' }]
  const { model, prompts } = scripted(MockLanguageModelV2, 2, toStream2, steps)
  const wrapped = ai5.wrapLanguageModel({ model, middleware: toolgateModelMiddleware(run) })
  const go = () => ai5.generateText({ model: wrapped, tools: governTools(tools(ai5, ran), run), prompt: 'refund', stopWhen: ai5.stepCountIs(3) })
  await assert.rejects(go(), (e) => e instanceof LlmBlockedError && e.decision.code === 'BLOCKED_RUN_ABORTED')
  assert.equal(prompts.length, 1)
  assert.ok(run.aborted)
  const [review] = await engine.reviews.pending()
  await engine.reviews.approve(review.id)
  assert.equal(await run.resume(), true)
  const r = await go()
  assert.deepEqual(ran, [['refund', 500]])
  assert.equal(r.text, 'after review')
  await run.end('success')
  await engine.shutdown()
  assert.deepEqual(auditEvents(audit).filter((e) => e.kind === 'run.ended').map((e) => e.status), ['success'])
})

test('Mastra: 20 concurrent runs of one governed agent: each run\'s model calls land on its own toolgate run', async () => {
  const { Agent: MastraAgent } = await import('@mastra/core/agent')
  const { createTool } = await import('@mastra/core/tools')
  const { govern: governMastra } = await import('toolgate/mastra')
  const { z } = await import('zod')
  const audit = path.join(tmp(), 'audit')
  const engine = new Engine({ policies: GATE, audit })
  // Each run: a tool call, then the answer; usage = the run's number (from its prompt).
  const who = (prompt) => Number(JSON.stringify(prompt).match(/u(\d+)/)[1])
  const answer = async (o) => {
    await new Promise((r) => setImmediate(r))
    const n = who(o.prompt)
    const usage = { inputTokens: n, outputTokens: 1, totalTokens: n + 1 }
    const called = o.prompt.some((m) => m.role === 'tool')
    const content = called ? [{ type: 'text', text: `u${n}` }] : [{ type: 'tool-call', toolCallId: `c${n}`, toolName: 'search', input: '{"amount":1}' }]
    return { content, finishReason: called ? 'stop' : 'tool-calls', usage, warnings: [] }
  }
  const model = new MockLanguageModelV2({ modelId: 'm', doGenerate: answer })
  const search = createTool({ id: 'search', description: 's', inputSchema: z.object({ amount: z.number() }), execute: async () => 'hits' })
  const governed = governMastra(new MastraAgent({ name: 'c', instructions: 'x', model, tools: { search } }), engine)
  const outs = await Promise.all(Array.from({ length: 20 }, (_, i) => governed.generate(`u${i + 1}`)))
  assert.deepEqual(outs.map((o) => o.text), Array.from({ length: 20 }, (_, i) => `u${i + 1}`))
  await engine.shutdown()
  const byRun = new Map()
  for (const e of auditEvents(audit).filter((e) => e.kind === 'llm.result')) byRun.set(e.runId, [...(byRun.get(e.runId) ?? []), e.tokensIn])
  assert.equal(byRun.size, 20)
  for (const tokens of byRun.values()) assert.deepEqual(tokens, [tokens[0], tokens[0]])
  const ended = auditEvents(audit).filter((e) => e.kind === 'run.ended')
  assert.equal(ended.length, 20)
})

test('coercing schemas: a string "5000" is decided as the 5000 the tool receives (OpenAI Agents JS and Mastra), approval included', async () => {
  const { tool } = await import('@openai/agents')
  const { z } = await import('zod')
  const ran = []
  const refund = tool({
    name: 'refund',
    description: 'refund',
    parameters: z.object({ amount: z.coerce.number() }),
    execute: async ({ amount }) => (ran.push(amount), `refunded ${amount}`),
  })
  const engine = new Engine(GATE)
  const model = new ScriptedModel([{ calls: [['c1', 'refund', { amount: '5000' }]] }, { text: 'ok' }])
  const governed = govern(new Agent({ name: 'a', model, tools: [refund] }), engine)
  const runner = new Runner({ tracingDisabled: true })
  let r = await runner.run(governed, 'go')
  assert.equal(r.interruptions.length, 1, 'held for review, not run on the raw string')
  const [review] = await engine.reviews.pending()
  assert.deepEqual(review.args, { amount: 5000 })
  r.state.approve(r.interruptions[0])
  r = await runner.run(governed, r.state)
  assert.deepEqual(ran, [5000])

  const { Agent: MastraAgent } = await import('@mastra/core/agent')
  const { createTool } = await import('@mastra/core/tools')
  const { govern: governMastra } = await import('toolgate/mastra')
  const { mastraModel } = await import('./models.mjs')
  const ran2 = []
  const refund2 = createTool({
    id: 'refund',
    description: 'refund',
    inputSchema: z.object({ amount: z.coerce.number() }),
    execute: async ({ context }) => (ran2.push(context.amount), 'ok'),
  })
  const engine2 = new Engine(GATE)
  const { model: m2 } = mastraModel([{ calls: [['c1', 'refund', { amount: '5000' }]] }, { text: 'ok' }])
  const g2 = governMastra(new MastraAgent({ name: 'b', instructions: 'x', model: m2, tools: { refund: refund2 } }), engine2)
  const s = await g2.stream('go')
  const chunks = []
  for await (const c of s.fullStream) chunks.push(c)
  assert.ok(chunks.some((c) => c.type === 'tool-call-suspended'))
  assert.deepEqual(ran2, [])
  assert.deepEqual((await engine2.reviews.pending())[0].args, { amount: 5000 })
})

test('Mastra: approving Mastra\'s own requireApproval question does not approve the toolgate review raised after it', async () => {
  const { Mastra } = await import('@mastra/core')
  const { Agent: MastraAgent } = await import('@mastra/core/agent')
  const { InMemoryStore } = await import('@mastra/core/storage')
  const { createTool } = await import('@mastra/core/tools')
  const { govern: governMastra } = await import('toolgate/mastra')
  const { mastraModel } = await import('./models.mjs')
  const { z } = await import('zod')
  const ran = []
  const refund = createTool({
    id: 'refund',
    description: 'refund',
    requireApproval: true,
    inputSchema: z.object({ amount: z.number() }),
    execute: async ({ context }) => (ran.push(context.amount), 'ok'),
  })
  const engine = new Engine(GATE)
  const { model } = mastraModel([{ calls: [['c1', 'refund', { amount: 900 }]] }, { text: 'done' }])
  const agent = new MastraAgent({ name: 'q', instructions: 'x', model, tools: { refund } })
  const mastra = new Mastra({ agents: { q: agent }, storage: new InMemoryStore(), logger: false })
  const governed = governMastra(mastra.getAgent('q'), engine)
  const drain = async (s) => {
    const out = []
    for await (const c of s.fullStream) out.push(c)
    return out
  }
  const first = await drain(await governed.stream('go', { runId: 'q1' }))
  assert.ok(first.some((c) => c.type === 'tool-call-approval'), "Mastra's own question")
  const second = await drain(await governed.approveToolCall({ runId: 'q1', toolCallId: 'c1' }))
  assert.ok(second.some((c) => c.type === 'tool-call-suspended'), 'then toolgate suspends for its review')
  assert.deepEqual(ran, [])
  assert.equal((await engine.reviews.pending()).length, 1, 'the review stays pending')
})

test('bounded: 1,100 SDK runs interrupted and never resumed keep at most 1,024 runs tracked per governed agent', async () => {
  const { tool } = await import('@openai/agents')
  const { z } = await import('zod')
  const engine = new Engine(GATE)
  const refund = tool({ name: 'refund', description: 'r', parameters: z.object({ amount: z.number() }), execute: async () => 'ok' })
  const model = {
    async getResponse(request) {
      const { Usage } = await import('@openai/agents')
      const id = `c-${Math.random()}`
      return { usage: new Usage({ requests: 1, inputTokens: 1, outputTokens: 1, totalTokens: 2 }), output: [{ type: 'function_call', callId: id, name: 'refund', arguments: '{"amount":900}', status: 'completed' }] }
    },
    async *getStreamedResponse() {},
  }
  const governed = govern(new Agent({ name: 'b', model, tools: [refund] }), engine)
  const runner = new Runner({ tracingDisabled: true })
  for (let i = 0; i < 1100; i++) {
    const r = await runner.run(governed, `go ${i}`)
    assert.equal(r.interruptions.length, 1)
  }
  const gov = governed[Object.getOwnPropertySymbols(governed).find((s) => s.description === 'toolgate.governor')]
  assert.ok(gov.runs.size <= 1024, `${gov.runs.size} runs tracked`)
})

test('OpenAI Agents JS with tracing on: concurrent runs inside one app-made withTrace are each attributed to their own run', async () => {
  const { Usage, tool, withTrace, setTraceProcessors } = await import('@openai/agents')
  const { z } = await import('zod')
  setTraceProcessors([]) // nothing exported (no network)
  const audit = path.join(tmp(), 'audit')
  const engine = new Engine({ policies: GATE, audit })
  const model = {
    model: 'fake',
    async getResponse(request) {
      await new Promise((r) => setImmediate(r))
      const input = Array.isArray(request.input) ? request.input : []
      const n = Number(String(input.find((i) => i.role === 'user')?.content).slice(1))
      const usage = new Usage({ requests: 1, inputTokens: n, outputTokens: 1, totalTokens: n + 1 })
      if (!input.some((i) => i.type === 'function_call_result')) {
        return { usage, output: [{ type: 'function_call', callId: `c${n}`, name: 'search', arguments: '{"q":"a"}', status: 'completed' }] }
      }
      return { usage, output: [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: `u${n}` }] }] }
    },
    async *getStreamedResponse() {},
  }
  const search = tool({ name: 'search', description: 's', parameters: z.object({ q: z.string() }), execute: async () => 'hits' })
  const governed = govern(new Agent({ name: 't', model, tools: [search] }), engine)
  const runner = new Runner({ tracingDisabled: false })
  await withTrace('app', () => Promise.all(Array.from({ length: 8 }, (_, i) => runner.run(governed, `u${i + 1}`))))
  const { settled } = await import('toolgate/openai-agents')
  await settled(governed)
  await engine.shutdown()
  const byRun = new Map()
  for (const e of auditEvents(audit).filter((e) => e.kind === 'llm.result')) byRun.set(e.runId, [...(byRun.get(e.runId) ?? []), e.tokensIn])
  assert.equal(byRun.size, 8)
  for (const tokens of byRun.values()) assert.deepEqual(tokens, [tokens[0], tokens[0]])
})

// The cost of the model side per model call through Node (not a test: prints numbers).
//
//   node bench/llm.mjs [--calls N]
//
// Per model call an adapter awaits `run.beforeLlm(model, messages)` and calls
// `run.recordLlm({...})`. Measured, as medians over N calls (after a warm-up), each in a fresh
// run every 20 calls (a budget's window stays small):
//   1. `await beforeLlm` + `recordLlm` with the support policies (no `llm.before` rule: the gate
//      answers at once from one flag), and with a token budget and a maxCalls rule in play;
//   2. the same through the AI SDK: `doGenerate` of a `wrapLanguageModel(MockLanguageModelV3,
//      toolgateModelMiddleware(run))` minus `doGenerate` of the bare mock (the adapter's whole
//      overhead: prompt conversion, gate, usage), on a 6-message prompt.
// The machine's load is printed: on a busy machine repeat and compare run for run.
import os from 'node:os'

import { wrapLanguageModel } from 'ai'
import { MockLanguageModelV3 } from 'ai/test'
import { Engine } from 'toolgate'
import { toolgateModelMiddleware } from 'toolgate/ai-sdk'

const argv = process.argv.slice(2)
const at = argv.indexOf('--calls')
const N = at >= 0 ? Number(argv[at + 1]) : 50_000

const ns = process.hrtime.bigint
const median = (xs) => Float64Array.from(xs).sort()[xs.length >> 1]
const p90 = (xs) => Float64Array.from(xs).sort()[Math.floor(xs.length * 0.9)]
const timer = []
for (let i = 0; i < 100_000; i++) timer.push(Number(-(ns() - ns())))
const timerNs = median(timer)

const noLlmRules = {
  policy: { name: 'tools only' },
  rules: [
    {
      id: 'no-delete', name: 'no-delete', priority: 1, enabled: true,
      selector: { phase: 'tool.before', tool: { name: 'delete*' } },
      condition: { kind: 'toolName', op: 'glob', value: 'delete*' },
      effect: { type: 'block', reason: 'no' },
    },
  ],
}
const withLlmRules = {
  policy: { name: 'budgets' },
  rules: [
    ...noLlmRules.rules,
    {
      id: 'tokens', name: 'tokens', priority: 1, enabled: true,
      selector: { phase: 'llm.before' },
      condition: { kind: 'metricWindow', scope: 'run', metric: { kind: 'inbuilt', key: 'llm_tokens_in' }, aggregate: 'sum', op: 'gte', value: 1e12 },
      effect: { type: 'block', reason: 'budget' },
    },
    {
      id: 'calls', name: 'calls', priority: 2, enabled: true,
      selector: { phase: 'llm.before', tool: { name: 'gpt-*' } },
      condition: { kind: 'maxCalls', selector: { by: 'toolName', patterns: ['gpt-*'] }, max: 1000, per: 'run' },
      effect: { type: 'block', reason: 'calls' },
    },
  ],
}

const messages = [
  { role: 'system', content: 'You are a support agent for ACME. Be brief.' },
  { role: 'user', content: 'Where is my order A-1234? It was due yesterday.' },
  { role: 'assistant', content: [{ type: 'tool-call', toolCallId: 'c1', toolName: 'get_order', input: { id: 'A-1234' } }] },
  { role: 'tool', content: [{ type: 'tool-result', toolCallId: 'c1', toolName: 'get_order', output: { type: 'json', value: { status: 'shipped' } } }] },
  { role: 'assistant', content: [{ type: 'text', text: 'It shipped today.' }] },
  { role: 'user', content: [{ type: 'text', text: 'Thanks. Can I get a refund of the shipping fee?' }] },
]
const gateMessages = messages.map((m) => ({ role: m.role, content: typeof m.content === 'string' ? m.content : JSON.stringify(m.content) }))

async function direct(policies) {
  const engine = new Engine({ policies })
  let run = engine.startRun('bench')
  const gate = []
  const record = []
  for (let i = 0; i < N + 5000; i++) {
    if (i % 20 === 0) {
      await run.end('success')
      run = engine.startRun('bench')
    }
    const t0 = ns()
    const d = await run.beforeLlm('gpt-4o', gateMessages)
    const t1 = ns()
    run.recordLlm({ tokensIn: 1200, tokensOut: 80, model: 'gpt-4o', durationMs: 900, callId: d.callId })
    const t2 = ns()
    if (!d.allowed) throw new Error(`unexpected ${d.code}`)
    if (i >= 5000) {
      gate.push(Number(t1 - t0) - timerNs)
      record.push(Number(t2 - t1) - timerNs)
    }
  }
  await run.end('success')
  await engine.shutdown()
  return { gate, record }
}

async function throughAiSdk(policies) {
  const engine = new Engine({ policies })
  const usage = { inputTokens: { total: 1200, noCache: 1200, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 80, text: 80, reasoning: 0 } }
  const answer = { content: [{ type: 'text', text: 'ok' }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] }
  const bare = new MockLanguageModelV3({ modelId: 'gpt-4o', doGenerate: async () => answer })
  let run = engine.startRun('bench')
  let wrapped = wrapLanguageModel({ model: bare, middleware: toolgateModelMiddleware(run) })
  const params = { prompt: messages }
  const withMw = []
  const without = []
  for (let i = 0; i < N + 5000; i++) {
    if (i % 20 === 0) {
      await run.end('success')
      run = engine.startRun('bench')
      wrapped = wrapLanguageModel({ model: bare, middleware: toolgateModelMiddleware(run) })
    }
    const t0 = ns()
    await bare.doGenerate(params)
    const t1 = ns()
    await wrapped.doGenerate(params)
    const t2 = ns()
    if (i >= 5000) {
      without.push(Number(t1 - t0) - timerNs)
      withMw.push(Number(t2 - t1) - timerNs)
    }
  }
  await run.end('success')
  await engine.shutdown()
  return { withMw, without }
}

const us = (x) => (x / 1000).toFixed(2)
console.log(`node ${process.version}, ${N} calls each, load average ${os.loadavg().map((l) => l.toFixed(1)).join(' ')}, timer ${timerNs} ns`)
for (const [label, policies] of [
  ['no llm.before rule', noLlmRules],
  ['token budget + maxCalls', withLlmRules],
]) {
  const { gate, record } = await direct(policies)
  console.log(`${label}: await beforeLlm median ${us(median(gate))} µs (p90 ${us(p90(gate))}), recordLlm median ${us(median(record))} µs (p90 ${us(p90(record))}), together ${us(median(gate) + median(record))} µs`)
  const { withMw, without } = await throughAiSdk(policies)
  console.log(
    `${label}: AI SDK doGenerate with toolgateModelMiddleware ${us(median(withMw))} µs, bare ${us(median(without))} µs: the adapter adds ${us(median(withMw) - median(without))} µs per model call`,
  )
}

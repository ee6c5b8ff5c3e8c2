// Scripted offline models for the adapters' tests, each the framework's own way: the AI SDK's
// MockLanguageModelV2/V3 (ai/test, ai-v5/test; Mastra 0.24 takes the v5 ones) and a class
// implementing the OpenAI Agents SDK's `Model` interface (how the SDK's own tests drive its
// runner). No network, no key.
import { Usage } from '@openai/agents'
import { MockLanguageModelV2 } from 'ai-v5/test'
import { z } from 'zod'

const usageOf = (version, tin, tout) =>
  version === 3
    ? { inputTokens: { total: tin, noCache: tin, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: tout, text: tout, reasoning: 0 } }
    : { inputTokens: tin, outputTokens: tout, totalTokens: (tin ?? 0) + (tout ?? 0) }

// A scripted model (generate and stream): `steps` in order, `usage(n)` per call (n from 1).
export function scripted(Mock, version, toStream, steps, usage = () => [10, 5]) {
  const prompts = []
  const finish = (r) => (version === 3 ? { unified: r, raw: r } : r)
  const step = () => steps[prompts.length - 1] ?? { text: 'done' }
  const model = new Mock({
    modelId: 'mock-gpt',
    doGenerate: async (o) => {
      prompts.push(o.prompt)
      const s = step()
      const u = usageOf(version, ...usage(prompts.length))
      const content = s.calls
        ? s.calls.map(([id, toolName, input]) => ({ type: 'tool-call', toolCallId: id, toolName, input: JSON.stringify(input) }))
        : [{ type: 'text', text: s.text }]
      return { content, finishReason: finish(s.calls ? 'tool-calls' : 'stop'), usage: u, warnings: [] }
    },
    doStream: async (o) => {
      prompts.push(o.prompt)
      const s = step()
      const parts = [{ type: 'stream-start', warnings: [] }]
      if (s.calls) for (const [id, toolName, input] of s.calls) parts.push({ type: 'tool-call', toolCallId: id, toolName, input: JSON.stringify(input) })
      else parts.push({ type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: s.text }, { type: 'text-end', id: 't' })
      for (const u of s.finishes ?? [usage(prompts.length)]) {
        parts.push({ type: 'finish', finishReason: finish(s.calls ? 'tool-calls' : 'stop'), usage: usageOf(version, ...u) })
      }
      return { stream: toStream(parts) }
    },
  })
  return { model, prompts }
}

export function tools(sdk, ran) {
  return {
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

// A scripted model: answers `steps` in order (`{calls: [[callId, tool, args], …]}` or
// `{text}`), `usage` per call, and records the requests it was given.
export class ScriptedModel {
  constructor(steps, { usage = { inputTokens: 10, outputTokens: 5 }, name = 'fake-gpt' } = {}) {
    this.steps = steps
    this.usage = usage
    this.model = name
    this.requests = []
  }
  next(request) {
    this.requests.push(request)
    const s = this.steps[this.requests.length - 1] ?? { text: 'done' }
    const u = typeof this.usage === 'function' ? this.usage(this.requests.length) : this.usage
    const usage = new Usage({ requests: 1, inputTokens: 0, outputTokens: 0, totalTokens: 0 })
    // A hostile model may report anything: it is put in as is.
    Object.assign(usage, { inputTokens: u?.inputTokens, outputTokens: u?.outputTokens })
    const output = s.calls
      ? s.calls.map(([callId, name, args]) => ({ type: 'function_call', callId, name, arguments: JSON.stringify(args), status: 'completed' }))
      : [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: s.text }] }]
    return { usage, output }
  }
  async getResponse(request) {
    if (this.throwAt === this.requests.length + 1) {
      this.requests.push(request)
      throw new Error('model exploded')
    }
    return this.next(request)
  }
  async *getStreamedResponse(request) {
    const { usage, output } = this.next(request)
    for (const item of output) if (item.type === 'message') yield { type: 'output_text_delta', delta: item.content[0].text }
    yield { type: 'response_done', response: { id: `resp-${this.requests.length}`, usage, output } }
  }
}

// A scripted model: `steps` in order (`{calls: [[id, tool, args], …]}` or `{text}`), `usage`
// per call (a function of the call's number, or one value), the prompts it was given.
export function mastraModel(steps, { usage = { inputTokens: 10, outputTokens: 5, totalTokens: 15 } } = {}) {
  const prompts = []
  const usageOf = () => (typeof usage === 'function' ? usage(prompts.length) : usage)
  const step = () => steps[prompts.length - 1] ?? { text: 'done' }
  const model = new MockLanguageModelV2({
    modelId: 'mock-model',
    doGenerate: async (o) => {
      prompts.push(o.prompt)
      const s = step()
      const content = s.calls
        ? s.calls.map(([id, toolName, args]) => ({ type: 'tool-call', toolCallId: id, toolName, input: JSON.stringify(args) }))
        : [{ type: 'text', text: s.text }]
      return { content, finishReason: s.calls ? 'tool-calls' : 'stop', usage: usageOf(), warnings: [] }
    },
    doStream: async (o) => {
      prompts.push(o.prompt)
      const s = step()
      const parts = [{ type: 'stream-start', warnings: [] }]
      if (s.calls) for (const [id, toolName, args] of s.calls) parts.push({ type: 'tool-call', toolCallId: id, toolName, input: JSON.stringify(args) })
      else parts.push({ type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: s.text }, { type: 'text-end', id: 't' })
      parts.push({ type: 'finish', finishReason: s.calls ? 'tool-calls' : 'stop', usage: usageOf() })
      return { stream: new ReadableStream({ start: (c) => (parts.forEach((p) => c.enqueue(p)), c.close()) }) }
    },
  })
  return { model, prompts }
}


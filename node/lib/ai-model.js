'use strict'
// The AI SDK's language-model side (LanguageModelV2 of AI SDK v5, V3 of v6), structurally: the
// middleware behind `toolgateModelMiddleware` (toolgate/ai-sdk) and the model wrapper of
// toolgate/mastra (whose agents take AI SDK models).

const llm = require('./llm.js')

// One part of a prompt message as the gate reads it.
function partOf(role, p) {
  if (p == null || typeof p !== 'object') return { role, kind: 'text', content: p }
  switch (p.type) {
    case 'text':
    case 'reasoning':
      return { role, kind: p.type, content: p.text }
    case 'tool-call':
      return { role, kind: 'tool_call', content: { toolName: p.toolName, input: p.input ?? p.args } }
    case 'tool-result':
      return { role, kind: 'tool_result', content: { toolName: p.toolName, output: p.output ?? p.result } }
    case 'file':
    case 'image':
      // The bytes are not text a detector reads: the gate sees what they are, not their data.
      return { role, kind: 'file', content: { mediaType: p.mediaType ?? p.mimeType, filename: p.filename } }
    default:
      return { role, kind: String(p.type ?? 'unknown'), content: p }
  }
}

/** A `LanguageModelV2/V3Prompt` as the gate's messages: one entry per part. */
function promptMessages(prompt) {
  const out = []
  if (!Array.isArray(prompt)) return out
  for (const m of prompt) {
    if (m == null || typeof m !== 'object') continue
    const role = typeof m.role === 'string' ? m.role : 'unknown'
    if (typeof m.content === 'string') out.push({ role, kind: 'text', content: m.content })
    else if (Array.isArray(m.content)) for (const p of m.content) out.push(partOf(role, p))
  }
  return out
}

// A usage's count: v3 `{total, …}` objects or v2 numbers.
function count(u) {
  return u !== null && typeof u === 'object' ? u.total : u
}

/**
 * The middleware (`wrapGenerate` / `wrapStream`, for `wrapLanguageModel` of v5 and v6) gating
 * each call on `runOf()`'s `llm.before` rules and recording its usage there; `runOf()` answering
 * `null`/`undefined` lets the call through unrecorded (no run to govern it). `before(run,
 * params)`, when given, is awaited before the gate.
 */
function modelMiddleware(runOf, table, before) {
  // Records the usage of result `r`: its `usage`, or — when it is a stream (`doStream`, or a
  // framework's `doGenerate` answering a stream, as Mastra's model wrappers do) — that of its
  // `finish` part. Answers the result to give back (a stream piped through the tracking).
  const track = (run, name, r, started, callId) => {
    const record = (tokensIn, tokensOut) =>
      llm.recordUsage(run, { model: name, tokensIn, tokensOut, durationMs: performance.now() - started, prices: table, callId })
    if (r == null || r.stream == null || typeof r.stream.pipeThrough !== 'function') {
      record(count(r?.usage?.inputTokens), count(r?.usage?.outputTokens))
      return r
    }
    // Usage at the first `finish` part; a later one (a hostile stream repeating it) adds only
    // what goes beyond what was recorded. A stream that ends without one records the call
    // with no tokens.
    let seenIn = 0
    let seenOut = 0
    let recorded = false
    const onUsage = (usage) => {
      const tin = llm.tokens(count(usage?.inputTokens))
      const tout = llm.tokens(count(usage?.outputTokens))
      if (recorded && tin <= seenIn && tout <= seenOut) return
      record(Math.max(0, tin - seenIn), Math.max(0, tout - seenOut))
      seenIn = Math.max(seenIn, tin)
      seenOut = Math.max(seenOut, tout)
      recorded = true
    }
    const stream = r.stream.pipeThrough(
      new TransformStream({
        transform(part, controller) {
          if (part?.type === 'finish') onUsage(part.usage)
          controller.enqueue(part)
        },
        flush() {
          if (!recorded) onUsage(undefined)
        },
      }),
    )
    return { ...r, stream }
  }
  const wrap = async (call, params, model) => {
    const run = runOf()
    if (run == null) return call()
    const name = llm.modelName(model)
    if (before !== undefined) await before(run, params)
    const d = await llm.gate(run, name, promptMessages(params?.prompt))
    const started = performance.now()
    return track(run, name, await call(), started, d.callId)
  }
  return {
    specificationVersion: 'v3',
    middlewareVersion: 'v2',
    wrapGenerate: ({ doGenerate, params, model }) => wrap(doGenerate, params, model),
    wrapStream: ({ doStream, params, model }) => wrap(doStream, params, model),
  }
}

/**
 * `model` (a LanguageModelV2/V3 object) with `middleware` applied, as `wrapLanguageModel` does
 * (for frameworks that take a model object, without importing the app's `ai`).
 */
function wrapModel(model, middleware) {
  if (model == null || typeof model.doGenerate !== 'function') return model
  const doGenerate = (params) =>
    middleware.wrapGenerate({ doGenerate: () => model.doGenerate(params), doStream: () => model.doStream(params), params, model })
  const doStream = (params) =>
    middleware.wrapStream({ doGenerate: () => model.doGenerate(params), doStream: () => model.doStream(params), params, model })
  // Everything else is the model's own, read on the model itself (getters and private fields work).
  return new Proxy(model, {
    get(target, prop) {
      if (prop === 'doGenerate') return doGenerate
      if (prop === 'doStream') return doStream
      const v = Reflect.get(target, prop, target)
      return typeof v === 'function' ? v.bind(target) : v
    },
  })
}

module.exports = { modelMiddleware, wrapModel, promptMessages, count }

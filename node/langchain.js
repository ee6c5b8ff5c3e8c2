'use strict'
// LangChain.js: `wrapTools(tools, run)` returns the tools with every call decided by toolgate.
//
//   const tools = wrapTools([getWeather, issueRefund], run)
//   const model = chatModel.bindTools(tools)       // or createAgent / ToolNode with `tools`
//
// Each wrapped tool is the original tool with its function governed (name, description and
// schema are the original's, so models and agents see the same tool). The decision is made on
// the arguments the tool function receives — after the tool's schema validated and coerced
// them (`{"amount": "5000"}` with `z.coerce.number()` is decided as 5000) — whichever way the
// tool is called: `invoke`, `call`, or its `func` directly. A blocked call never runs: called
// with a tool call, the tool answers a `ToolMessage` with `status: "error"` and
// `toolgate blocked this call: <reason> [<CODE>, rule <id>]` (the Python middleware's text);
// called with bare args, that text. A call held for review (hitl) answers the same, naming
// the review; the run is then stopped (`run.aborted`: later calls are refused) until a human
// approves it, and the agent should stop there (design §12/§13: "hitl: … the agent stops"):
//
//   const agent = createAgent({ model, tools: wrapTools(tools, run), middleware: [toolgateMiddleware(run)] })
//
// `toolgateMiddleware(run)` (LangChain v1 `createAgent`, package `langchain`) ends the agent
// before its next model call once `run.aborted` is true: the model is not asked again, and the
// agent's last message is the refusal naming the review. It is also the model side: each model
// call gated by the run's `llm.before` rules (`wrapModelCall`) and its usage recorded. A hand-written loop (or a LangGraph
// graph around `ToolNode`) checks `run.aborted` itself.

const { refusalText, jsonable } = require('./index.js')
const llm = require('./lib/llm.js')
const { errorText } = require('./lib/errors.js')

let core = null
// @langchain/core is the app's own: loaded only when needed.
function lc() {
  core ??= {
    ToolMessage: require('@langchain/core/messages').ToolMessage,
    parseCallbackConfigArg: require('@langchain/core/callbacks/manager').parseCallbackConfigArg,
  }
  return core
}

const kGoverned = Symbol('toolgate.governedBy')

function isToolCall(x) {
  return x !== null && typeof x === 'object' && x.type === 'tool_call'
}

function isTool(t) {
  return t != null && typeof t.invoke === 'function' && typeof t.name === 'string'
}

// What the audit trail records of a tool's answer.
function outcome(out) {
  if (out !== null && typeof out === 'object' && typeof out._getType === 'function' && 'tool_call_id' in out) {
    return out.status === 'error' ? { error: String(out.content) } : { output: jsonable(out.content) }
  }
  return { output: jsonable(out) }
}

function wrapTool(t, run) {
  if (!isTool(t)) throw new TypeError('wrapTools: expected LangChain tools (with a name and invoke)')
  if (t[kGoverned] === run) return t // already governed by this run
  const wrapped = Object.create(t)
  Object.defineProperty(wrapped, kGoverned, { value: run })
  const tags = Array.isArray(t.tags) ? t.tags : undefined
  // The refusal the tool answers in place of its result (a ToolMessage when called with a tool
  // call: `call` passes a ToolMessage through as it is).
  const refused = (decision, callId) => {
    const answer =
      callId === undefined
        ? refusalText(decision)
        : new (lc().ToolMessage)({ content: refusalText(decision), tool_call_id: callId, name: t.name, status: 'error' })
    return t.responseFormat === 'content_and_artifact' ? [answer, undefined] : answer
  }
  // Decides `args` — what the tool function receives — and runs `body` only if allowed.
  const governed = async (args, config, body) => {
    const callId = config?.toolCall?.id ?? undefined
    const d = await run.beforeTool({ name: t.name, args: jsonable(args ?? {}), tags, callId })
    if (!d.allowed) return refused(d, callId)
    const started = performance.now()
    let out
    try {
      out = await body()
    } catch (e) {
      await run.afterTool(d.callId, { durationMs: performance.now() - started, error: errorText(e) })
      throw e
    }
    const after = await run.afterTool(d.callId, { ...outcome(out), durationMs: performance.now() - started })
    if (!after.allowed) return refused(after, callId)
    return out
  }
  if (typeof t.func === 'function') {
    // DynamicStructuredTool / DynamicTool (what `tool()` makes): `_call` calls `this.func`.
    const func = t.func
    wrapped.func = function (input, runManager, config) {
      return governed(input, config, () => func.call(this, input, runManager, config))
    }
  } else if (typeof t._call === 'function') {
    const call = t._call
    wrapped._call = function (input, runManager, config) {
      return governed(input, config, () => call.call(this, input, runManager, config))
    }
  } else {
    throw new TypeError(`wrapTools: tool ${t.name} has neither func nor _call (not a LangChain tool)`)
  }
  if (typeof t.call === 'function') {
    // `call(toolCall)`: the call's id reaches the function's config, as with `invoke(toolCall)`.
    const call = t.call
    wrapped.call = function (arg, configArg, moreTags) {
      if (isToolCall(arg)) {
        const config = lc().parseCallbackConfigArg(configArg)
        if (config.toolCall === undefined) configArg = { ...config, toolCall: arg }
      }
      return call.call(this, arg, configArg, moreTags)
    }
  }
  return wrapped
}

/**
 * The LangChain.js tools `tools` (an array, or one tool) with every call decided by `run` first.
 * A tool's `tags` are its toolgate tags. A tool put into the returned array later (`push`,
 * `splice`, an index) is governed as well.
 */
function wrapTools(tools, run) {
  if (run == null || typeof run.beforeTool !== 'function') throw new TypeError('wrapTools: expected a toolgate Run')
  if (!Array.isArray(tools)) return wrapTool(tools, run)
  const list = tools.map((t) => wrapTool(t, run))
  const isIndex = (prop) => typeof prop === 'string' && /^(0|[1-9][0-9]*)$/.test(prop)
  return new Proxy(list, {
    set(target, prop, value) {
      return Reflect.set(target, prop, isIndex(prop) ? wrapTool(value, run) : value)
    },
    defineProperty(target, prop, desc) {
      if (isIndex(prop) && 'value' in desc) desc = { ...desc, value: wrapTool(desc.value, run) }
      return Reflect.defineProperty(target, prop, desc)
    },
  })
}

// A LangChain message as the gate's messages (one per content block of a list content).
function messageEntries(m, out) {
  if (m == null || typeof m !== 'object') return
  const type = typeof m._getType === 'function' ? m._getType() : m.type ?? m.role
  const role = { human: 'user', ai: 'assistant', system: 'system', tool: 'tool' }[type] ?? String(type ?? 'unknown')
  const c = m.content
  if (typeof c === 'string') {
    if (c !== '' || !Array.isArray(m.tool_calls) || m.tool_calls.length === 0) {
      out.push({ role, kind: type === 'tool' ? 'tool_result' : 'text', content: c })
    }
  } else if (Array.isArray(c)) {
    for (const b of c) {
      if (b?.type === 'text') out.push({ role, kind: 'text', content: b.text })
      else if (b?.type === 'image_url' || b?.type === 'image' || b?.type === 'file') out.push({ role, kind: 'file', content: { type: b.type } })
      else out.push({ role, kind: String(b?.type ?? 'unknown'), content: b })
    }
  }
  if (Array.isArray(m.tool_calls)) {
    for (const tc of m.tool_calls) out.push({ role, kind: 'tool_call', content: { toolName: tc?.name, input: tc?.args } })
  }
}

/** The gate's messages of a `wrapModelCall` request: the system message, then the messages. */
function requestMessages(request) {
  const out = []
  const sys = request?.systemMessage ?? undefined
  if (sys != null) messageEntries(sys, out)
  else if (typeof request?.systemPrompt === 'string' && request.systemPrompt !== '') {
    out.push({ role: 'system', kind: 'text', content: request.systemPrompt })
  }
  for (const m of request?.messages ?? []) messageEntries(m, out)
  return out.filter((e) => !(e.role === 'system' && e.content === ''))
}

// The model's name in a chat model (`model`, `modelName`, `model_name`, else its class).
function chatModelName(model) {
  if (model == null) return 'unknown'
  for (const k of ['model', 'modelName', 'model_name', 'modelId']) {
    if (typeof model[k] === 'string' && model[k] !== '') return model[k]
  }
  return typeof model._llmType === 'function' ? String(model._llmType()) : model.constructor?.name ?? 'unknown'
}

/**
 * A LangChain v1 `createAgent` middleware (package `langchain`) for the model side and the
 * stops of `run`:
 * - before each model call, the `llm.before` gate (`run.beforeLlm`). Block: the model is not
 *   called, the agent ends with an `AIMessage` carrying the refusal text, and the run ends
 *   `budget_exceeded`. Hitl: the same message naming the review, and the run is stopped.
 * - after it, the call's usage (`usage_metadata`) recorded as an `llm.result` (tokens, model,
 *   duration, cost from `prices` or the engine's own table).
 * - it ends the agent (`jumpTo: "end"`) before its next model call once `run` is stopped by a
 *   hitl decision (`run.aborted`).
 */
function toolgateMiddleware(run, { prices } = {}) {
  if (run == null || typeof run.beforeTool !== 'function') throw new TypeError('toolgateMiddleware: expected a toolgate Run')
  const table = llm.pricesOf(prices)
  const { createMiddleware } = require('langchain')
  const { AIMessage } = require('@langchain/core/messages')
  return createMiddleware({
    name: 'toolgate',
    beforeModel: {
      canJumpTo: ['end'],
      hook: () => (run.aborted ? { jumpTo: 'end' } : undefined),
    },
    async wrapModelCall(request, handler) {
      const name = chatModelName(request?.model)
      const d = await llm.beforeModel(run, name, requestMessages(request))
      if (!d.allowed) {
        if (llm.endsRun(d)) await run.end('budget_exceeded').catch(() => {})
        return new AIMessage({ content: refusalText(d), response_metadata: { toolgate: { code: d.code, reviewId: d.reviewId } } })
      }
      const started = performance.now()
      const out = await handler(request)
      const usage = out?.usage_metadata
      llm.recordUsage(run, {
        model: name,
        tokensIn: usage?.input_tokens,
        tokensOut: usage?.output_tokens,
        durationMs: performance.now() - started,
        prices: table,
        callId: d.callId,
      })
      return out
    },
  })
}

module.exports = { wrapTools, toolgateMiddleware, refusalText }

'use strict'
// LangChain.js: `wrapTools(tools, run)` returns the tools with every call decided by toolgate.
//
//   const tools = wrapTools([getWeather, issueRefund], run)
//   const model = chatModel.bindTools(tools)       // or createAgent / ToolNode with `tools`
//
// Each wrapped tool is the original tool with its `invoke` governed (name, description and
// schema are the original's, so models and agents see the same tool). A blocked call never
// runs: invoked with a tool call, the tool answers a `ToolMessage` with `status: "error"` and
// `toolgate blocked this call: <reason> [<CODE>, rule <id>]` (the Python middleware's text);
// invoked with bare args, that text. A call held for review (hitl) answers the same, naming
// the review; the run is then stopped (`run.aborted`: later calls are refused) until a human
// approves it, and the agent should stop there (design §12/§13: "hitl: … the agent stops"):
//
//   const agent = createAgent({ model, tools: wrapTools(tools, run), middleware: [toolgateMiddleware(run)] })
//
// `toolgateMiddleware(run)` (LangChain v1 `createAgent`, package `langchain`) ends the agent
// before its next model call once `run.aborted` is true: the model is not asked again, and the
// agent's last message is the refusal naming the review. A hand-written loop (or a LangGraph
// graph around `ToolNode`) checks `run.aborted` itself.

const { refusalText, jsonable } = require('./index.js')

let ToolMessage = null
function toolMessage(fields) {
  // @langchain/core is the app's own: loaded only when a refusal is answered to a tool call.
  ToolMessage ??= require('@langchain/core/messages').ToolMessage
  return new ToolMessage(fields)
}

function isToolCall(x) {
  return x !== null && typeof x === 'object' && x.type === 'tool_call'
}

function errorText(e) {
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e)
}

// What the audit trail records of a tool's answer.
function outcome(out) {
  if (out !== null && typeof out === 'object' && typeof out._getType === 'function' && 'tool_call_id' in out) {
    return out.status === 'error' ? { error: String(out.content) } : { output: jsonable(out.content) }
  }
  return { output: jsonable(out) }
}

function wrapTool(t, run) {
  if (t == null || typeof t.invoke !== 'function' || typeof t.name !== 'string') {
    throw new TypeError('wrapTools: expected LangChain tools (with a name and invoke)')
  }
  const wrapped = Object.create(t)
  const tags = Array.isArray(t.tags) ? t.tags : undefined
  const refused = (decision, callId) =>
    callId === undefined
      ? refusalText(decision)
      : toolMessage({ content: refusalText(decision), tool_call_id: callId, name: t.name, status: 'error' })
  wrapped.invoke = async function invoke(input, config) {
    const call = isToolCall(input)
    const args = call ? input.args : input
    const callId = call ? input.id ?? undefined : config?.toolCall?.id ?? undefined
    const d = await run.beforeTool({ name: t.name, args: jsonable(args ?? {}), tags, callId })
    if (!d.allowed) return refused(d, callId)
    const started = performance.now()
    let out
    try {
      out = await t.invoke(input, config)
    } catch (e) {
      await run.afterTool(d.callId, { durationMs: performance.now() - started, error: errorText(e) })
      throw e
    }
    const after = await run.afterTool(d.callId, { ...outcome(out), durationMs: performance.now() - started })
    if (after !== null && !after.allowed) return refused(after, callId)
    return out
  }
  return wrapped
}

/**
 * The LangChain.js tools `tools` (an array, or one tool) with every call decided by `run` first.
 * A tool's `tags` are its toolgate tags.
 */
function wrapTools(tools, run) {
  if (run == null || typeof run.beforeTool !== 'function') throw new TypeError('wrapTools: expected a toolgate Run')
  if (Array.isArray(tools)) return tools.map((t) => wrapTool(t, run))
  return wrapTool(tools, run)
}

/**
 * A LangChain v1 `createAgent` middleware that ends the agent (`jumpTo: "end"`) before its next
 * model call once `run` is stopped by a hitl decision (`run.aborted`). Needs the `langchain`
 * package (the app's own; loaded here, when the middleware is made).
 */
function toolgateMiddleware(run) {
  if (run == null || typeof run.beforeTool !== 'function') throw new TypeError('toolgateMiddleware: expected a toolgate Run')
  const { createMiddleware } = require('langchain')
  return createMiddleware({
    name: 'toolgate',
    beforeModel: {
      canJumpTo: ['end'],
      hook: () => (run.aborted ? { jumpTo: 'end' } : undefined),
    },
  })
}

module.exports = { wrapTools, toolgateMiddleware, refusalText }

'use strict'
// OpenAI Agents JS (`@openai/agents`): `govern(agent, engine, opts)` returns a governed copy of
// the agent (`agent.clone`), as the Python adapter does for the Python SDK.
//
//   const governed = govern(agent, engine, { agentId: 'support', enduser: { id: 'cust-1' } })
//   const result = await run(governed, 'refund order 7')
//
// One toolgate run per SDK run (a run resumed from its `RunState` is the same run; it ends with
// the agent's `agent_end`). Tools: every function tool gets a `needsApproval` and a governed
// `invoke`. A blocked call does not run and the model reads `toolgate blocked this call:
// <reason> [<CODE>, rule <id>]`. A hitl call is an SDK approval interruption
// (`result.interruptions`): `result.state.approve(item)` approves the toolgate review raised for
// exactly that call and its arguments (the call then runs on resume), `reject(item)` denies it.
// A tool's own `needsApproval` is kept: either asking means approval is needed.
// Model: the agent's model is wrapped; each call is decided by the `llm.before` rules first
// (block: the model is not called, the run ends `budget_exceeded` and the SDK's `run()` rejects
// with an `LlmBlockedError`; hitl: a `ReviewRequiredError`) and its usage recorded after.

const { refusalText, jsonable, ToolgateError } = require('./index.js')

const kGovernor = Symbol('toolgate.governor')
const llm = require('./lib/llm.js')
const { errorText } = require('./lib/errors.js')
const { remember } = require('./lib/maps.js')

/** SDK runs tracked per governed agent (the oldest forgotten first) and decisions per run. */
const MAX_RUNS = 1024
const MAX_DECISIONS = 4096

let tracing = null
// `@openai/agents-core` is the app's own (a dependency of `@openai/agents`): loaded when used.
function currentTrace() {
  tracing ??= require('@openai/agents-core')
  try {
    return tracing.getCurrentTrace() ?? null
  } catch {
    return null
  }
}

function argsOf(input) {
  if (typeof input === 'string') {
    if (input.trim() === '') return {}
    try {
      return jsonable(JSON.parse(input))
    } catch {
      return { _raw: input }
    }
  }
  return jsonable(input ?? {})
}

// The SDK's tools parse and validate their arguments (zod: coercions, defaults) inside `invoke`,
// and only `execute` sees the result; `needsApproval` and guardrails see the raw JSON. To decide
// on exactly what will run, the original `invoke` is asked to parse only: the SDK's
// parsed-input callback (a symbol of @openai/agents-core, looked up in both its CJS and ESM
// builds, and in the details the runner passes) receives the parsed value and stops the call by
// throwing the reason of an already aborted signal (which the SDK rethrows untouched: no
// execute, no error function, no error span).
let callbackSymbols = null
const kParsedDescription = 'openai.agents.functionToolParsedInputCallback'
async function parsedInputSymbols(details) {
  if (callbackSymbols === null) {
    const found = new Set()
    try {
      const path = require('node:path')
      const { pathToFileURL } = require('node:url')
      const dir = path.dirname(require.resolve('@openai/agents-core'))
      const cjs = require(path.join(dir, 'tool.js')).FUNCTION_TOOL_PARSED_INPUT_CALLBACK
      if (typeof cjs === 'symbol') found.add(cjs)
      const esm = (await import(pathToFileURL(path.join(dir, 'tool.mjs')).href)).FUNCTION_TOOL_PARSED_INPUT_CALLBACK
      if (typeof esm === 'symbol') found.add(esm)
    } catch {
      // another layout: only the symbols found in the runner's details are used
    }
    callbackSymbols = found
  }
  if (details != null && typeof details === 'object') {
    for (const sym of Object.getOwnPropertySymbols(details)) if (sym.description === kParsedDescription) callbackSymbols.add(sym)
  }
  return callbackSymbols
}

/** The arguments `invoke` would give the tool's `execute` for JSON text `input`, or undefined. */
async function parsedArgs(invoke, runContext, input, details) {
  const symbols = await parsedInputSymbols(details)
  if (symbols.size === 0) return undefined
  const stop = new Error('toolgate: arguments parsed, not executed')
  const controller = new AbortController()
  controller.abort(stop)
  let got
  const probe = { toolCall: details?.toolCall, signal: controller.signal }
  for (const sym of symbols) {
    probe[sym] = (value) => {
      got = { value }
      throw stop
    }
  }
  try {
    await invoke(runContext, input, probe)
  } catch (e) {
    if (e !== stop) return undefined
  }
  return got === undefined ? undefined : jsonable(got.value)
}

function keyOf(callId, args) {
  return `${callId}\u0000${JSON.stringify(args)}`
}

/** One SDK run: its toolgate run, its decisions and the calls the SDK holds for approval. */
class RunEntry {
  constructor(ctx, run) {
    this.ctx = ctx
    this.run = run
    this.decisions = new Map() // key -> Decision
    this.held = new Map() // key -> {tool, callId, reviewId}
  }
}

class Governor {
  constructor(engine, { agentId, enduser, agentTags, prices, approver }) {
    this.engine = engine
    this.agentId = agentId
    this.enduser = enduser
    this.agentTags = agentTags
    this.prices = llm.pricesOf(prices)
    this.approver = approver
    this.runs = new Map() // RunContext -> RunEntry (insertion order: the oldest first)
    this.byTrace = new WeakMap() // the SDK's trace of a run -> its RunEntry (for the model side)
    this.last = null // the most recent RunEntry (a model call outside any trace)
    this.ending = new Set() // `run.end` promises not yet settled
  }

  entry(ctx) {
    let e = this.runs.get(ctx)
    if (e === undefined) {
      const run = this.engine.startRun({ agentId: this.agentId, enduser: this.enduser, agentTags: this.agentTags })
      e = new RunEntry(ctx, run)
      remember(this.runs, ctx, e, MAX_RUNS)
    }
    const trace = currentTrace()
    if (trace !== null) this.byTrace.set(trace, e)
    this.last = e
    return e
  }

  // The run of a model call: the SDK passes the model no context, so it is found through the
  // SDK's current trace (set by `agent_start` of the same run), else the most recent run.
  entryOfModelCall() {
    const trace = currentTrace()
    const e = trace === null ? undefined : this.byTrace.get(trace)
    return e ?? this.last
  }

  async mayAnswer(reviewId, ctx) {
    if (this.approver === undefined) return true
    try {
      const review = (await this.engine.reviews.list()).find((r) => r.id === reviewId)
      if (review === undefined) return false
      return (await this.approver(review, ctx)) === true
    } catch {
      return false
    }
  }

  // Applies the SDK's answer to the review held for `key`: whether it was applied.
  async answer(e, key, approve) {
    const held = e.held.get(key)
    if (held === undefined) return false
    if (!(await this.mayAnswer(held.reviewId, e.ctx))) return false
    if (!e.held.delete(key)) return false
    try {
      if (approve) await this.engine.reviews.approve(held.reviewId)
      else await this.engine.reviews.deny(held.reviewId)
    } catch (err) {
      if (!(err instanceof ToolgateError)) throw err // decided already: keep that
    }
    e.decisions.delete(key)
    await e.run.resume()
    return true
  }

  // The SDK's rejections of held calls, applied to their reviews (approvals are applied when
  // the approved call is about to run, with its arguments in hand).
  async settle(e) {
    const ctx = e.ctx
    if (e.held.size === 0 || typeof ctx?.isToolApproved !== 'function') return
    for (const [key, h] of [...e.held]) {
      let answer
      try {
        answer = ctx.isToolApproved({ toolName: h.tool, callId: h.callId })
      } catch {
        continue
      }
      if (answer === false) await this.answer(e, key, false)
    }
  }

  async decide(e, tool, args, callId) {
    const key = keyOf(callId, args)
    const known = e.decisions.get(key)
    if (known !== undefined) return { d: known, key }
    const d = await e.run.beforeTool({ name: tool, args, callId })
    remember(e.decisions, key, d, MAX_DECISIONS)
    if (d.effect === 'hitl' && d.reviewId !== null) remember(e.held, key, { tool, callId, reviewId: d.reviewId }, MAX_DECISIONS)
    return { d, key }
  }

  wrapTool(t) {
    if (t == null || t.type !== 'function' || typeof t.invoke !== 'function') return t
    const gov = this
    const ownApproval = t.needsApproval
    const invoke = t.invoke
    return {
      ...t,
      async needsApproval(runContext, input, callId) {
        const own = typeof ownApproval === 'function' ? await ownApproval(runContext, input, callId) : ownApproval === true
        const e = gov.entry(runContext)
        await gov.settle(e)
        const text = typeof input === 'string' ? input : JSON.stringify(input ?? {})
        const args = (await parsedArgs(invoke, runContext, text, undefined)) ?? argsOf(input)
        const { d } = await gov.decide(e, t.name, args, callId ?? 'call')
        return own === true || d.effect === 'hitl'
      },
      async invoke(runContext, input, details) {
        const e = gov.entry(runContext)
        const callId = details?.toolCall?.callId ?? 'call'
        const args = (await parsedArgs(invoke, runContext, input, details)) ?? argsOf(input)
        let { d, key } = await gov.decide(e, t.name, args, callId)
        if (d.effect === 'hitl' && e.held.has(key)) {
          let approved
          try {
            approved = runContext?.isToolApproved?.({ toolName: t.name, callId })
          } catch {
            approved = undefined
          }
          if (approved === true && (await gov.answer(e, key, true))) ({ d } = await gov.decide(e, t.name, args, callId))
        }
        e.decisions.delete(key)
        if (!d.allowed) return refusalText(d)
        const started = performance.now()
        let out
        try {
          out = await invoke.call(this, runContext, input, details)
        } catch (err) {
          await e.run.afterTool(d.callId, { durationMs: performance.now() - started, error: errorText(err) })
          throw err
        }
        const after = await e.run.afterTool(d.callId, { output: jsonable(out), durationMs: performance.now() - started })
        return after.allowed ? out : refusalText(after)
      },
    }
  }

  wrapModel(model, name, provider) {
    const gov = this
    let inner = typeof model === 'object' && model !== null ? model : null
    const resolve = async () => {
      if (inner === null) {
        const p = provider ?? defaultProvider()
        inner = await p.getModel(typeof model === 'string' ? model : undefined)
      }
      return inner
    }
    const modelId = typeof model === 'string' ? model : llm.modelName(model, model == null ? 'default' : 'unknown')
    const prepare = async (request) => {
      const e = gov.entryOfModelCall()
      if (e === null) return null
      await gov.settle(e)
      const d = await llm.gate(e.run, modelId, requestMessages(request))
      return { e, callId: d.callId }
    }
    const record = (g, usage, started) => {
      if (g === null) return
      const { e, callId } = g
      llm.recordUsage(e.run, {
        model: modelId,
        tokensIn: usage?.inputTokens,
        tokensOut: usage?.outputTokens,
        durationMs: performance.now() - started,
        prices: gov.prices,
        callId,
      })
    }
    // A plain object (not a prototype-linked one: the SDK's models keep private fields).
    return {
      model: modelId,
      getRetryAdvice(args) {
        return inner !== null && typeof inner.getRetryAdvice === 'function' ? inner.getRetryAdvice(args) : undefined
      },
      async getResponse(request) {
        const g = await prepare(request)
        const m = await resolve()
        const started = performance.now()
        const r = await m.getResponse(request)
        record(g, r?.usage, started)
        return r
      },
      async *getStreamedResponse(request) {
        const g = await prepare(request)
        const m = await resolve()
        const started = performance.now()
        // The usage of `response_done`; a repeated one (a hostile stream) adds only what it
        // reports beyond the most seen; a stream without one records the call with 0 tokens.
        let seenIn = 0
        let seenOut = 0
        let recorded = false
        try {
          for await (const event of m.getStreamedResponse(request)) {
            if (event?.type === 'response_done') {
              const tin = llm.tokens(event.response?.usage?.inputTokens)
              const tout = llm.tokens(event.response?.usage?.outputTokens)
              if (!recorded || tin > seenIn || tout > seenOut) {
                record(g, { inputTokens: Math.max(0, tin - seenIn), outputTokens: Math.max(0, tout - seenOut) }, started)
                seenIn = Math.max(seenIn, tin)
                seenOut = Math.max(seenOut, tout)
                recorded = true
              }
            }
            yield event
          }
        } finally {
          if (!recorded) record(g, undefined, started)
        }
      },
    }
  }

  onEnd(ctx, output, status = 'success') {
    const e = this.runs.get(ctx)
    if (e === undefined) return
    this.runs.delete(ctx)
    if (this.last === e) this.last = null
    const p = e.run.end(status, typeof output === 'string' ? output : undefined).catch(() => {})
    this.ending.add(p)
    p.finally(() => this.ending.delete(p))
  }
}

function defaultProvider() {
  const { OpenAIProvider } = require('@openai/agents')
  return new OpenAIProvider()
}

// An SDK input item as the gate's messages.
function itemEntries(item, out) {
  if (item == null || typeof item !== 'object') return
  const role = typeof item.role === 'string' ? item.role : item.type ?? 'unknown'
  if (typeof item.content === 'string') out.push({ role, kind: 'text', content: item.content })
  else if (Array.isArray(item.content)) {
    for (const c of item.content) {
      if (typeof c?.text === 'string') out.push({ role, kind: 'text', content: c.text })
      else if (typeof c?.refusal === 'string') out.push({ role, kind: 'refusal', content: c.refusal })
      else out.push({ role, kind: String(c?.type ?? 'unknown'), content: { type: c?.type } })
    }
  } else if (item.type === 'function_call') {
    out.push({ role: 'assistant', kind: 'tool_call', content: { toolName: item.name, input: item.arguments } })
  } else if (item.type === 'function_call_result') {
    out.push({ role: 'tool', kind: 'tool_result', content: { toolName: item.name, output: item.output } })
  } else {
    out.push({ role, kind: String(item.type ?? 'unknown'), content: item })
  }
}

/** A `ModelRequest`'s instructions and input as the gate's messages. */
function requestMessages(request) {
  const out = []
  if (typeof request?.systemInstructions === 'string' && request.systemInstructions !== '') {
    out.push({ role: 'system', kind: 'text', content: request.systemInstructions })
  }
  const input = request?.input
  if (typeof input === 'string') out.push({ role: 'user', kind: 'text', content: input })
  else if (Array.isArray(input)) for (const item of input) itemEntries(item, out)
  return out
}

/**
 * A governed copy of the OpenAI Agents JS `agent` (`agent.clone`): its function tools decided
 * by `engine` (block → refusal text for the model, hitl → an SDK approval interruption), its
 * model calls gated by the `llm.before` rules and their usage recorded. Options: `agentId`
 * (default: the agent's name), `enduser`, `agentTags`, `prices` (`{model: {in, out}}` USD per
 * million tokens; default: the engine's own), `approver(review, runContext)` (who may answer a
 * toolgate review through the SDK; default: whoever answers the interruption), `modelProvider`
 * (resolves a model given by name; default: the SDK's OpenAI provider).
 */
function govern(agent, engine, { agentId, enduser, agentTags, prices, approver, modelProvider } = {}) {
  if (agent == null || typeof agent.clone !== 'function') throw new TypeError('govern: expected an OpenAI Agents JS Agent')
  if (engine == null || typeof engine.startRun !== 'function') throw new TypeError('govern: expected a toolgate Engine')
  if (approver !== undefined && typeof approver !== 'function') throw new TypeError('govern: approver must be a function (review, runContext) => boolean')
  const gov = new Governor(engine, { agentId: agentId ?? agent.name ?? 'agent', enduser, agentTags, prices, approver })
  const tools = Array.isArray(agent.tools) ? agent.tools.map((t) => gov.wrapTool(t)) : agent.tools
  const model = gov.wrapModel(agent.model === '' ? undefined : agent.model, agent.name, modelProvider)
  const copy = agent.clone({ tools, model })
  Object.defineProperty(copy, kGovernor, { value: gov })
  // Listeners never throw into the SDK's emitter (a run that cannot start is found again, and
  // refused, at the first tool or model call).
  copy.on('agent_start', (ctx) => {
    try {
      gov.entry(ctx)
    } catch {}
  })
  copy.on('agent_end', (ctx, output) => {
    try {
      gov.onEnd(ctx, output)
    } catch {}
  })
  // Handed off, the agent's part of the SDK run is over (the SDK emits `agent_end` only for the
  // last agent): its toolgate run ends `handoff`; handed back, it starts a new one.
  copy.on('agent_handoff', (ctx) => {
    try {
      gov.onEnd(ctx, undefined, 'handoff')
    } catch {}
  })
  return copy
}

/**
 * Resolves once the runs `governed` (what `govern` returned) has ended are written: the SDK ends
 * a run in an event listener (`agent_end`), which cannot be awaited; await this before
 * `engine.shutdown()` so the last `run.ended` is not raced.
 */
async function settled(governed) {
  const gov = governed?.[kGovernor]
  if (gov === undefined) throw new TypeError('settled: expected an agent govern returned')
  await Promise.all([...gov.ending])
}

module.exports = { govern, settled, requestMessages, refusalText, LlmBlockedError: llm.LlmBlockedError }

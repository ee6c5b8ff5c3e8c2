'use strict'
// Mastra (`@mastra/core`): `govern(agent, engine, opts)` returns a governed copy of a Mastra
// `Agent` (a new `Agent` over the original's instructions, model, tools, memory, workflows,
// scorers, processors and default options; the original is left as it is).
//
//   const governed = govern(agent, engine, { agentId: 'support', enduser: { id: 'cust-1' } })
//   const result = await governed.generate('refund order 7')
//
// One toolgate run per Mastra run (`runId`: the one given in the options, else a fresh one;
// `resumeStream` / `approveToolCall` / `declineToolCall` with that `runId` continue it). A run
// ends when Mastra finishes it (`onFinish`) without a tool having suspended it.
// - Tools: each call is decided first. Block: the tool does not run and the model reads
//   `toolgate blocked this call: <reason> [<CODE>, rule <id>]` as its result. Hitl: the tool
//   suspends (Mastra's `suspend`: a `tool-call-suspended` chunk whose payload names the review,
//   the run suspended); resuming it (`resumeStream({approved: true|false}, {runId,
//   toolCallId})`, or `approveToolCall` / `declineToolCall` for tools Mastra itself asks about)
//   approves or denies the toolgate review, and an approved call runs.
// - Model: the agent's model (an AI SDK model, as Mastra takes) is wrapped like
//   `toolgateModelMiddleware`: the `llm.before` gate before each call (block: the model is not
//   called, the run ends `budget_exceeded`, `generate` rejects / the stream errors with an
//   `LlmBlockedError`; hitl: `ReviewRequiredError`), usage recorded after.

const { AsyncLocalStorage } = require('node:async_hooks')
const { randomUUID } = require('node:crypto')
const { refusalText, jsonable, ToolgateError } = require('./index.js')
const llm = require('./lib/llm.js')
const { errorText } = require('./lib/errors.js')
const { remember } = require('./lib/maps.js')
const { modelMiddleware, wrapModel } = require('./lib/ai-model.js')

/** Mastra runs tracked per governed agent (suspended ones wait here; the oldest forgotten first). */
const MAX_RUNS = 1024
const MAX_DECISIONS = 4096

class RunEntry {
  constructor(runId, run) {
    this.runId = runId
    this.run = run
    this.decisions = new Map() // `${callId}\0${args}` -> Decision
    this.held = new Map() // key -> reviewId
    this.suspended = false
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
    this.runs = new Map() // Mastra runId -> RunEntry
    this.als = new AsyncLocalStorage()
    this.middleware = modelMiddleware(() => this.als.getStore()?.run, this.prices)
  }

  entry(runId) {
    let e = this.runs.get(runId)
    if (e === undefined) {
      e = new RunEntry(runId, this.engine.startRun({ agentId: this.agentId, enduser: this.enduser, agentTags: this.agentTags }))
      remember(this.runs, runId, e, MAX_RUNS)
    }
    return e
  }

  // Ends the run of `e` unless it is suspended (waiting for an answer) or stopped by a review.
  finish(e, status, output) {
    if (e.suspended) return Promise.resolve()
    this.runs.delete(e.runId)
    return e.run.end(status, typeof output === 'string' ? output : undefined).catch(() => {})
  }

  async mayAnswer(reviewId, context) {
    if (this.approver === undefined) return true
    try {
      const review = (await this.engine.reviews.list()).find((r) => r.id === reviewId)
      if (review === undefined) return false
      return (await this.approver(review, context)) === true
    } catch {
      return false
    }
  }

  async decide(e, tool, args, callId) {
    const key = `${callId}\u0000${JSON.stringify(args)}`
    const known = e.decisions.get(key)
    if (known !== undefined) return { d: known, key, fresh: false }
    const d = await e.run.beforeTool({ name: tool, args, callId })
    remember(e.decisions, key, d, MAX_DECISIONS)
    if (d.effect === 'hitl' && d.reviewId !== null) remember(e.held, key, d.reviewId, MAX_DECISIONS)
    return { d, key, fresh: true }
  }

  // The answer in `resumeData` to the review held for `key`: applied (and the call decided
  // again) when the approver lets it.
  async answer(e, tool, args, callId, key, resumeData) {
    const reviewId = e.held.get(key)
    if (reviewId === undefined) return undefined
    const approved = resumeData?.approved === true
    if (!(await this.mayAnswer(reviewId, { runId: e.runId, toolCallId: callId, toolName: tool, args, approved, resumeData }))) {
      return undefined
    }
    e.held.delete(key)
    try {
      if (approved) await this.engine.reviews.approve(reviewId)
      else await this.engine.reviews.deny(reviewId)
    } catch (err) {
      if (!(err instanceof ToolgateError)) throw err // decided already: keep that
    }
    e.decisions.delete(key)
    await e.run.resume()
    return (await this.decide(e, tool, args, callId)).d
  }

  wrapTool(name, t) {
    if (t == null || typeof t.execute !== 'function') return t
    const gov = this
    const execute = t.execute
    // A Mastra `Tool` is called `execute({context: args, runId, …}, options)`; an AI SDK tool
    // `execute(args, options)` (what Mastra's isVercelTool tells apart: `parameters`).
    const vercel = !('id' in t && 'inputSchema' in t) && 'parameters' in t
    const governed = async function (first, options) {
      // A Mastra tool validates (and coerces) its input inside `execute` with its `inputSchema`:
      // the decision is made on what that validation gives, the arguments the tool will get.
      const raw = (vercel ? first : first?.context) ?? {}
      let input = raw
      if (!vercel && typeof t.inputSchema?.safeParse === 'function') {
        try {
          const r = t.inputSchema.safeParse(raw)
          if (r?.success) input = r.data
        } catch {
          // decided on the raw input; Mastra's own validation refuses what does not parse
        }
      }
      const args = jsonable(input)
      const runId = (vercel ? undefined : first?.runId) ?? gov.als.getStore()?.runId
      const e = runId === undefined ? gov.als.getStore() : gov.entry(runId)
      if (e == null) return execute.call(this, first, options) // not through the governed agent
      const callId = options?.toolCallId ?? 'call'
      let { d, key, fresh } = await gov.decide(e, name, args, callId)
      // An answer decides a review only when the call was suspended for it: `resumeData` that
      // came with a call decided just now answers something else (Mastra's own approval of a
      // `requireApproval` tool, given before this review existed).
      if (d.effect === 'hitl' && !fresh && options?.resumeData != null) {
        d = (await gov.answer(e, name, args, callId, key, options.resumeData)) ?? d
      }
      if (d.effect === 'hitl' && !d.allowed && typeof options?.suspend === 'function' && e.held.has(key)) {
        e.suspended = true
        await options.suspend({ toolgate: { reviewId: d.reviewId, code: d.code, reason: d.reason, ruleId: d.ruleId, text: refusalText(d) } })
        return undefined
      }
      e.decisions.delete(key)
      if (!d.allowed) return refusalText(d)
      const started = performance.now()
      let out
      try {
        out = await execute.call(this, first, options)
      } catch (err) {
        await e.run.afterTool(d.callId, { durationMs: performance.now() - started, error: errorText(err) })
        throw err
      }
      const after = await e.run.afterTool(d.callId, { output: jsonable(out), durationMs: performance.now() - started })
      return after.allowed ? out : refusalText(after)
    }
    const copy = Object.assign(Object.create(Object.getPrototypeOf(t)), t)
    copy.execute = governed
    return copy
  }

  wrapTools(tools) {
    if (tools == null || typeof tools !== 'object') return tools
    const out = {}
    for (const [name, t] of Object.entries(tools)) out[name] = this.wrapTool(t?.id ?? name, t)
    return out
  }

  // `method` of the original agent's class, run on `copy` inside the Mastra run's toolgate run.
  // The run ends at Mastra's `onFinish` (the app's own is called first) unless a tool suspended
  // it; a call that throws ends it `error`. The output itself is not touched: its promises
  // (`text`, `finishReason`) are Mastra's, and reading them would consume the stream.
  call(copy, method, runId, args, at) {
    const e = this.entry(runId)
    e.suspended = false
    const options = args[at]
    const own = options.onFinish
    args[at] = {
      ...options,
      onFinish: async (result) => {
        try {
          if (typeof own === 'function') await own(result)
        } finally {
          await this.finish(e, 'success', result?.text)
        }
      },
    }
    return this.als.run(e, async () => {
      try {
        return await method.apply(copy, args)
      } catch (err) {
        await this.finish(e, 'error')
        throw err
      }
    })
  }
}

/**
 * A governed copy of the Mastra `agent`: its tools decided by `engine` (block → refusal text for
 * the model, hitl → the tool suspends; resuming with `{approved}` decides the review), its model
 * calls gated by the `llm.before` rules and their usage recorded. Options: `agentId` (default:
 * the agent's id), `enduser`, `agentTags`, `prices` (`{model: {in, out}}` USD per million tokens;
 * default: the engine's own), `approver(review, context)` (who may answer a review through
 * Mastra; default: whoever resumes the run).
 */
function govern(agent, engine, { agentId, enduser, agentTags, prices, approver } = {}) {
  if (agent == null || typeof agent.getModel !== 'function' || typeof agent.generate !== 'function') {
    throw new TypeError('govern: expected a Mastra Agent')
  }
  if (engine == null || typeof engine.startRun !== 'function') throw new TypeError('govern: expected a toolgate Engine')
  if (approver !== undefined && typeof approver !== 'function') throw new TypeError('govern: approver must be a function (review, context) => boolean')
  const gov = new Governor(engine, { agentId: agentId ?? agent.id ?? agent.name ?? 'agent', enduser, agentTags, prices, approver })
  // The original's own class (its module instance: Mastra tells its model wrappers apart with
  // `instanceof`, and an app may load @mastra/core as ESM while this file would load the CJS).
  const Agent = agent.constructor
  const rc = (o) => ({ runtimeContext: o?.runtimeContext })
  const config = {
    id: agent.id,
    name: agent.name,
    description: typeof agent.getDescription === 'function' ? agent.getDescription() : undefined,
    instructions: (o) => agent.getInstructions(rc(o)),
    model: async (o) => wrapModel(await agent.getModel(rc(o)), gov.middleware),
    maxRetries: agent.maxRetries,
    tools: async (o) => gov.wrapTools(await agent.getTools(rc(o))),
    workflows: (o) => agent.getWorkflows(rc(o)),
    scorers: (o) => agent.getScorers(rc(o)),
    defaultGenerateOptions: (o) => agent.getDefaultGenerateOptions(rc(o)),
    defaultStreamOptions: (o) => agent.getDefaultStreamOptions(rc(o)),
    defaultVNextStreamOptions: (o) => agent.getDefaultVNextStreamOptions(rc(o)),
    inputProcessors: (o) => agent.getInputProcessors(o?.runtimeContext),
    outputProcessors: (o) => agent.getOutputProcessors(o?.runtimeContext),
  }
  if (typeof agent.hasOwnMemory === 'function' && agent.hasOwnMemory()) config.memory = (o) => agent.getMemory(rc(o))
  const copy = new Agent(config)
  const mastra = typeof agent.getMastraInstance === 'function' ? agent.getMastraInstance() : undefined
  if (mastra != null) copy.__registerMastra(mastra)
  const proto = Object.getPrototypeOf(copy)
  const withRunId = (options) => ({ ...(options ?? {}), runId: options?.runId ?? randomUUID() })
  for (const m of ['generate', 'stream', 'generateVNext', 'streamVNext']) {
    if (typeof proto[m] !== 'function') continue
    copy[m] = function (messages, options) {
      const o = withRunId(options)
      return gov.call(copy, proto[m], o.runId, [messages, o], 1)
    }
  }
  if (typeof proto.resumeStream === 'function') {
    copy.resumeStream = function (resumeData, options) {
      const o = withRunId(options)
      return gov.call(copy, proto.resumeStream, o.runId, [resumeData, o], 1)
    }
  }
  for (const m of ['approveToolCall', 'declineToolCall']) {
    if (typeof proto[m] !== 'function') continue
    copy[m] = function (options) {
      const o = withRunId(options)
      return gov.call(copy, proto[m], o.runId, [o], 0)
    }
  }
  return copy
}

module.exports = { govern, refusalText, LlmBlockedError: llm.LlmBlockedError }

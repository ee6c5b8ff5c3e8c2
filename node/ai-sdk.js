'use strict'
// Vercel AI SDK (v5 and v6): `governTools(tools, run)` returns the tools with every call decided
// by toolgate first.
//
//   const result = await generateText({ model, tools: governTools({ refund }, run), prompt })
//
// Structural: it wraps the `tool()` objects' `execute` (and sets `needsApproval`) without
// importing `ai`, so one adapter serves both major versions.
// - block: the tool never runs; the model reads the tool error
//   `toolgate blocked this call: <reason> [<CODE>, rule <id>]` (a `BlockedError` thrown from
//   `execute`, which the SDK turns into a tool-error result for the model).
// - hitl, AI SDK v6 (`needsApproval`): the call becomes a tool approval request
//   (`tool-approval-request` in the result's content). Answering it in the app (a
//   `tool-approval-response` in the next call's messages) approves — or denies — the toolgate
//   review, and on approval the call runs (decided again: ALLOWED_HITL_APPROVED).
// - hitl, AI SDK v5 (no tool approval): like a block, with the text naming the review; the run
//   is stopped (`run.aborted`) until a human approves it (`engine.reviews.approve`).
//
// The model side: `toolgateModelMiddleware(run)` for `wrapLanguageModel` gates each model call
// with the run's `llm.before` rules and records its usage (lib/ai-model.js, lib/llm.js).

const { refusalText, jsonable, ToolgateError, BlockedError, ReviewRequiredError } = require('./index.js')
const llm = require('./lib/llm.js')
const { errorText } = require('./lib/errors.js')
const { remember } = require('./lib/maps.js')
const { modelMiddleware, promptMessages } = require('./lib/ai-model.js')

const kGovernor = Symbol('toolgate.governor')

/** The governors (`governTools` results) of each run, for the model middleware (at most 64 per run). */
const governorsOf = new WeakMap()
const GOVERNORS_KEPT = 64

/** Entries each of a Governor's maps keeps (the oldest go first): calls, reviews, answers. */
const KEPT = 4096

/**
 * The calls' toolgate decisions and reviews, shared by the wrapped tools of one `governTools`
 * (one run). A decision belongs to its run, its call id and its exact arguments: the same
 * `toolCallId` sent again with other arguments (or for another tool) is decided afresh.
 */
class Governor {
  constructor(run, approver) {
    this.run = run
    this.approver = approver
    this.decisions = new Map() // toolCallId -> {key, d} (until execute uses it)
    this.reviews = new Map() // toolCallId -> {key, reviewId}, while its approval is asked in the app
    this.answered = new Map() // approval ids already settled -> true
    this.approved = new Map() // toolCallId -> key the app approved (it keeps "needing" approval)
    this.governed = new WeakSet() // the wrapped tools
    this.settling = Promise.resolve()
  }

  // Applies the app's answers to approval requests (in the SDK's messages) to the reviews, one
  // settle at a time (concurrent tool calls each settle first).
  settle(messages) {
    if (!Array.isArray(messages) || this.reviews.size === 0) return this.settling
    const next = this.settling.then(() => this.#settle(messages))
    this.settling = next.catch(() => {})
    return next
  }

  async #settle(messages) {
    const requestOf = new Map() // approvalId -> tool-approval-request part
    const callOf = new Map() // toolCallId -> tool-call part
    const answers = []
    for (const m of messages) {
      if (!m || !Array.isArray(m.content)) continue
      for (const part of m.content) {
        if (part?.type === 'tool-approval-request') requestOf.set(part.approvalId, part)
        else if (part?.type === 'tool-call') callOf.set(part.toolCallId, part)
        else if (part?.type === 'tool-approval-response') answers.push(part)
      }
    }
    for (const a of answers) {
      if (this.answered.has(a.approvalId)) continue
      const callId = requestOf.get(a.approvalId)?.toolCallId
      const held = callId === undefined ? undefined : this.reviews.get(callId)
      if (held === undefined) continue
      remember(this.answered, a.approvalId, true, KEPT)
      if (this.approver !== undefined && !(await this.#mayDecide(held.reviewId, a, callId, callOf.get(callId), messages))) {
        continue // refused: the review stays pending, the run stopped
      }
      this.reviews.delete(callId)
      try {
        if (a.approved) {
          remember(this.approved, callId, held.key, KEPT)
          await this.run.engine.reviews.approve(held.reviewId)
        } else await this.run.engine.reviews.deny(held.reviewId)
      } catch (e) {
        if (!(e instanceof ToolgateError)) throw e // decided already (elsewhere): keep that
      }
      this.decisions.delete(callId) // answered: decide the call again
      await this.run.resume() // the run goes on (once none of its reviews is pending)
    }
  }

  // The app's denials as the model is about to read them: the SDK turns a denied approval into a
  // `tool-result` whose output is `execution-denied` (the approval answer itself never reaches
  // the model, nor the tool). Without an `approver` (any answer decides) such a result denies
  // the call's review, so the run is not left waiting for an answer already given. With one,
  // the answer is needed to judge: the app passes its messages to `settleApprovals`.
  async deniedInPrompt(prompt) {
    if (this.approver !== undefined || this.reviews.size === 0 || !Array.isArray(prompt)) return
    for (const m of prompt) {
      if (m?.role !== 'tool' || !Array.isArray(m.content)) continue
      for (const part of m.content) {
        if (part?.type !== 'tool-result' || part.output?.type !== 'execution-denied') continue
        const held = this.reviews.get(part.toolCallId)
        if (held === undefined) continue
        this.reviews.delete(part.toolCallId)
        try {
          await this.run.engine.reviews.deny(held.reviewId)
        } catch (e) {
          if (!(e instanceof ToolgateError)) throw e // decided already (elsewhere): keep that
        }
        this.decisions.delete(part.toolCallId)
        await this.run.resume()
      }
    }
  }

  // Whether the app's `approver` lets answer `a` decide review `reviewId`. Anything but
  // `true` — false, a throw, a rejection, a review no longer found — is a refusal.
  async #mayDecide(reviewId, a, callId, call, messages) {
    try {
      const review = (await this.run.engine.reviews.list()).find((r) => r.id === reviewId)
      if (review === undefined) return false
      const context = {
        approvalId: a.approvalId,
        approved: a.approved === true,
        reason: a.reason,
        toolCallId: callId,
        toolName: call?.toolName,
        input: call?.input,
        response: a,
        messages,
      }
      return (await this.approver(review, context)) === true
    } catch {
      return false
    }
  }

  async decide(name, tags, input, callId, messages) {
    await this.settle(messages)
    const args = jsonable(input ?? {})
    const key = `${name}\u0000${JSON.stringify(args)}`
    const known = callId === undefined ? undefined : this.decisions.get(callId)
    if (known !== undefined && known.key === key) return { d: known.d, key }
    const d = await this.run.beforeTool({ name, args, tags, callId })
    if (callId !== undefined) {
      remember(this.decisions, callId, { key, d }, KEPT)
      if (d.effect === 'hitl' && d.reviewId !== null) remember(this.reviews, callId, { key, reviewId: d.reviewId }, KEPT)
    }
    return { d, key }
  }

  wrap(name, t) {
    if (t == null || typeof t.execute !== 'function') return t // provider-executed or client-side tools
    if (this.governed.has(t)) return t
    const gov = this
    const tags = Array.isArray(t.toolgateTags) ? t.toolgateTags : undefined
    const execute = t.execute
    const ownApproval = t.needsApproval
    const wrapped = {
      ...t,
      async needsApproval(input, options) {
        const own =
          typeof ownApproval === 'function' ? await ownApproval.call(this, input, options) : ownApproval === true
        const callId = options?.toolCallId
        const { d, key } = await gov.decide(name, tags, input, callId, options?.messages)
        // An approved call still "needs" the approval it has: v6 checks again before running
        // it. Only for the arguments that were approved.
        return own || d.effect === 'hitl' || (callId !== undefined && gov.approved.get(callId) === key)
      },
      async execute(input, options) {
        const callId = options?.toolCallId
        const { d } = await gov.decide(name, tags, input, callId, options?.messages)
        if (callId !== undefined) {
          gov.decisions.delete(callId)
          gov.approved.delete(callId)
        }
        if (!d.allowed) {
          throw d.effect === 'hitl' || d.abortRun ? new ReviewRequiredError(d) : new BlockedError(d)
        }
        const started = performance.now()
        let out
        try {
          out = await execute.call(this, input, options)
        } catch (e) {
          await gov.run.afterTool(d.callId, { durationMs: performance.now() - started, error: errorText(e) })
          throw e
        }
        const after = await gov.run.afterTool(d.callId, { output: jsonable(out), durationMs: performance.now() - started })
        if (!after.allowed) throw new BlockedError(after)
        return out
      },
    }
    gov.governed.add(wrapped)
    return wrapped
  }
}

/**
 * The AI SDK tools `tools` (an object of `tool()`s, as `generateText({tools})` takes) with every
 * call decided by `run` first. Tools without `execute` are passed through. A tool's toolgate
 * tags can be given as `toolgateTags: [...]` on the tool object. A tool added to the returned
 * object later is governed as well.
 *
 * `options.approver(review, context)` (sync or async): whether an answer in the app's messages
 * may decide toolgate review `review`; `context` is `{approvalId, approved, reason, toolCallId,
 * toolName, input, response, messages}`. Anything but `true` is a refusal: the review stays
 * pending and the run stopped. Without it, every answer in the messages decides the review.
 */
function governTools(tools, run, { approver } = {}) {
  if (tools == null || typeof tools !== 'object') throw new TypeError('governTools: expected an object of AI SDK tools')
  if (run == null || typeof run.beforeTool !== 'function') throw new TypeError('governTools: expected a toolgate Run')
  if (approver !== undefined && typeof approver !== 'function') {
    throw new TypeError('governTools: approver must be a function (review, context) => boolean (or a promise of one)')
  }
  const gov = new Governor(run, approver)
  let govs = governorsOf.get(run)
  if (govs === undefined) governorsOf.set(run, (govs = new Set()))
  govs.add(gov)
  if (govs.size > GOVERNORS_KEPT) govs.delete(govs.values().next().value)
  const out = {}
  for (const [name, t] of Object.entries(tools)) out[name] = gov.wrap(name, t)
  Object.defineProperty(out, kGovernor, { value: gov })
  // Tools added later are governed too (set, Object.assign, defineProperty).
  return new Proxy(out, {
    set(target, prop, value) {
      return Reflect.set(target, prop, typeof prop === 'string' ? gov.wrap(prop, value) : value)
    },
    defineProperty(target, prop, desc) {
      if (typeof prop === 'string' && 'value' in desc) desc = { ...desc, value: gov.wrap(prop, desc.value) }
      return Reflect.defineProperty(target, prop, desc)
    },
  })
}

/**
 * Applies the app's answers to tool approval requests found in `messages` (the messages of the
 * next `generateText` / `streamText` call) to the toolgate reviews of `governedTools` (what
 * `governTools` returned): approved → the review is approved, denied → denied. An approval is
 * also applied on its own when the SDK runs the approved call; a denial reaches no tool, so
 * call this to deny the review at once (else it is applied at the next governed call).
 */
async function settleApprovals(governedTools, messages) {
  const gov = governedTools?.[kGovernor]
  if (gov === undefined) throw new TypeError('settleApprovals: expected the tools governTools returned')
  await gov.settle(messages)
}

/**
 * A language-model middleware (AI SDK v6 `LanguageModelV3Middleware`, also accepted by v5's
 * `wrapLanguageModel`) that decides every model call with `run`'s `llm.before` rules first and
 * records its usage after:
 *
 *   const model = wrapLanguageModel({ model: openai('gpt-4.1'), middleware: toolgateModelMiddleware(run) })
 *
 * Block: the model is not called, the run ends `budget_exceeded`, and `generateText` /
 * `streamText` reject with an `LlmBlockedError` (a `BlockedError`). Hitl: a
 * `ReviewRequiredError` (the run stopped until the review is approved and `run.resume()`).
 * Usage: an `llm.result` (tokens in and out, the model's id, duration, cost from `prices` or
 * the engine's own table) per call; a stream's at its `finish` part.
 */
function toolgateModelMiddleware(run, { prices } = {}) {
  if (run == null || typeof run.beforeTool !== 'function') throw new TypeError('toolgateModelMiddleware: expected a toolgate Run')
  const denials = async (r, params) => {
    const govs = governorsOf.get(r)
    if (govs !== undefined) for (const gov of [...govs]) await gov.deniedInPrompt(params?.prompt)
  }
  return modelMiddleware(() => run, llm.pricesOf(prices), denials)
}

module.exports = { governTools, settleApprovals, toolgateModelMiddleware, promptMessages, refusalText, LlmBlockedError: llm.LlmBlockedError }

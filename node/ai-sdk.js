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

const { refusalText, jsonable, ToolgateError, BlockedError, ReviewRequiredError } = require('./index.js')

const kGovernor = Symbol('toolgate.governor')

function errorText(e) {
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e)
}

/** The calls' toolgate decisions and reviews, shared by the wrapped tools of one `governTools`. */
class Governor {
  constructor(run) {
    this.run = run
    this.decisions = new Map() // toolCallId -> Decision (until execute uses it)
    this.reviews = new Map() // toolCallId -> review id, while its approval is asked in the app
    this.answered = new Set() // approval ids already applied
    this.approved = new Set() // toolCallIds the app approved (they keep "needing" approval)
  }

  // Applies the app's answers to approval requests (in the SDK's messages) to the reviews.
  async settle(messages) {
    if (!Array.isArray(messages) || this.reviews.size === 0) return
    const callOf = new Map() // approvalId -> toolCallId
    const answers = []
    for (const m of messages) {
      if (!m || !Array.isArray(m.content)) continue
      for (const part of m.content) {
        if (part?.type === 'tool-approval-request') callOf.set(part.approvalId, part.toolCallId)
        else if (part?.type === 'tool-approval-response') answers.push(part)
      }
    }
    for (const a of answers) {
      if (this.answered.has(a.approvalId)) continue
      const callId = callOf.get(a.approvalId)
      const reviewId = callId === undefined ? undefined : this.reviews.get(callId)
      if (reviewId === undefined) continue
      this.answered.add(a.approvalId)
      this.reviews.delete(callId)
      try {
        if (a.approved) {
          this.approved.add(callId)
          await this.run.engine.reviews.approve(reviewId)
        }
        else await this.run.engine.reviews.deny(reviewId)
      } catch (e) {
        if (!(e instanceof ToolgateError)) throw e // decided already (elsewhere): keep that
      }
      this.decisions.delete(callId) // approved: decide the call again
      this.run.resume() // the run goes on: the SDK continues its loop
    }
  }

  async decide(name, tags, input, callId, messages) {
    await this.settle(messages)
    const known = callId === undefined ? undefined : this.decisions.get(callId)
    if (known !== undefined) return known
    const d = await this.run.beforeTool({ name, args: jsonable(input ?? {}), tags, callId })
    if (callId !== undefined) this.decisions.set(callId, d)
    if (d.effect === 'hitl' && d.reviewId !== null && callId !== undefined) this.reviews.set(callId, d.reviewId)
    return d
  }

  wrap(name, t) {
    if (t == null || typeof t.execute !== 'function') return t // provider-executed or client-side tools
    const gov = this
    const tags = Array.isArray(t.toolgateTags) ? t.toolgateTags : undefined
    const execute = t.execute
    const ownApproval = t.needsApproval
    return {
      ...t,
      async needsApproval(input, options) {
        const own =
          typeof ownApproval === 'function' ? await ownApproval.call(this, input, options) : ownApproval === true
        const callId = options?.toolCallId
        const d = await gov.decide(name, tags, input, callId, options?.messages)
        // An approved call still "needs" the approval it has: v6 checks again before running it.
        return own || d.effect === 'hitl' || (callId !== undefined && gov.approved.has(callId))
      },
      async execute(input, options) {
        const callId = options?.toolCallId
        const d = await gov.decide(name, tags, input, callId, options?.messages)
        if (callId !== undefined) gov.decisions.delete(callId)
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
        if (after !== null && !after.allowed) throw new BlockedError(after)
        return out
      },
    }
  }
}

/**
 * The AI SDK tools `tools` (an object of `tool()`s, as `generateText({tools})` takes) with every
 * call decided by `run` first. Tools without `execute` are passed through. A tool's toolgate
 * tags can be given as `toolgateTags: [...]` on the tool object.
 */
function governTools(tools, run) {
  if (tools == null || typeof tools !== 'object') throw new TypeError('governTools: expected an object of AI SDK tools')
  if (run == null || typeof run.beforeTool !== 'function') throw new TypeError('governTools: expected a toolgate Run')
  const gov = new Governor(run)
  const out = {}
  for (const [name, t] of Object.entries(tools)) out[name] = gov.wrap(name, t)
  Object.defineProperty(out, kGovernor, { value: gov })
  return out
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

module.exports = { governTools, settleApprovals, refusalText }

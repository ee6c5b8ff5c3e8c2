'use strict'
// toolgate's error classes and the refusal text every adapter gives a model.

/** Base class of every error toolgate throws. */
class ToolgateError extends Error {
  constructor(message, options) {
    super(message, options)
    this.name = new.target.name
  }
}

/** A policy did not load. `path`: the JSON path of the (first) problem; `file`: its file. */
class PolicyError extends ToolgateError {
  constructor(message, { path = null, file = null } = {}) {
    super(message)
    this.path = path
    this.file = file
  }
}

/**
 * What an agent (or its model) reads when toolgate refuses a call:
 * `toolgate blocked this call: <reason> [<CODE>, rule <id>]`; for hitl the same, naming the
 * review a human must approve. The same text as the Python package's adapters.
 */
function refusalText(decision) {
  const reason = decision.reason ?? 'a policy rule'
  const where = decision.ruleId == null ? decision.code : `${decision.code}, rule ${decision.ruleId}`
  let text = `toolgate blocked this call: ${reason} [${where}]`
  if (decision.effect === 'hitl' && decision.reviewId != null) {
    text += `; it waits for human review ${decision.reviewId}: stop here until a human approves it`
  }
  return text
}

/** A guarded call was blocked. `decision` is the decision that blocked it. */
class BlockedError extends ToolgateError {
  constructor(decision) {
    super(refusalText(decision))
    this.decision = decision
  }
}

/** A guarded call needs a human's approval (effect hitl): the agent must stop its run. */
class ReviewRequiredError extends BlockedError {
  get reviewId() {
    return this.decision.reviewId
  }
}

/**
 * The `llm.before` gate refused a model call (block): the model was not called and the run
 * ended `budget_exceeded`. What the adapters throw where the framework's turn ends with an error.
 */
class LlmBlockedError extends BlockedError {}

const MARK = '\u0001toolgate:'

/** The native addon's error as the matching class (`PolicyError`, `ToolgateError`), or as it is. */
function translate(e) {
  const message = e && typeof e.message === 'string' ? e.message : null
  if (message === null || !message.startsWith(MARK)) {
    if (e && e.code === 'InvalidArg') {
      const t = new TypeError(message)
      return t
    }
    return e
  }
  let body
  try {
    body = JSON.parse(message.slice(MARK.length))
  } catch {
    return new ToolgateError(message.slice(MARK.length))
  }
  if (body.kind === 'PolicyError') return new PolicyError(body.message, { path: body.path, file: body.file })
  return new ToolgateError(body.message)
}

/** The text of a thrown value, for an audit `error` field: never throws itself. */
function errorText(e) {
  if (e instanceof Error) return `${e.name}: ${e.message}`
  try {
    return String(e)
  } catch {
    return 'an unprintable value was thrown'
  }
}

module.exports = { ToolgateError, PolicyError, BlockedError, ReviewRequiredError, LlmBlockedError, refusalText, translate, errorText }

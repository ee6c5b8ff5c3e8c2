'use strict'
// engine.reviews: the engine's human reviews.

const { translate } = require('./errors.js')
const { kNative } = require('./symbols.js')

/** The engine's human reviews (`engine.reviews`). */
class Reviews {
  constructor(n) {
    this[kNative] = n
  }
  /** Every review: `{id, status, ruleId, toolName, args, enduserId, runId, callId, …}`. */
  async list() {
    return JSON.parse(await this[kNative].reviewsList().catch((e) => Promise.reject(translate(e))))
  }
  /** Reviews waiting for a human. */
  async pending() {
    return (await this.list()).filter((r) => r.status === 'pending')
  }
  /** Approves a pending review: identical calls are allowed from now on. */
  approve(id) {
    return this.#decide('approve', id)
  }
  /** Denies a pending review: identical calls are blocked from now on. */
  deny(id) {
    return this.#decide('deny', id)
  }
  /** Expires a review: the next identical call asks again. */
  expire(id) {
    return this.#decide('expire', id)
  }
  async #decide(action, id) {
    if (typeof id !== 'string') throw new TypeError(`reviews.${action}: expected a review id (a string)`)
    return JSON.parse(await this[kNative].reviewsDecide(action, id).catch((e) => Promise.reject(translate(e))))
  }
}

module.exports = { Reviews }

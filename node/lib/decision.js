'use strict'
// Decision, and how one crosses from the addon: as JSON text, or through the engine's buffer
// (the fast crossing of a decision made at once).

const kRun = Symbol('toolgate.run')
const kSeq = Symbol('toolgate.seq')
const kFull = Symbol('toolgate.full')

/**
 * One decision of the engine. `toJSON()` is the whole Rust `Decision` (camelCase keys): always
 * for a decision that waited for a callback or Redis; for one made at once, while its run keeps
 * it (the run's last 256 decisions), else these fields.
 */
class Decision {
  constructor(callId, phase, effect, code, reason, ruleId, allowed, reviewId, abortRun, shadowEffect, error, latencyNs, run, seq, full) {
    this.callId = callId
    this.phase = phase
    this.effect = effect
    this.code = code
    this.reason = reason
    this.ruleId = ruleId
    this.allowed = allowed
    this.reviewId = reviewId
    this.abortRun = abortRun
    this.shadowEffect = shadowEffect
    this.error = error
    this.latencyNs = latencyNs
    this[kRun] = run
    this[kSeq] = seq
    this[kFull] = full
  }
  /** The decision as the Rust `Decision` serialises it: `evaluated`, `signals`, `hitl`, …. */
  toJSON() {
    if (this[kFull] !== undefined) return this[kFull]
    const text = this[kRun].decisionJson(this[kSeq])
    return text == null ? { ...this } : JSON.parse(text)
  }
}

/** A decision the addon sent as JSON text (`NativeDecision`). */
function decisionOf(text, run) {
  const n = JSON.parse(text)
  return new Decision(
    n.callId,
    n.phase,
    n.effect,
    n.code,
    n.reason ?? null,
    n.ruleId ?? null,
    n.allowed,
    n.reviewId ?? null,
    n.abortRun,
    n.shadowEffect ?? null,
    n.error ?? null,
    n.latencyNs,
    run,
    n.seq,
    n.full,
  )
}

// The fast crossing of a decision made at once (src/fast.rs): the addon writes its fields as
// numbers into one Float64Array per engine, its strings as numbers into the engine's list of
// strings, which the addon extends when it first uses a string. Slots, as in `fast::slot`:
const FORM = 0 // 1: the decision is in the buffer; 0: the return value is its JSON text
const SEQ = 1
const LATENCY = 2
const FLAGS = 3 // 1: allowed, 2: abortRun
const CALL_NO = 4 // N for `call-N` numbered by the addon, 0 when the caller gave the id
const PHASE = 5 // PHASE..SHADOW_EFFECT: string numbers, -1 for null
const EFFECT = 6
const CODE = 7
const REASON = 8
const RULE_ID = 9
const SHADOW_EFFECT = 10
const FIRST_NEW = 11 // the number of the first of the new strings returned
const OUT_LEN = 12

/** The engine's buffer and list of strings (shared by its runs; decisions are read at once). */
class Crossing {
  constructor() {
    this.out = new Float64Array(OUT_LEN)
    this.strings = []
  }
  /** The decision of call `callId` (undefined: numbered by the addon), from `r`, the addon's answer. */
  read(r, callId, run) {
    const out = this.out
    if (out[FORM] === 0) return decisionOf(r, run)
    const strings = this.strings
    if (r != null) {
      const added = JSON.parse(r)
      const first = out[FIRST_NEW]
      for (let i = 0; i < added.length; i++) strings[first + i] = added[i]
    }
    const flags = out[FLAGS]
    const reason = out[REASON]
    const ruleId = out[RULE_ID]
    const shadow = out[SHADOW_EFFECT]
    return new Decision(
      callId === undefined ? `call-${out[CALL_NO]}` : callId,
      strings[out[PHASE]],
      strings[out[EFFECT]],
      strings[out[CODE]],
      reason < 0 ? null : strings[reason],
      ruleId < 0 ? null : strings[ruleId],
      (flags & 1) === 1,
      null,
      (flags & 2) === 2,
      shadow < 0 ? null : strings[shadow],
      null,
      out[LATENCY],
      run,
      out[SEQ],
      undefined,
    )
  }
}

module.exports = { Decision, decisionOf, Crossing }

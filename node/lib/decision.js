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

// The fast crossing of a decision made at once (src/fast.rs, `unit`): the addon returns a
// short string of 16-bit code units — its flags, its strings as numbers into the engine's list
// of strings (which the addon extends when it first uses a string), its numbers in 48 bits
// (three units, low first). JSON text (an object, `{`) when a decision does not fit. Units:
const MARK = 0x100 // HEAD = MARK + flags (1: allowed, 2: abortRun)
const PHASE = 1 // PHASE..PHASE + 5: phase, effect, code, reason, rule id, shadow effect
const NONE = 0xffff // a null string
const SEQ = 7
const LATENCY = 10
const CALL_NO = 13
const LEN = 16 // with new strings: the number of the first, then their JSON array text

/** The 48-bit number at unit `i` of `r`. */
function n48(r, i) {
  return r.charCodeAt(i) + r.charCodeAt(i + 1) * 0x10000 + r.charCodeAt(i + 2) * 0x100000000
}

/** The engine's list of strings (shared by its runs). */
class Crossing {
  constructor() {
    this.strings = []
  }
  /** The decision of call `callId` (undefined: numbered by the addon), from `r`, the addon's answer. */
  read(r, callId, run) {
    const head = r.charCodeAt(0)
    if (head < MARK) return decisionOf(r, run)
    const strings = this.strings
    if (r.length > LEN) {
      const added = JSON.parse(r.slice(LEN + 1))
      const first = r.charCodeAt(LEN)
      for (let i = 0; i < added.length; i++) strings[first + i] = added[i]
    }
    const flags = head - MARK
    const id = callId === undefined ? `call-${n48(r, CALL_NO)}` : callId
    const phase = strings[r.charCodeAt(PHASE)]
    const effect = strings[r.charCodeAt(PHASE + 1)]
    const code = strings[r.charCodeAt(PHASE + 2)]
    const reason = r.charCodeAt(PHASE + 3)
    const ruleId = r.charCodeAt(PHASE + 4)
    const shadow = r.charCodeAt(PHASE + 5)
    const known = (n) => n === NONE || strings[n] !== undefined
    // A number this engine's list does not hold (an answer from another engine's run, read
    // through the addon directly): never a decision with missing fields; the run's own copy.
    if (phase === undefined || effect === undefined || code === undefined || !known(reason) || !known(ruleId) || !known(shadow)) {
      return whole(id, run, n48(r, SEQ))
    }
    return new Decision(
      id,
      phase,
      effect,
      code,
      reason === NONE ? null : strings[reason],
      ruleId === NONE ? null : strings[ruleId],
      (flags & 1) === 1,
      null,
      (flags & 2) === 2,
      shadow === NONE ? null : strings[shadow],
      null,
      n48(r, LATENCY),
      run,
      n48(r, SEQ),
      undefined,
    )
  }
}

/** Decision `seq` of `run` from the whole Rust decision the run keeps. */
function whole(callId, run, seq) {
  const text = run.decisionJson(seq)
  if (text == null) throw new Error(`toolgate: decision ${seq} of the run cannot be read back`)
  const full = JSON.parse(text)
  return new Decision(
    callId,
    full.phase,
    full.effect,
    full.code,
    full.reason ?? null,
    full.ruleId ?? null,
    full.effect === 'allow',
    full.hitl?.reviewId ?? null,
    full.abortRun,
    full.shadowEffect ?? null,
    full.error ?? null,
    full.latencyNs,
    run,
    seq,
    full,
  )
}

module.exports = { Decision, decisionOf, Crossing }

'use strict'
// toolgate: allow / block / hitl decisions for an AI agent's tool calls, from JSON policies,
// with a hash-chained audit trail. The engine is toolgate's Rust crate (the native addon built
// from ./src); this file is its JavaScript face (see README.md). Values cross into the addon
// as JSON text; every rule is decided in Rust.

const fs = require('node:fs')
const path = require('node:path')
const { randomUUID } = require('node:crypto')
const { fileURLToPath } = require('node:url')
const {
  ToolgateError,
  PolicyError,
  BlockedError,
  ReviewRequiredError,
  LlmBlockedError,
  refusalText,
  translate,
  errorText,
} = require('./lib/errors.js')

function loadNative() {
  // scripts/build.js (the `install` script) builds it.
  const file = path.join(__dirname, 'toolgate.node')
  if (!fs.existsSync(file)) {
    throw new Error('toolgate: the native addon is not built; run `npm run build` in the package folder (needs cargo)')
  }
  // The addon's allocator (mimalloc, src/lib.rs) reads its options from the environment when
  // the addon is loaded. Its default purge delay (1 s, and a purge only when the allocator is
  // busy again) kept the memory of freed runs mapped for good: 200k runs dropped in a loop
  // left ~250 MB resident after GC. 10 ms returns it once Node has run their finalizers
  // (docs/design-decisions.md, "h33n"). A value the app set is kept; ours is not left in the
  // environment for child processes.
  const ours = process.env.MIMALLOC_PURGE_DELAY === undefined
  if (ours) process.env.MIMALLOC_PURGE_DELAY = '10'
  try {
    return require(file)
  } finally {
    if (ours) delete process.env.MIMALLOC_PURGE_DELAY
  }
}

const native = loadNative()

const kNative = Symbol('toolgate.native')
const kRun = Symbol('toolgate.run')
const kSeq = Symbol('toolgate.seq')
const kFull = Symbol('toolgate.full')
const kCrossing = Symbol('toolgate.crossing')
const kNo = Symbol('toolgate.no')
const kTimeout = Symbol('toolgate.timeout')
const kReviewIds = Symbol('toolgate.reviewIds')
const kHeld = Symbol('toolgate.held')

function guarded(f) {
  try {
    return f()
  } catch (e) {
    throw translate(e)
  }
}

// ---------------------------------------------------------------------------------------------
// Values

function epochMs(date, what) {
  const ms =
    date instanceof Date ? date.getTime() : typeof date === 'string' ? Date.parse(date) : date
  if (typeof ms !== 'number' || !Number.isFinite(ms)) {
    throw new TypeError(`${what}: expected a Date, an ISO 8601 string or milliseconds since the epoch`)
  }
  return ms
}

function tagsOf(tags, what) {
  if (tags == null) return undefined
  if (typeof tags === 'string') return [tags]
  if (Array.isArray(tags)) {
    // Passed as is (the addon copies it): no array to allocate per call.
    for (let i = 0; i < tags.length; i++) {
      if (typeof tags[i] !== 'string') throw new TypeError(`${what}: expected an array of strings`)
    }
    return tags
  }
  if (typeof tags[Symbol.iterator] !== 'function') {
    throw new TypeError(`${what}: expected an array of strings`)
  }
  const out = Array.from(tags)
  for (const t of out) {
    if (typeof t !== 'string') throw new TypeError(`${what}: expected an array of strings`)
  }
  return out
}

function pathOf(p, what) {
  if (p == null) return undefined
  if (typeof p === 'string') return p
  if (p instanceof URL) return fileURLToPath(p)
  throw new TypeError(`${what}: expected a path (string or file: URL)`)
}

// Numbers JSON cannot hold are decided as the numbers they are, as near as JSON says it: a
// BigInt (an integer beyond 2^53, e.g. from a schema that keeps a model's digits) as its
// double, as the engine reads every number; a BigInt past 2^1024 and ±Infinity (JSON would
// write null: missing data, which a rule's onMissing may let through while the tool gets the
// huge number) as the largest finite number of its sign. NaN stays null.
function numbers(key, v) {
  if (typeof v === 'bigint') v = Number(v)
  else if (typeof v !== 'number') return v
  if (v === Infinity) return Number.MAX_VALUE
  if (v === -Infinity) return -Number.MAX_VALUE
  return v
}

// JSON.stringify, again with `numbers` when that meets a BigInt or wrote a null (perhaps an
// Infinity): the common case pays one scan of the text for it.
function stringify(value) {
  let text
  try {
    text = JSON.stringify(value)
  } catch (e) {
    if (!(e instanceof TypeError) || !/BigInt/i.test(e.message)) throw e
    return JSON.stringify(value, numbers)
  }
  return text !== undefined && text.includes('null') ? JSON.stringify(value, numbers) : text
}

function json(value, what) {
  if (value === undefined) return undefined
  let text
  try {
    text = stringify(value)
  } catch (e) {
    throw new TypeError(`${what}: not JSON data (${e.message})`)
  }
  if (text === undefined) throw new TypeError(`${what}: a ${typeof value} is not JSON data`)
  return text
}

/**
 * `value` as JSON data: a BigInt is its number (±Infinity and BigInts past 2^1024 the largest
 * finite number of their sign); what JSON cannot hold otherwise (a cycle, a function) becomes
 * its string.
 */
function jsonable(value) {
  if (value === undefined) return null
  if (typeof value === 'bigint' || typeof value === 'number') return numbers('', value)
  try {
    const text = stringify(value)
    return text === undefined ? String(value) : JSON.parse(text)
  } catch {
    return String(value)
  }
}

function policyInputs(policies, what = 'policies') {
  if (policies == null) throw new TypeError(`${what}: give at least one policy`)
  const list = Array.isArray(policies) ? policies : [policies]
  return list.map((p, i) => {
    if (typeof p === 'string' || p instanceof URL) return { path: pathOf(p) }
    // A policy document, or a bare array of rules (one document inside the list).
    if (p !== null && typeof p === 'object') return { json: json(p, `${what}[${i}]`) }
    throw new TypeError(`${what}[${i}]: expected a path or a policy document (an object)`)
  })
}

function auditInput(audit) {
  if (audit == null) return undefined
  if (typeof audit === 'string' || audit instanceof URL) return { dir: pathOf(audit, 'audit') }
  if (typeof audit !== 'object') throw new TypeError('audit: expected a folder path or {dir, collector, token, signingKey}')
  return {
    dir: pathOf(audit.dir, 'audit.dir'),
    collector: audit.collector ?? undefined,
    token: audit.token ?? undefined,
    signingKey: pathOf(audit.signingKey, 'audit.signingKey'),
  }
}

/** Calls of one callback left unanswered past the timeout, beyond which it is not called. */
const LATE_CAP = 256

// A user's callback (plain or async) as the addon calls it: `(argsJson) => Promise<answerJson>`,
// answering {"ok": value} or {"error": "Name: message"}. It never throws and its promise never
// rejects: a callback that throws, rejects or returns something that is not JSON is missing data
// for the engine, not an unhandled rejection.
//
// A call unanswered `timeoutMs` after it started is late: the engine no longer waits for it
// (missing data), but JavaScript cannot cancel it. While LATE_CAP calls of the callback are late
// it is not called at all (missing data at once, naming why), so a callback that hangs on every
// call does not pile up pending calls without end; it is called again as they answer.
function wrapCallback(fn, what, timeoutMs) {
  if (typeof fn !== 'function') throw new TypeError(`${what}: expected a function (plain or async)`)
  let late = 0
  const answer = async (argsJson) => {
    try {
      const value = await fn(...JSON.parse(argsJson))
      if (value === undefined) return '{}'
      return stringify({ ok: value })
    } catch (e) {
      try {
        return JSON.stringify({ error: errorText(e) })
      } catch {
        return '{"error":"the callback failed"}'
      }
    }
  }
  return (argsJson) => {
    if (late >= LATE_CAP) {
      return Promise.resolve(
        JSON.stringify({ error: `the callback was not called: ${late} of its calls are unanswered past the timeout (${timeoutMs} ms)` }),
      )
    }
    let isLate = false
    const timer = setTimeout(() => {
      isLate = true
      late++
    }, timeoutMs)
    timer.unref()
    return answer(argsJson).finally(() => {
      clearTimeout(timer)
      if (isLate) late--
    })
  }
}

// ---------------------------------------------------------------------------------------------
// Classes

/** A clock that moves only when told to (tests, replays). */
class ManualClock {
  /** @param {Date|string|number} date the start time */
  constructor(date) {
    this[kNative] = new native.NativeManualClock(epochMs(date, 'ManualClock'))
  }
  /** Sets the time. */
  set(date) {
    this[kNative].set(epochMs(date, 'ManualClock.set'))
  }
  /** Moves the time by `ms` milliseconds (negative: back). */
  advance(ms) {
    if (typeof ms !== 'number') throw new TypeError('ManualClock.advance: expected milliseconds (a number)')
    guarded(() => this[kNative].advance(ms))
  }
  /** The clock's time. */
  now() {
    return new Date(this[kNative].now())
  }
}

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

// guard(): the function that names a call's arguments (see Run.guard).
function namer(fn, tool, argNames, mapArgs) {
  if (argNames != null && mapArgs != null) throw new TypeError('guard: give argNames or mapArgs, not both')
  if (mapArgs != null) {
    if (typeof mapArgs !== 'function') throw new TypeError('guard: mapArgs must be a function (...args) => args object')
    return (a) => {
      const args = mapArgs(...a)
      if (args === null || typeof args !== 'object' || Array.isArray(args)) {
        throw new TypeError(`guard(${tool}): mapArgs must return the args as an object`)
      }
      return jsonable(args)
    }
  }
  if (argNames != null) {
    if (!Array.isArray(argNames) || argNames.some((k) => typeof k !== 'string') || new Set(argNames).size !== argNames.length) {
      throw new TypeError('guard: argNames must be an array of distinct strings')
    }
    const names = [...argNames]
    return (a) => {
      if (a.length > names.length && a.slice(names.length).some((v) => v !== undefined)) {
        throw new TypeError(`guard(${tool}): called with ${a.length} arguments, argNames names ${names.length}`)
      }
      const args = {}
      for (let i = 0; i < names.length; i++) if (a[i] !== undefined) args[names[i]] = a[i]
      return jsonable(args)
    }
  }
  if (fn.length > 1) {
    throw new TypeError(
      `guard(${tool}): the function takes ${fn.length} positional arguments; give argNames (their names) or mapArgs, so toolgate decides each of them`,
    )
  }
  return (a) => {
    if (a.length > 1 && a.slice(1).some((v) => v !== undefined)) {
      throw new TypeError(`guard(${tool}): called with ${a.length} arguments; give argNames or mapArgs to name them`)
    }
    const x = a[0]
    if (x == null) return {}
    if (typeof x !== 'object' || Array.isArray(x)) {
      throw new TypeError(`guard(${tool}): its argument is not an args object; give argNames or mapArgs to name it`)
    }
    return jsonable(x)
  }
}

function refuse(d) {
  if (d.allowed) return
  if (d.effect === 'hitl' || d.abortRun) throw new ReviewRequiredError(d)
  throw new BlockedError(d)
}

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

/** Review ids a run remembers (to know whether its stop may be lifted): its most recent ones. */
const REVIEW_IDS_KEPT = 1024

/** One agent run: `beforeTool` / `afterTool` / `end`, `guard`. */
class Run {
  constructor(n, engine) {
    this[kNative] = n
    this[kCrossing] = engine[kCrossing]
    this[kNo] = n.no
    this[kReviewIds] = null // the reviews its decisions named (a Set, made on the first)
    this[kHeld] = 0 // decisions that named a review (resume() re-checks when it changes)
    Object.defineProperty(this, 'engine', { value: engine, enumerable: false })
  }

  // Remembers the review decision `d` names: resume() does not lift the stop while it waits.
  #note(d) {
    if (d.reviewId === null) return d
    this[kHeld]++
    let ids = this[kReviewIds]
    if (ids === null) ids = this[kReviewIds] = new Set()
    ids.delete(d.reviewId)
    ids.add(d.reviewId)
    if (ids.size > REVIEW_IDS_KEPT) ids.delete(ids.values().next().value)
    return d
  }
  /** The run's id. */
  get runId() {
    return this[kNative].runId
  }
  /** The agent's id. */
  get agentId() {
    return this[kNative].agentId
  }
  /** Whether a hitl decision (or a failure) stopped the run. */
  get aborted() {
    return this[kNative].aborted
  }

  /**
   * Decides a tool call (phase `tool.before`). `callId` defaults to `call-1`, `call-2`, … in
   * the run. Resolves at once when no callback is in play; never blocks the event loop on one.
   */
  beforeTool(call, args) {
    const n = this[kNative]
    const crossing = this[kCrossing]
    let r
    let callId
    try {
      let name = call
      let a = args
      let tags
      if (typeof call !== 'string') {
        if (call == null || typeof call.name !== 'string') {
          throw new TypeError('beforeTool: expected {name: string, args?, tags?, callId?}')
        }
        name = call.name
        a = call.args
        tags = tagsOf(call.tags, 'tags')
        callId = call.callId == null ? undefined : String(call.callId)
      }
      r = native.runBeforeTool(this[kNo], name, json(a, 'args'), tags, callId, crossing.out)
    } catch (e) {
      return Promise.reject(translate(e))
    }
    // Not an async function: a decision made at once is one resolved promise, no more.
    if (r instanceof Promise) return r.then((d) => this.#note(decisionOf(d, n)))
    const d = crossing.read(r, callId, n)
    return Promise.resolve(d.reviewId === null ? d : this.#note(d))
  }

  /**
   * Records the outcome of an allowed call and decides the after-phase rules: the after-phase
   * `Decision`, always (`ALLOWED` when no after-phase rule is in play, and for a call id the
   * run has no allowed call for: its result is not recorded). `error`: a string or an Error
   * (the call failed).
   */
  async afterTool(callId, { output, durationMs, error } = {}) {
    if (callId == null) throw new TypeError('afterTool: expected the callId of the call')
    const r = guarded(() =>
      native.runAfterTool(
        this[kNo],
        String(callId),
        json(output, 'output'),
        durationMs == null ? undefined : durationMs,
        error == null ? undefined : typeof error === 'string' ? error : errorText(error),
      ),
    )
    const d = r instanceof Promise ? await r : r
    return this.#note(decisionOf(d, this[kNative]))
  }

  /** Ends the run (`run.ended`, with `status` and the final `output`) and flushes its events. */
  async end(status = 'success', output) {
    const text = output == null ? undefined : typeof output === 'string' ? output : json(output, 'output')
    await this[kNative].end(String(status), text)
  }

  /**
   * Decides a model call (phase `llm.before`) before it is made: `model` is the model's name,
   * `messages` what it will be sent (JSON data: usually `[{role, content}]`). Allowed: make the
   * call, then `recordLlm`. Blocked: do not call the model (end the turn; the run ends
   * `budget_exceeded`). Hitl: a review was raised and the run is stopped, as for a tool call.
   * `options.callId` defaults to `llm-1`, `llm-2`, … in the run.
   */
  beforeLlm(model, messages, options) {
    let r
    try {
      if (typeof model !== 'string') throw new TypeError('beforeLlm: expected the model name (a string)')
      const callId = options?.callId == null ? undefined : String(options.callId)
      const n = this[kNative]
      // Without llm.before rules (nor recorded messages) the messages are not serialised.
      const text = n.gatesLlm ? json(messages ?? undefined, 'messages') : undefined
      r = n.beforeLlm(model, text, callId)
    } catch (e) {
      return Promise.reject(translate(e))
    }
    if (r instanceof Promise) return r.then((d) => this.#note(decisionOf(d, this[kNative])))
    return Promise.resolve(this.#note(decisionOf(r, this[kNative])))
  }

  /**
   * Records a model call's usage: `{tokensIn, tokensOut, costUsd?, model?, durationMs?,
   * callId?}` (the `llm_tokens_in`, `llm_tokens_out`, `llm_cost_usd` metrics and an `llm.result`
   * event). Without `costUsd` the cost comes from the engine's `prices` for `model`. The older
   * positional form `recordLlm(tokensIn, tokensOut, costUsd)` still works.
   */
  recordLlm(usage, tokensOut, costUsd) {
    if (typeof usage === 'number') {
      guarded(() => this[kNative].recordLlm(usage, tokensOut, costUsd ?? undefined))
      return
    }
    if (usage == null || typeof usage !== 'object') {
      throw new TypeError('recordLlm: expected {tokensIn, tokensOut, costUsd?, model?, durationMs?, callId?}')
    }
    const { tokensIn, tokensOut: out, costUsd: cost, model, durationMs, callId } = usage
    const num = (v, what) => {
      if (typeof v !== 'number') throw new TypeError(`recordLlm: ${what} must be a number`)
      return v
    }
    guarded(() =>
      this[kNative].recordLlm(
        num(tokensIn, 'tokensIn'),
        num(out, 'tokensOut'),
        cost == null ? undefined : num(cost, 'costUsd'),
        model == null ? undefined : String(model),
        durationMs == null ? undefined : num(durationMs, 'durationMs'),
        callId == null ? undefined : String(callId),
      ),
    )
  }

  /**
   * Lifts the stop a hitl decision put on the run, once its reviews are decided: resolves
   * `true` when the run goes on, `false` (still stopped) while a review its decisions named,
   * or one it raised, is pending.
   */
  async resume() {
    const n = this[kNative]
    // A decision naming a review may land while the reviews are read: then read again.
    for (let i = 0; i < 3; i++) {
      const held = this[kHeld]
      const ids = this[kReviewIds]
      const runId = n.runId
      if (ids !== null || n.aborted) {
        const reviews = await this.engine.reviews.list()
        let waiting = false
        for (const r of reviews) {
          const ours = ids !== null && ids.has(r.id)
          if (r.status === 'pending' && (ours || r.runId === runId)) waiting = true
          else if (ours && r.status !== 'pending') ids.delete(r.id)
        }
        if (waiting) return false
      }
      if (this[kHeld] === held) {
        n.resume()
        return true
      }
    }
    return false
  }

  /** Records a custom metric. */
  recordMetric(key, value) {
    this[kNative].recordMetric(key, value)
  }

  /**
   * Wraps tool function `fn`: each call is decided first, runs only if allowed, and its
   * outcome is recorded. The wrapper is async; it throws `BlockedError` (block) or
   * `ReviewRequiredError` (hitl) when refused.
   *
   * The tool's args are what the call passes, named: `argNames` names the positional
   * arguments (`['orderId', 'amount']` → `{orderId, amount}`), or `mapArgs(...args)` returns the
   * args object. Without either, `fn` takes its args as one object (a function declaring two
   * or more parameters is refused: its arguments cannot be named), and a call passing anything
   * else (a second argument, a value that is not an object) throws a `TypeError` and does not
   * run: toolgate decides every argument the tool receives.
   */
  guard(fn, { name, tags, argNames, mapArgs } = {}) {
    if (typeof fn !== 'function') throw new TypeError('guard: expected a function')
    const tool = name ?? (fn.name || 'tool')
    const toolTags = tags == null ? undefined : [...tagsOf(tags, 'tags')] // a copy: fixed when wrapped
    const argsOf = namer(fn, tool, argNames, mapArgs)
    const run = this
    const wrapped = async function (...a) {
      const d = await run.beforeTool({ name: tool, args: argsOf(a), tags: toolTags })
      refuse(d)
      const started = performance.now()
      let out
      try {
        out = await fn.apply(this, a)
      } catch (e) {
        await run.afterTool(d.callId, { durationMs: performance.now() - started, error: errorText(e) })
        throw e
      }
      const after = await run.afterTool(d.callId, {
        output: jsonable(out),
        durationMs: performance.now() - started,
      })
      refuse(after)
      return out
    }
    Object.defineProperty(wrapped, 'name', { value: tool })
    return wrapped
  }
}

/**
 * The governance engine. One engine serves every concurrent run and call of the process.
 *
 * @param {object} options `{policies, audit, state, reviews, failureMode, orgTimezone,
 *   signalTimeoutMs, clock, prices, recordMessages}` (see index.d.ts)
 */
class Engine {
  constructor(options = {}) {
    // Shorthand: `new Engine(policies)` (a path, a policy document or a list of them).
    if (typeof options === 'string' || Array.isArray(options) || options instanceof URL || !('policies' in options)) {
      options = { policies: options }
    }
    const {
      policies,
      audit,
      state,
      reviews,
      failureMode = 'closed',
      orgTimezone,
      signalTimeoutMs = 100,
      clock,
      prices,
      recordMessages = false,
    } = options
    if (clock != null && !(clock instanceof ManualClock)) throw new TypeError('clock: expected a ManualClock')
    if (!Number.isInteger(signalTimeoutMs) || signalTimeoutMs < 1) {
      throw new TypeError('signalTimeoutMs must be an integer, at least 1')
    }
    this[kNative] = guarded(
      () =>
        new native.NativeEngine(
          {
            policies: policyInputs(policies),
            audit: auditInput(audit),
            state: state ?? undefined,
            reviews: pathOf(reviews, 'reviews'),
            failureMode,
            orgTimezone: orgTimezone ?? undefined,
            signalTimeoutMs,
            prices: prices == null ? undefined : json(prices, 'prices'),
            recordMessages: Boolean(recordMessages),
          },
          clock == null ? undefined : clock[kNative],
        ),
    )
    this[kCrossing] = new Crossing()
    this[kTimeout] = signalTimeoutMs
    /** The engine's human reviews. */
    this.reviews = new Reviews(this[kNative])
  }

  /** Registers (or replaces) the provider of signal `key`: `fn(args) => JSON value` (or a promise of one). */
  registerSignal(key, fn) {
    guarded(() => this[kNative].registerSignal(String(key), wrapCallback(fn, 'registerSignal', this[kTimeout])))
  }

  /** Registers a subject extractor for tools matching `glob`: `fn(toolName, args) => [{subjectType, id, idSystem?, role?}]`. */
  registerSubjects(glob, fn) {
    guarded(() => this[kNative].registerSubjects(String(glob), wrapCallback(fn, 'registerSubjects', this[kTimeout])))
  }

  /** Registers (or replaces) the `custom` condition `name`: `fn(args, call) => boolean` (or a promise of one). */
  registerCondition(name, fn) {
    guarded(() => this[kNative].registerCondition(String(name), wrapCallback(fn, 'registerCondition', this[kTimeout])))
  }

  /** Starts a run (emits `run.started`): `{agentId, runId?, enduser?: {id, tags?}, agentTags?}`. */
  startRun(options) {
    const o = typeof options === 'string' ? { agentId: options } : options ?? {}
    if (typeof o.agentId !== 'string') throw new TypeError('startRun: expected {agentId: string, runId?, enduser?, agentTags?}')
    const runId = o.runId == null ? randomUUID().replaceAll('-', '') : String(o.runId)
    const n = guarded(() =>
      this[kNative].startRun(o.agentId, runId, json(o.enduser ?? undefined, 'enduser'), tagsOf(o.agentTags, 'agentTags')),
    )
    return new Run(n, this)
  }

  /** Replaces the policies atomically (a policy that fails to load throws `PolicyError`, the old ones stay). */
  reload(policies) {
    guarded(() => this[kNative].reload(policyInputs(policies)))
  }

  /** Number of active rules. */
  get activeRules() {
    return this[kNative].activeRules
  }

  /** Flushes the audit trail (bounded by the flush timeout). */
  async flush() {
    await this[kNative].flush().catch((e) => Promise.reject(translate(e)))
  }

  /** Flushes the audit trail and shuts its sinks down. */
  async shutdown() {
    await this[kNative].shutdown().catch((e) => Promise.reject(translate(e)))
  }
}

module.exports = {
  Engine,
  Run,
  Decision,
  ManualClock,
  Reviews,
  ToolgateError,
  PolicyError,
  BlockedError,
  ReviewRequiredError,
  LlmBlockedError,
  refusalText,
  jsonable,
}
module.exports.version = native.version()

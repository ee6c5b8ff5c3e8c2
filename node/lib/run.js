'use strict'
// Run: one agent run (beforeTool / afterTool / end, the model's side, guard).

const { translate, errorText } = require('./errors.js')
const { native, guarded } = require('./addon.js')
const { kNative, kCrossing } = require('./symbols.js')
const { tagsOf, json, jsonable } = require('./values.js')
const { decisionOf } = require('./decision.js')
const { namer, refuse } = require('./guard.js')

const kNo = Symbol('toolgate.no')

// Decides a packed call: `(no, packed, callId?)` -> the decision in the fast form or as JSON
// text, or '' when it awaits something (then `native.runPending(no)` is its promise). A
// function the addon makes from a closure: cheaper to call than its `#[napi]` functions
// (src/run.rs, `before_tool_function`).
const runBeforeToolPacked = native.beforeToolFunction()
const kReviewIds = Symbol('toolgate.reviewIds')
const kHeld = Symbol('toolgate.held')

/** Review ids a run remembers (to know whether its stop may be lifted): its most recent ones. */
const REVIEW_IDS_KEPT = 1024

/** A number of tags as the one code unit that starts a packed call (the small ones made once). */
const COUNTS = Array.from({ length: 64 }, (_, i) => String.fromCharCode(i))

/**
 * A call's args (JSON text, or undefined), name and tags as one string for the addon,
 * `count name (NUL tag){count} NUL args` with `count` the number of tags as one code unit
 * (src/run.rs, `unpack`): Node-API converts one string instead of two and an array of
 * strings, and the addon scans only the name and the tags for their ends. JSON text never
 * holds a NUL; a name or a tag that does is not packed, nor are 55,296 tags or more
 * (undefined: the call goes through `runBeforeTool` as it is).
 */
function pack(text, name, tags) {
  if (typeof name !== 'string' || name.includes('\0')) return undefined
  const n = tags === undefined ? 0 : tags.length
  if (n >= 0xd800) return undefined // a count must not be a surrogate
  let s = (n < COUNTS.length ? COUNTS[n] : String.fromCharCode(n)) + name
  for (let i = 0; i < n; i++) {
    const t = tags[i]
    if (t.includes('\0')) return undefined
    s += '\0' + t
  }
  return text === undefined ? s + '\0' : s + '\0' + text
}

/**
 * `s` if it is well-formed Unicode: the addon reads text as UTF-8, where a lone surrogate
 * becomes U+FFFD, so two different ids (`'c\ud800'`, `'c\udc00'`) would name one call.
 */
function wellFormed(s, what) {
  if (!s.isWellFormed()) throw new TypeError(`${what}: not well-formed Unicode (a lone surrogate)`)
  return s
}

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
        callId = call.callId == null ? undefined : wellFormed(String(call.callId), 'callId')
      }
      const text = json(a, 'args')
      const packed = pack(text, name, tags)
      if (packed === undefined) {
        r = native.runBeforeTool(this[kNo], name, text, tags, callId)
      } else {
        r = callId === undefined ? runBeforeToolPacked(this[kNo], packed) : runBeforeToolPacked(this[kNo], packed, callId)
        if (r === '') r = native.runPending(this[kNo])
      }
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
   * run has no allowed call for: its result is not recorded; by the failure mode once the run
   * dropped calls past its bound of 10,000 waiting). `error`: a string or an Error
   * (the call failed).
   */
  async afterTool(callId, { output, durationMs, error } = {}) {
    if (callId == null) throw new TypeError('afterTool: expected the callId of the call')
    callId = wellFormed(String(callId), 'callId')
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
      const callId = options?.callId == null ? undefined : wellFormed(String(options.callId), 'callId')
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
        callId == null ? undefined : wellFormed(String(callId), 'callId'),
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

module.exports = { Run }

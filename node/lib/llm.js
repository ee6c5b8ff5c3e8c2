'use strict'
// The model side of every adapter (design §17): the `llm.before` gate before a model call and
// the usage after it. Each adapter converts its framework's messages and usage and calls these;
// the gate call (`run.beforeLlm`) and the usage record (`run.recordLlm`) are made here only.

const { LlmBlockedError, ReviewRequiredError, ToolgateError } = require('./errors.js')

/** The largest token count recorded: a model's count past it (or ±Infinity) is recorded as this. */
const MAX_TOKENS = Number.MAX_SAFE_INTEGER

/** Characters of one message's content handed to the gate (the engine truncates what it records). */
const CONTENT_CHARS = 1 << 20

/** Messages handed to the gate per model call (the most recent ones). */
const MESSAGES = 1024

/** Characters of a model's name kept (a name is configuration, not a message: longer is cut). */
const NAME_CHARS = 256

function nameOf(model) {
  if (typeof model !== 'string' || model === '') return 'unknown'
  return model.length > NAME_CHARS ? model.slice(0, NAME_CHARS) : model
}

/** At most this many models in a price table (as the engine's). */
const MAX_PRICES = 4096

function globRegExp(glob) {
  let re = '^'
  for (const ch of glob) re += ch === '*' ? '.*' : ch === '?' ? '.' : ch.replace(/[\\^$.|+()[\]{}]/g, '\\$&')
  return new RegExp(re + '$', 's')
}

/**
 * A price table `{model: {in, out}}` (USD per million tokens) checked once: a `TypeError` names
 * the first bad entry. A model's price is the entry named like it (case-insensitive), else the
 * longest entry whose name is a glob (`"gpt-4o*"`) matching it — as the engine's own table.
 * `undefined` stays `undefined` (the engine's own table, if any, applies).
 */
function pricesOf(prices, what = 'prices') {
  if (prices == null) return undefined
  if (typeof prices !== 'object' || Array.isArray(prices)) {
    throw new TypeError(`${what}: expected {"<model>": {in: usdPerMillionTokens, out: usdPerMillionTokens}}`)
  }
  const entries = Object.entries(prices)
  if (entries.length > MAX_PRICES) throw new TypeError(`${what}: at most ${MAX_PRICES} models`)
  const exact = new Map()
  const globs = []
  for (const [model, p] of entries) {
    const ok = (v) => typeof v === 'number' && Number.isFinite(v) && v >= 0
    if (p === null || typeof p !== 'object' || !ok(p.in) || !ok(p.out)) {
      throw new TypeError(`${what}["${model}"]: expected {in, out}, non-negative finite numbers (USD per million tokens)`)
    }
    const price = { in: p.in, out: p.out }
    if (/[*?]/.test(model)) globs.push({ length: model.length, re: globRegExp(model.toLowerCase()), price })
    else exact.set(model.toLowerCase(), price)
  }
  globs.sort((a, b) => b.length - a.length)
  return { exact, globs }
}

function priceOf(prices, model) {
  const name = model.toLowerCase()
  const p = prices.exact.get(name)
  if (p !== undefined) return p
  for (const g of prices.globs) if (g.re.test(name)) return g.price
  return undefined
}

/**
 * A token count as reported by a model (any value) as the count recorded: a non-negative
 * integer; missing, negative or not a number → 0; past 2^53 (or Infinity) → 2^53 − 1, so a
 * budget sees "very many", never a wrapped or negative number.
 */
function tokens(n) {
  if (typeof n === 'bigint') n = Number(n)
  if (typeof n === 'string' && n.trim() !== '') n = Number(n)
  if (typeof n !== 'number' || Number.isNaN(n) || n <= 0) return 0
  if (n >= MAX_TOKENS) return MAX_TOKENS
  return Math.floor(n)
}

/** The cost of a call from `prices` (a `pricesOf` table), or undefined (the model has no price). */
function costOf(prices, model, tokensIn, tokensOut) {
  if (prices === undefined || typeof model !== 'string') return undefined
  const p = priceOf(prices, model)
  if (p === undefined) return undefined
  const cost = (tokensIn * p.in + tokensOut * p.out) / 1e6
  return Number.isFinite(cost) ? cost : Number.MAX_VALUE
}

function text(v) {
  let s
  if (typeof v === 'string') s = v
  else {
    try {
      s = JSON.stringify(v) ?? String(v)
    } catch {
      s = String(v)
    }
  }
  return s.length > CONTENT_CHARS ? s.slice(0, CONTENT_CHARS) : s
}

/**
 * Messages in the gate's shape `[{role, kind, content}]` from whatever an adapter has (each
 * item `{role, kind?, content}`; content a string, or anything else as its JSON text). The most
 * recent `MESSAGES` are kept, each content cut at `CONTENT_CHARS` (the engine records at most
 * 16 KiB of each and scans what it is given).
 */
function normalize(messages) {
  if (!Array.isArray(messages)) return []
  const from = Math.max(0, messages.length - MESSAGES)
  const out = []
  for (let i = from; i < messages.length; i++) {
    const m = messages[i]
    if (m == null || typeof m !== 'object') continue
    out.push({
      role: typeof m.role === 'string' ? m.role : 'unknown',
      kind: typeof m.kind === 'string' ? m.kind : 'text',
      content: text(m.content ?? ''),
    })
  }
  return out
}

/**
 * The gate before one model call: the `llm.before` decision of `run` for model `model` and its
 * `messages` (already in the gate's shape or close to it: see `normalize`).
 */
function beforeModel(run, model, messages) {
  return run.beforeLlm(nameOf(model), normalize(messages))
}

// Runs whose model calls the gate blocked (and so ended): a framework retrying the call finds
// the same refusal, not "the run has ended".
const blocked = new WeakMap()

/**
 * Marks a gate refusal as an AI SDK `APICallError` that is not retryable (the AI SDK's own
 * duck-typing: its error markers and `isRetryable: false`). Frameworks built on the AI SDK retry a
 * failed model call unless it is one (Mastra retries anything else, with back-off): a refusal is
 * final, retrying it only delays the end of the turn.
 */
function final(err) {
  err[Symbol.for('vercel.ai.error')] = true
  err[Symbol.for('vercel.ai.error.AI_APICallError')] = true
  err.isRetryable = false
  return err
}

/**
 * Whether refusal `d` ends the run (`budget_exceeded`): a rule blocked the call, or a human
 * denied its review. Not when the call was refused because the run is stopped (a tool's review
 * pending: `BLOCKED_RUN_ABORTED`, which must not end a run that waits for a human) or an
 * internal failure decided (`BLOCKED_FAILURE`).
 */
function endsRun(d) {
  return !d.allowed && d.effect === 'block' && (d.code === 'BLOCKED_RULE' || d.code === 'BLOCKED_HITL_DENIED')
}

/**
 * What an adapter does with a refusal of the gate, the same everywhere: a rule's block → the run
 * ends `budget_exceeded` and an `LlmBlockedError` is thrown (the model is not called); hitl →
 * a `ReviewRequiredError` (the run stopped like a tool hitl; the app resumes it once a human
 * approved: `run.resume()`); a run already stopped (a review pending) or a failure → an
 * `LlmBlockedError`, the run left as it is. Returns when the decision allows the call.
 */
async function enforce(run, d) {
  if (d.allowed) return
  if (d.effect === 'hitl') throw final(new ReviewRequiredError(d))
  if (endsRun(d)) {
    blocked.set(run, d)
    await run.end('budget_exceeded').catch(() => {})
  }
  throw final(new LlmBlockedError(d))
}

/** `beforeModel` then `enforce`: resolves (to the decision) when the model may be called. */
async function gate(run, model, messages) {
  let d
  try {
    d = await beforeModel(run, model, messages)
  } catch (e) {
    const prior = blocked.get(run)
    if (prior !== undefined) throw final(new LlmBlockedError(prior))
    throw e
  }
  await enforce(run, d)
  return d
}

/**
 * Records one model call's usage on `run` (an `llm.result` event; the `llm_*` metrics). Never
 * throws (a hostile usage is recorded as `tokens` reads it; a run already ended records
 * nothing). `prices`: a `pricesOf` table of the adapter's own; without one (or for a model it
 * has no price for) the engine's own table decides the cost.
 */
function recordUsage(run, { model, tokensIn, tokensOut, durationMs, prices, callId } = {}) {
  const tin = tokens(tokensIn)
  const tout = tokens(tokensOut)
  const usage = { tokensIn: tin, tokensOut: tout }
  const name = nameOf(model)
  const cost = costOf(prices, name, tin, tout)
  if (cost !== undefined) usage.costUsd = cost
  usage.model = name
  if (typeof durationMs === 'number' && Number.isFinite(durationMs) && durationMs >= 0) usage.durationMs = durationMs
  if (typeof callId === 'string') usage.callId = callId
  try {
    run.recordLlm(usage)
  } catch (e) {
    if (!(e instanceof ToolgateError) && !(e instanceof TypeError)) throw e
  }
  return usage
}

/** The model's id in a framework's model object (`modelId`, `model`, `name`), else `fallback`. */
function modelName(m, fallback = 'unknown') {
  if (typeof m === 'string') return m
  if (m == null || typeof m !== 'object') return fallback
  for (const k of ['modelId', 'model', 'modelName', 'name']) {
    if (typeof m[k] === 'string' && m[k] !== '') return m[k]
  }
  return fallback
}

module.exports = {
  LlmBlockedError,
  pricesOf,
  tokens,
  costOf,
  normalize,
  beforeModel,
  enforce,
  endsRun,
  gate,
  recordUsage,
  modelName,
  MAX_TOKENS,
}

'use strict'
// Values handed to the addon: dates, tags, paths, JSON text (numbers JSON cannot hold made
// into the numbers they are, as near as JSON says it), policy and audit options.

const { fileURLToPath } = require('node:url')

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

module.exports = { epochMs, tagsOf, pathOf, stringify, json, jsonable, policyInputs, auditInput }

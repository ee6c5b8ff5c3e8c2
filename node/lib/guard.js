'use strict'
// Run.guard's helpers: naming a call's arguments, refusing a call that is not allowed.

const { BlockedError, ReviewRequiredError } = require('./errors.js')
const { jsonable } = require('./values.js')

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

module.exports = { namer, refuse }

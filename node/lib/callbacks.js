'use strict'
// A user's callback (signal provider, subject extractor, custom condition) as the addon calls it.

const { errorText } = require('./errors.js')
const { stringify } = require('./values.js')

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

module.exports = { wrapCallback }

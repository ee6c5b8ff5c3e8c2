'use strict'
// ManualClock: the engine's time, moved by hand.

const { native, guarded } = require('./addon.js')
const { kNative } = require('./symbols.js')
const { epochMs } = require('./values.js')

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

module.exports = { ManualClock }

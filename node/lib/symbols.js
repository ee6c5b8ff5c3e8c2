'use strict'
// Property keys the package's classes share (kept off their public, enumerable fields).

/** The addon's object behind a class of the package (clock, engine, run, reviews). */
const kNative = Symbol('toolgate.native')
/** The engine's fast crossing (`Crossing`), shared by its runs. */
const kCrossing = Symbol('toolgate.crossing')

module.exports = { kNative, kCrossing }

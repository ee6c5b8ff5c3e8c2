'use strict'
// toolgate: allow / block / hitl decisions for an AI agent's tool calls, from JSON policies,
// with a hash-chained audit trail. The engine is toolgate's Rust crate (the native addon built
// from ./src); this file is its JavaScript face (see README.md). Values cross into the addon
// as JSON text; every rule is decided in Rust.
//
// The package's parts live in lib/: the addon (addon.js), values handed to it (values.js),
// callbacks (callbacks.js), the clock (clock.js), decisions and their crossing (decision.js),
// runs (run.js, guard.js), reviews (reviews.js), the engine (engine.js) and the error classes
// (errors.js); this file is the package's face.

const {
  ToolgateError,
  PolicyError,
  BlockedError,
  ReviewRequiredError,
  LlmBlockedError,
  refusalText,
} = require('./lib/errors.js')
const { native } = require('./lib/addon.js')
const { jsonable } = require('./lib/values.js')
const { ManualClock } = require('./lib/clock.js')
const { Decision } = require('./lib/decision.js')
const { Reviews } = require('./lib/reviews.js')
const { Run } = require('./lib/run.js')
const { Engine } = require('./lib/engine.js')

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

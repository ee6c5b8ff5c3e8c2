'use strict'
// Engine: the governance engine (policies, callbacks, runs, reviews, the audit trail).

const { randomUUID } = require('node:crypto')
const { translate } = require('./errors.js')
const { native, guarded } = require('./addon.js')
const { kNative, kCrossing } = require('./symbols.js')
const { pathOf, tagsOf, json, policyInputs, auditInput } = require('./values.js')
const { wrapCallback } = require('./callbacks.js')
const { ManualClock } = require('./clock.js')
const { Crossing } = require('./decision.js')
const { Reviews } = require('./reviews.js')
const { Run } = require('./run.js')

const kTimeout = Symbol('toolgate.timeout')

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

module.exports = { Engine }

// Issue 33 point 10: an ended run, and every run of a shut-down engine, decides nothing more.
import { test } from 'node:test'
import assert from 'node:assert/strict'

import { Engine, ToolgateError } from 'toolgate'
import { GATE } from './helpers.mjs'

test('an ended run throws instead of deciding', async () => {
  const engine = new Engine({ policies: GATE })
  const run = engine.startRun('bot')
  const d = await run.beforeTool({ name: 'getUser', args: { id: 1 } })
  assert.equal(d.allowed, true)
  await run.end('success')
  await assert.rejects(async () => run.beforeTool({ name: 'getUser', args: { id: 2 } }), (e) => e instanceof ToolgateError && /run has ended/.test(e.message))
  await assert.rejects(async () => run.afterTool(d.callId, { output: 1 }), ToolgateError)
})

test('after shutdown no run decides and none starts', async () => {
  const engine = new Engine({ policies: GATE })
  const run = engine.startRun('bot')
  await engine.shutdown()
  await assert.rejects(async () => run.beforeTool({ name: 'getUser', args: {} }), (e) => e instanceof ToolgateError && /shut down/.test(e.message))
  assert.throws(() => engine.startRun('bot'), ToolgateError)
})

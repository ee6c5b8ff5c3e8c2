// state: 'redis://…': counters and reviews shared by engines (as by processes), on the real
// Redis ($TOOLGATE_TEST_REDIS_URL, else the local one); every id is unique, nothing is flushed.
// Decisions on Redis state wait for a round trip: they run off the event loop.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import path from 'node:path'

import { Engine } from 'toolgate'
import { GATE, maxCalls, tmp } from './helpers.mjs'

const url = process.env.TOOLGATE_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379/0'
const uid = () => `node-test-${randomUUID().slice(0, 12)}`

test('maxCalls per agent is shared by two engines', async () => {
  const id = uid()
  const a = new Engine({ policies: maxCalls(30, 'agent'), state: url })
  const b = new Engine({ policies: maxCalls(30, 'agent'), state: url })
  const runs = [a.startRun({ agentId: id, runId: `${id}-a` }), b.startRun({ agentId: id, runId: `${id}-b` })]
  const ds = await Promise.all(Array.from({ length: 80 }, (_, i) => runs[i % 2].beforeTool('search', { q: i })))
  assert.equal(ds.filter((d) => d.allowed).length, 30)
  assert.deepEqual(ds.filter((d) => d.code === 'BLOCKED_FAILURE'), [])
})

test('reviews live on Redis with state', async () => {
  const id = uid()
  const a = new Engine({ policies: GATE, state: url })
  const b = new Engine({ policies: GATE, state: url })
  const d = await a.startRun({ agentId: id, runId: `${id}-1` }).beforeTool('refund', { amount: 999, n: id })
  assert.equal(d.code, 'BLOCKED_HITL_REQUESTED')
  assert.ok((await b.reviews.list()).some((r) => r.id === d.reviewId))
  await b.reviews.approve(d.reviewId)
  const again = await a.startRun({ agentId: id, runId: `${id}-2` }).beforeTool('refund', { amount: 999, n: id })
  assert.equal(again.code, 'ALLOWED_HITL_APPROVED')
})

test('an unreachable Redis follows the failure mode', async () => {
  const dead = 'redis://127.0.0.1:1/0'
  const reviews = path.join(tmp(), 'r.json')
  const closed = new Engine({ policies: maxCalls(5), state: dead, reviews, failureMode: 'closed' })
  const d = await closed.startRun(uid()).beforeTool('search', {})
  assert.equal(d.code, 'BLOCKED_FAILURE')
  assert.ok(d.error)
  const open = new Engine({ policies: maxCalls(5), state: dead, reviews, failureMode: 'open' })
  assert.ok((await open.startRun(uid()).beforeTool('search', {})).allowed)
})

// Audit trails written from Node pass `toolgate verify`; reviews are shared with
// `toolgate review --store`.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readFileSync, readdirSync, writeFileSync } from 'node:fs'
import path from 'node:path'

import { Engine } from 'toolgate'
import { GATE, POLICIES, cli, tmp } from './helpers.mjs'

const trailFiles = (dir) => readdirSync(dir).filter((f) => f.endsWith('.jsonl')).map((f) => path.join(dir, f))
const events = (dir) => trailFiles(dir).flatMap((f) => readFileSync(f, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)))

test('an audit trail written from Node passes toolgate verify; an edit fails it', async () => {
  const audit = path.join(tmp(), 'audit')
  const engine = new Engine({ policies: path.join(POLICIES, 'customer-support.json'), audit })
  for (let i = 0; i < 3; i++) {
    const run = engine.startRun({ agentId: 'support-bot', runId: `r${i}`, enduser: { id: 'u1', tags: { tier: 'gold' } } })
    const d = await run.beforeTool({ name: 'kb_search', args: { query: 'returns' }, tags: ['kb', 'read'] })
    await run.afterTool(d.callId, { output: { hits: [1, 2] }, durationMs: 3 })
    await run.beforeTool({ name: 'issue_refund', args: { amount: 5000, orderId: 'A' }, tags: ['payments'] })
    await run.end('success', 'done')
  }
  await engine.shutdown()
  const kinds = events(audit).map((e) => e.kind)
  assert.equal(kinds.filter((k) => k === 'run.started').length, 3)
  assert.equal(kinds.filter((k) => k === 'run.ended').length, 3)
  assert.ok(kinds.includes('tool.decision'))
  const ok = cli(['verify', audit])
  assert.equal(ok.status, 0, ok.stdout + ok.stderr)
  const f = trailFiles(audit)[0]
  const lines = readFileSync(f, 'utf8').split('\n').filter(Boolean)
  const ev = JSON.parse(lines[1])
  ev.agentId = 'someone-else'
  lines[1] = JSON.stringify(ev)
  writeFileSync(f, lines.join('\n') + '\n')
  assert.notEqual(cli(['verify', audit]).status, 0)
})

test('a signed trail ({dir, signingKey}) verifies', async () => {
  const dir = tmp()
  const key = path.join(dir, 'key.pem')
  assert.equal(cli(['keygen', '--out', key]).status, 0)
  const trail = path.join(dir, 'trail')
  const engine = new Engine({ policies: GATE, audit: { dir: trail, signingKey: key } })
  const run = engine.startRun('bot')
  await run.beforeTool('deleteUser', { id: 1 })
  await run.end()
  await engine.shutdown()
  assert.ok(events(trail).some((e) => e.kind === 'run.ended' && e.signature))
  const r = cli(['verify', trail])
  assert.equal(r.status, 0, r.stdout + r.stderr)
})

test('reviews are shared with toolgate review --store', async () => {
  const store = path.join(tmp(), 'reviews.json')
  const engine = new Engine({ policies: GATE, reviews: store })
  const d = await engine.startRun('bot').beforeTool('refund', { amount: 500 })
  assert.equal(d.code, 'BLOCKED_HITL_REQUESTED')
  const listed = cli(['review', '--store', store, 'list', '--json'])
  assert.ok(listed.stdout.includes(d.reviewId), listed.stdout + listed.stderr)
  assert.equal(cli(['review', '--store', store, 'approve', d.reviewId]).status, 0)
  const again = await engine.startRun('bot').beforeTool('refund', { amount: 500 })
  assert.equal(again.code, 'ALLOWED_HITL_APPROVED')
  const d2 = await engine.startRun('bot').beforeTool('refund', { amount: 900 })
  await engine.reviews.deny(d2.reviewId)
  const all = JSON.parse(cli(['review', '--store', store, 'list', '--all', '--json']).stdout)
  const status = Object.fromEntries(all.map((r) => [r.id, r.status]))
  assert.equal(status[d.reviewId], 'approved')
  assert.equal(status[d2.reviewId], 'denied')
})

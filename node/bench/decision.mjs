// Decision overhead through Node on the support workload (not a test: prints numbers).
//
//   node bench/decision.mjs [path/to/support-workload.json] [--runs N]
//
// The same loop as python/benches/bench_decision.py (and benches/support in Rust): per run the
// next end user (cycling through the 4), then for each of the 20 calls `await beforeTool`, and
// `await afterTool` for the allowed ones; the engine's clock is fixed at the workload's time.
// For every `beforeTool` it records the wall time of the awaited Node call
// (process.hrtime.bigint around it, the timer's own cost measured and subtracted) and the
// engine's own `latencyNs` (the Rust call, measured inside it), and prints the medians, their
// difference (the overhead of going through Node; goal <= 5 us), and the machine's load (the
// numbers mean little on a busy machine: repeat, and compare builds run for run).
import { readFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

import { Engine, ManualClock } from 'toolgate'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')
const argv = process.argv.slice(2)
const runsAt = argv.indexOf('--runs')
const runs = runsAt >= 0 ? Number(argv[runsAt + 1]) : 5000
const file = argv.find((a, i) => !a.startsWith('--') && argv[i - 1] !== '--runs') ?? path.join(ROOT, 'benches', 'data', 'support-workload.json')

const w = JSON.parse(readFileSync(file, 'utf8'))
const rules = w.rules10.map(({ policyId, ...r }) => r)
const tags = Object.fromEntries(w.tools.map((t) => [t.name, t.categories]))
const calls = w.calls.map((c) => [c[0], c[1], tags[c[0]] ?? []])
const users = w.endusers.map((u) => ({ id: u.externalId, tags: u.metadata }))
const clock = new ManualClock(w.clock)
const engine = new Engine({ policies: { policy: { name: 'support' }, rules }, clock })

const ns = process.hrtime.bigint
const median = (xs) => {
  const s = Float64Array.from(xs).sort()
  return s[s.length >> 1]
}
const timerSamples = []
for (let i = 0; i < 100_000; i++) timerSamples.push(Number(-(ns() - ns())))
const timer = median(timerSamples)

const wall = []
const rust = []
const afterWall = []
const effects = {}
for (let i = 0; i < runs; i++) {
  const run = engine.startRun({ agentId: 'support-bot', runId: `bench-${i}`, enduser: users[i % users.length] })
  const measured = i >= runs / 10 // warm-up excluded
  for (const [name, args, t] of calls) {
    const t0 = ns()
    const d = await run.beforeTool({ name, args, tags: t })
    const t1 = ns()
    if (measured) {
      wall.push(Number(t1 - t0) - timer)
      rust.push(d.latencyNs)
    }
    effects[d.effect] = (effects[d.effect] ?? 0) + 1
    if (d.allowed) {
      const a0 = ns()
      await run.afterTool(d.callId, { output: { ok: true }, durationMs: 5 })
      const a1 = ns()
      if (measured) afterWall.push(Number(a1 - a0) - timer)
    }
  }
  await run.end()
}
const mw = median(wall)
const mr = median(rust)
const p90 = Float64Array.from(wall).sort()[Math.floor(wall.length * 0.9)]
const f = (x) => x.toFixed(0).padStart(8)
const load = os.loadavg().map((x) => x.toFixed(2)).join(', ')
console.log(`Node ${process.version}, ${os.cpus().length} CPUs, load average ${load} (at the end)`)
console.log(`support workload, 10 rules, ${wall.length} beforeTool decisions measured (${JSON.stringify(effects)})`)
console.log(`  timer cost subtracted:                 ${f(timer)} ns`)
console.log(`  median beforeTool through Node:        ${f(mw)} ns`)
console.log(`  median of the engine's own latencyNs:  ${f(mr)} ns  (the Rust call)`)
console.log(`  Node overhead (median difference):     ${f(mw - mr)} ns`)
console.log(`  p90 through Node:                      ${f(p90)} ns`)
console.log(`  median afterTool through Node:         ${f(median(afterWall))} ns`)

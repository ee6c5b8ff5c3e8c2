// Two builds of the package side by side in one process (not a test: prints numbers), for a
// before/after on a loaded machine: the support workload of bench/decision.mjs, its runs
// alternated between build A and build B (run 1 on A, run 2 on B, ...), so that both see the
// same load. Per side: median wall time of `await run.beforeTool`, median engine `latencyNs`,
// their difference (the crossing's overhead).
//
//   node bench/ab.mjs path/to/package-A path/to/package-B [--runs N] [--workload FILE]
//
// Two addons in one process need more static TLS than glibc keeps by default (each carries
// mimalloc's): run it with GLIBC_TUNABLES=glibc.rtld.optional_static_tls=65536, or the second
// addon fails to load ("cannot allocate memory in static TLS block").
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')
const argv = process.argv.slice(2)
const opt = (k, d) => (argv.includes(k) ? argv[argv.indexOf(k) + 1] : d)
const runs = Number(opt('--runs', 4000))
const file = opt('--workload', path.join(ROOT, 'benches', 'data', 'support-workload.json'))
const dirs = argv.filter((a, i) => !a.startsWith('--') && !argv[i - 1]?.startsWith('--')).slice(0, 2)
if (dirs.length !== 2) throw new Error('usage: node bench/ab.mjs PACKAGE_A PACKAGE_B [--runs N]')

const w = JSON.parse(readFileSync(file, 'utf8'))
const rules = w.rules10.map(({ policyId, ...r }) => r)
const tags = Object.fromEntries(w.tools.map((t) => [t.name, t.categories]))
const calls = w.calls.map((c) => [c[0], c[1], tags[c[0]] ?? []])
const users = w.endusers.map((u) => ({ id: u.externalId, tags: u.metadata }))

const sides = dirs.map((dir) => {
  const { Engine, ManualClock } = createRequire(path.resolve(dir, 'index.js'))(path.resolve(dir, 'index.js'))
  const engine = new Engine({ policies: { policy: { name: 'support' }, rules }, clock: new ManualClock(w.clock) })
  return { dir, engine, wall: [], rust: [] }
})
const ns = process.hrtime.bigint
const median = (xs) => Float64Array.from(xs).sort()[xs.length >> 1]
const timer = median(Array.from({ length: 100_000 }, () => Number(-(ns() - ns()))))

for (let i = 0; i < runs; i++) {
  const side = sides[i % 2]
  const run = side.engine.startRun({ agentId: 'support-bot', runId: `ab-${i}`, enduser: users[(i >> 1) % users.length] })
  const measured = i >= runs / 10
  for (const [name, args, t] of calls) {
    const t0 = ns()
    const d = await run.beforeTool({ name, args, tags: t })
    const t1 = ns()
    if (measured) {
      side.wall.push(Number(t1 - t0) - timer)
      side.rust.push(d.latencyNs)
    }
    if (d.allowed) await run.afterTool(d.callId, { output: { ok: true }, durationMs: 5 })
  }
  await run.end()
}
const load = os.loadavg().map((x) => x.toFixed(2)).join(', ')
console.log(`Node ${process.version}, load average ${load} (at the end), ${runs} runs alternated`)
for (const [k, s] of sides.entries()) {
  const mw = median(s.wall)
  const mr = median(s.rust)
  console.log(`${'AB'[k]} ${s.dir}: beforeTool ${mw.toFixed(0)} ns, engine ${mr.toFixed(0)} ns, overhead ${(mw - mr).toFixed(0)} ns`)
}

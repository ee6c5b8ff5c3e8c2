// The parts of a decision's crossing through Node, each timed per call (not a test: prints
// medians). On the support workload, per run of 20 calls, one of these modes at a time:
//   await      `await run.beforeTool(...)`, as an agent calls it
//   noawait    `run.beforeTool(...)` without awaiting its (resolved) promise
//   packed     the addon's packed-call function alone, on a call packed beforehand
//   version    an empty addon call (`native.version()`)
//   stringify  `JSON.stringify` of the call's args
//
//   node bench/parts.mjs [RUNS] [mode,mode,...]
//
// Under callgrind, `--toggle-collect='*env::trampoline*'` with the `packed` mode counts the
// instructions of the addon's callback per call (docs/performance.md, session 17).
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { Engine, ManualClock } from 'toolgate'
const require = createRequire(import.meta.url)
const { native } = require('../lib/addon.js')
const fastFn = native.beforeToolFunction()
const { kNative } = require('../lib/symbols.js')
const w = JSON.parse(readFileSync(new URL('../../benches/data/support-workload.json', import.meta.url), 'utf8'))
const rules = w.rules10.map(({ policyId, ...r }) => r)
const tags = Object.fromEntries(w.tools.map((t) => [t.name, t.categories]))
const calls = w.calls.map((c) => [c[0], c[1], tags[c[0]] ?? []])
const packed = calls.map(([name, args, t]) => String.fromCharCode(t.length) + name + t.map((x) => '\0' + x).join('') + '\0' + JSON.stringify(args))
const users = w.endusers.map((u) => ({ id: u.externalId, tags: u.metadata }))
const clock = new ManualClock(w.clock)
const engine = new Engine({ policies: { policy: { name: 'support' }, rules }, clock })
const ns = process.hrtime.bigint
const med = (xs) => Float64Array.from(xs).sort()[xs.length >> 1]
const R = Number(process.argv[2] ?? 3000)
const modes = (process.argv[3] ?? 'await,noawait,packed,version,stringify').split(',')
const res = Object.fromEntries(modes.map((m) => [m, []]))
const lat = []
for (let i = 0; i < R; i++) {
  for (const mode of modes) {
    const run = engine.startRun({ agentId: 'a', runId: `r-${i}-${mode}`, enduser: users[i % 4] })
    const no = run[kNative].no
    const xs = res[mode]
    for (let k = 0; k < calls.length; k++) {
      const [name, args, t] = calls[k]
      let t0, t1
      if (mode === 'await') { t0 = ns(); const d = await run.beforeTool({ name, args, tags: t }); t1 = ns(); if (i > R / 10) lat.push(d.latencyNs) }
      else if (mode === 'noawait') { t0 = ns(); run.beforeTool({ name, args, tags: t }); t1 = ns() }
      else if (mode === 'packed') { t0 = ns(); fastFn(no, packed[k]); t1 = ns() }
      else if (mode === 'version') { t0 = ns(); native.version(); t1 = ns() }
      else { t0 = ns(); JSON.stringify(args); t1 = ns() }
      if (i > R / 10) xs.push(Number(t1 - t0))
    }
    await run.end()
  }
}
for (const m of modes) console.log(m.padEnd(10), med(res[m]), 'ns')
if (lat.length) console.log('engine latencyNs', med(lat))

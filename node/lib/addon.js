'use strict'
// The native addon (toolgate.node, built from ../src by scripts/build.js), loaded once, and
// `guarded`: a call into it whose native errors come out as toolgate's error classes.

const fs = require('node:fs')
const path = require('node:path')
const { translate } = require('./errors.js')

function loadNative() {
  // scripts/build.js (the `install` script) builds it.
  const file = path.join(__dirname, '..', 'toolgate.node')
  if (!fs.existsSync(file)) {
    throw new Error('toolgate: the native addon is not built; run `npm run build` in the package folder (needs cargo)')
  }
  // The addon's allocator (mimalloc, src/lib.rs) reads its options from the environment when
  // the addon is loaded. Its default purge delay (1 s, and a purge only when the allocator is
  // busy again) kept the memory of freed runs mapped for good: 200k runs dropped in a loop
  // left ~250 MB resident after GC. 10 ms returns it once Node has run their finalizers
  // (docs/design-decisions.md, "h33n"). A value the app set is kept; ours is not left in the
  // environment for child processes.
  const ours = process.env.MIMALLOC_PURGE_DELAY === undefined
  if (ours) process.env.MIMALLOC_PURGE_DELAY = '10'
  try {
    return require(file)
  } finally {
    if (ours) delete process.env.MIMALLOC_PURGE_DELAY
  }
}

const native = loadNative()

/** Runs `f` (a call into the addon), turning a native error into toolgate's error classes. */
function guarded(f) {
  try {
    return f()
  } catch (e) {
    throw translate(e)
  }
}

module.exports = { native, guarded }

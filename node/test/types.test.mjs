// index.d.ts, ai-sdk.d.ts and langchain.d.ts type-check against their README usage (tsc, strict).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))

test('the typings compile (tsc --strict on test/types/usage.ts)', () => {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc')
  const r = spawnSync(process.execPath, [tsc, '-p', path.join(here, 'types')], { encoding: 'utf8' })
  assert.equal(r.status, 0, r.stdout + r.stderr)
})

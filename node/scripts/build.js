#!/usr/bin/env node
// Builds the native addon `toolgate.node` from this folder's Rust crate: run by `npm install`
// (the `install` script) and `npm run build`. Needs cargo (https://rustup.rs).
//
// It is what `napi build` does on Linux and macOS — `cargo build` of the cdylib (napi-build's
// build script sets the link arguments) and a copy of the library as a `.node` file — without
// `napi build`'s `--target <triple>`, which puts every artifact under target/<triple>/ and so
// shares nothing with a plain `cargo build` / `cargo test` of the repository (a second full
// build of every dependency). `npm run build:napi` runs `napi build --platform` (devDependency
// @napi-rs/cli) to regenerate native.d.ts, the addon's own type definitions.
//
// Environment: TOOLGATE_NODE_PROFILE=dev builds the debug profile (CI: it reuses what
// `cargo test` built); the default is release. CARGO_TARGET_DIR is honoured.
'use strict'

const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const here = path.resolve(__dirname, '..')
const profile = process.env.TOOLGATE_NODE_PROFILE || 'release'
const cargo = process.env.CARGO || 'cargo'

const r = spawnSync(cargo, ['build', '--lib', '--locked', '--profile', profile], { cwd: here, stdio: 'inherit' })
if (r.error) {
  console.error(`toolgate: could not run ${cargo}: ${r.error.message}`)
  if (r.error.code === 'ENOENT') console.error('toolgate: building the native addon needs cargo (https://rustup.rs)')
  process.exit(1)
}
if (r.status !== 0) process.exit(r.status ?? 1)

const target = process.env.CARGO_TARGET_DIR ? path.resolve(here, process.env.CARGO_TARGET_DIR) : path.join(here, 'target')
const dir = path.join(target, profile === 'dev' ? 'debug' : profile)
const lib = { linux: 'libtoolgate_node.so', darwin: 'libtoolgate_node.dylib', win32: 'toolgate_node.dll' }[process.platform]
if (!lib) {
  console.error(`toolgate: no build recipe for ${process.platform}`)
  process.exit(1)
}
// Copied to a new file then renamed over the old one: a process that has the old addon loaded
// keeps its mapping.
const out = path.join(here, 'toolgate.node')
fs.copyFileSync(path.join(dir, lib), out + '.tmp')
fs.renameSync(out + '.tmp', out)

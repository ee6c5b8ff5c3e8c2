#!/usr/bin/env node
// Builds the native addon (`toolgate.<platform>.node`, plus its loader `native.js` and types
// `native.d.ts`) from this folder's Rust crate: run by `npm install` (the `install` script)
// and `npm run build`. Needs cargo.
//
// With @napi-rs/cli installed (a devDependency: `npm install` in this folder, or
// `npm install ./node` from the repository's root) it runs `napi build --platform`; without it
// (a folder linked from outside the project, whose devDependencies npm does not install) it
// runs `cargo build` and copies the library, which is what `napi build` does on Linux and
// macOS, minus the generated files (the package ships its own loader fallback).
//
// Environment: TOOLGATE_NODE_PROFILE=dev builds the debug profile (CI: it reuses the debug
// dependencies `cargo test` built; users get release); CARGO_TARGET_DIR is honoured.
'use strict'

const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const here = path.resolve(__dirname, '..')
const profile = process.env.TOOLGATE_NODE_PROFILE || 'release'

function run(cmd, args) {
  const r = spawnSync(cmd, args, { cwd: here, stdio: 'inherit', shell: false })
  if (r.error) {
    console.error(`toolgate: could not run ${cmd}: ${r.error.message}`)
    if (r.error.code === 'ENOENT' && cmd === 'cargo') {
      console.error('toolgate: building the native addon needs cargo (https://rustup.rs)')
    }
    process.exit(1)
  }
  if (r.status !== 0) process.exit(r.status ?? 1)
}

function napiCli() {
  try {
    const pkg = require.resolve('@napi-rs/cli/package.json', { paths: [here] })
    const bin = require(pkg).bin
    const rel = typeof bin === 'string' ? bin : bin.napi
    return path.join(path.dirname(pkg), rel)
  } catch {
    return null
  }
}

const cli = napiCli()
// `dev` is cargo's default profile (napi build looks for a custom profile's output under its own
// name, which `dev` does not have: target/debug).
const profileArgs = profile === 'release' ? ['--release'] : profile === 'dev' ? [] : ['--profile', profile]
if (cli) {
  run(process.execPath, [
    cli, 'build', '--platform', ...profileArgs,
    '--js', 'native.js', '--dts', 'native.d.ts', '--no-dts-header',
  ])
} else {
  run('cargo', ['build', '--lib', ...profileArgs])
  const target = process.env.CARGO_TARGET_DIR
    ? path.resolve(here, process.env.CARGO_TARGET_DIR)
    : path.join(here, 'target')
  const dir = path.join(target, profile === 'dev' ? 'debug' : profile)
  const lib = { linux: 'libtoolgate_node.so', darwin: 'libtoolgate_node.dylib', win32: 'toolgate_node.dll' }[process.platform]
  if (!lib) {
    console.error(`toolgate: no build recipe for ${process.platform} without @napi-rs/cli`)
    process.exit(1)
  }
  fs.copyFileSync(path.join(dir, lib), path.join(here, 'toolgate.node'))
}

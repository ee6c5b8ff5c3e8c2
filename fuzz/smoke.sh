#!/usr/bin/env bash
# Runs every fuzz target briefly (12 s each, about 50 s in all, after the build) from the
# checked-in corpora. New inputs go to a temporary directory, so the repository is unchanged.
# Needs: cargo-fuzz (`cargo install cargo-fuzz`) and a C++ toolchain for libFuzzer; nightly
# features are enabled on the stable toolchain with RUSTC_BOOTSTRAP=1.
# The smoke run builds the dev profile (--dev): it compiles in about half the time of the
# release build and still checks every assertion; a long fuzzing session should use
# `cargo fuzz run <target>` (release) directly.
set -euo pipefail
cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1
secs="${FUZZ_SECONDS:-12}"
targets=(policy_parse trace_line collector_body canonical_verify)
cargo fuzz build --dev -s none
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t" "corpus/$t"
  echo "fuzz smoke: $t (${secs}s)"
  cargo fuzz run --dev -s none "$t" "$scratch/$t" "corpus/$t" -- \
    -max_total_time="$secs" -print_final_stats=1
done
echo "fuzz smoke: all targets ok"

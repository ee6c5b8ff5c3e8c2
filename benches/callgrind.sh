#!/usr/bin/env bash
# Instructions per `before_tool` decision on the support workload, counted by callgrind
# (deterministic: free of machine noise). Prints one line per policy size; never fails on counts.
#
#   benches/callgrind.sh            # 10 and 1,000 rules
#   benches/callgrind.sh 100000     # other sizes (100,000 rules compile slowly under valgrind)
#
# Needs valgrind (apt-get install valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind not installed; skipped"; exit 0; }
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10 1000)
# The lean core (no integrations) is all the driver needs: a much smaller release build.
bin=$(cargo bench --no-default-features --bench support_calls --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)
[ -x "$bin" ] || { echo "callgrind.sh: could not build the driver" >&2; exit 1; }
runs=50
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for n in "${sizes[@]}"; do
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.$n" \
    --toggle-collect='*support_calls::decide*' "$bin" "$n" "$runs" >"$out/decisions.$n" 2>"$out/log.$n" \
    || { echo "callgrind.sh: valgrind failed at $n rules:"; tail -5 "$out/log.$n"; continue; }
  decisions=$(tail -1 "$out/decisions.$n")
  total=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out/cg.$n" | head -1)
  [ -n "$total" ] || total=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$out/cg.$n" | head -1)
  echo "support/$n before_tool: $((total / decisions)) instructions per decision ($decisions decisions, callgrind)"
done

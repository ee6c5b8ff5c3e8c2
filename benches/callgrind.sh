#!/usr/bin/env bash
# Instructions per `before_tool` decision on the support workload, counted by callgrind
# (deterministic: free of machine noise). Prints one line per policy size; never fails on counts.
#
#   benches/callgrind.sh            # 10 and 1,000 rules
#   benches/callgrind.sh 100000     # other sizes (100,000 rules compile slowly under valgrind)
#
# Also Cedar's stateless workload (benches/data/cedar-workload.json, each call its own run) at
# 10 and 1,000 rules. With KEEP=DIR the callgrind files stay in DIR: per-function counts with
# `callgrind_annotate --inclusive=no DIR/cg.10` (cg.cedar.10 for Cedar's).
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
if [ -n "${KEEP:-}" ]; then
  out=$KEEP; mkdir -p "$out"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
for n in "${sizes[@]}"; do
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.$n" \
    --toggle-collect='*support_calls::decide*' "$bin" "$n" "$runs" >"$out/decisions.$n" 2>"$out/log.$n" \
    || { echo "callgrind.sh: valgrind failed at $n rules:"; tail -5 "$out/log.$n"; continue; }
  decisions=$(tail -1 "$out/decisions.$n")
  total=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out/cg.$n" | head -1)
  [ -n "$total" ] || total=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$out/cg.$n" | head -1)
  echo "support/$n before_tool: $((total / decisions)) instructions per decision ($decisions decisions, callgrind)"
done

# Cedar's stateless workload: 20 requests per pass, each a fresh run (start and end uncounted).
for n in 10 1000; do
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.cedar.$n" \
    --toggle-collect='*support_calls::decide*' "$bin" "$n" "$runs" cedar >"$out/decisions.cedar.$n" 2>"$out/log.cedar.$n" \
    || { echo "callgrind.sh: valgrind failed on Cedar's workload at $n rules:"; tail -5 "$out/log.cedar.$n"; continue; }
  decisions=$(tail -1 "$out/decisions.cedar.$n")
  total=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out/cg.cedar.$n" | head -1)
  [ -n "$total" ] || total=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$out/cg.cedar.$n" | head -1)
  echo "cedar/$n before_tool: $((total / decisions)) instructions per decision ($decisions decisions, callgrind)"
done

# The same two workloads with mimalloc, the allocator the `toolgate` binary and the Node addon
# ship with (cargo feature `mimalloc`): what a decision costs as shipped. The figures above
# (the system allocator) stay the reference for comparisons across sessions.
mi_bin=$(cargo bench --no-default-features --features mimalloc --bench support_calls --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)
if [ -x "$mi_bin" ]; then
  for mode in support cedar; do
    arg=(); [ "$mode" = cedar ] && arg=(cedar)
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.mi.$mode" \
      --toggle-collect='*support_calls::decide*' "$mi_bin" 10 "$runs" "${arg[@]}" >"$out/decisions.mi.$mode" 2>"$out/log.mi.$mode" \
      || { echo "callgrind.sh: valgrind failed ($mode, mimalloc)"; continue; }
    decisions=$(tail -1 "$out/decisions.mi.$mode")
    total=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out/cg.mi.$mode" | head -1)
    echo "$mode/10 before_tool with mimalloc: $((total / decisions)) instructions per decision ($decisions decisions, callgrind)"
  done
fi

# A model call's gate on a policy without llm.before rules (design: it costs nothing
# measurable): instructions per `before_llm`, counted like the decisions above.
if valgrind --tool=callgrind --callgrind-out-file="$out/llm" \
    --toggle-collect='*support_calls::gate_model*' "$bin" 10 "$runs" llm >"$out/llm.calls" 2>"$out/llm.log"; then
  calls=$(tail -1 "$out/llm.calls")
  total=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out/llm" | head -1)
  echo "support/10 before_llm without llm.before rules: $((total / calls)) instructions per model call ($calls calls, callgrind)"
fi

# Audited runs (file sink, fsync off): every thread's instructions per decision, the whole audit
# pipeline included, as the difference of a 300-run and a 100-run count (start-up cancels out).
# Pinned to one CPU when taskset is there (the one-core path: callers seal batches of 512).
# SHA-256 runs without SHA-NI under valgrind: about 55,600 of these instructions per decision.
pin=()
command -v taskset >/dev/null && pin=(taskset -c 0)
for runs_n in 100 300; do
  "${pin[@]}" valgrind --tool=callgrind --callgrind-out-file="$out/audit.$runs_n" \
    "$bin" 10 "$runs_n" audit >/dev/null 2>"$out/audit-log.$runs_n" \
    || { echo "callgrind.sh: valgrind failed on the audited runs:"; tail -5 "$out/audit-log.$runs_n"; exit 0; }
done
a=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out/audit.100" | head -1)
b=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out/audit.300" | head -1)
echo "support/10 audited run: $(( (b - a) / (200 * 20) )) instructions per decision, every thread (4000 decisions, callgrind)"

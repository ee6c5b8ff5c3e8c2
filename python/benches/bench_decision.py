"""Decision overhead through Python on the support workload (not a test: prints numbers).

    python python/benches/bench_decision.py [path/to/support-workload.json] [--runs N]

A run (as benches/support/mod.rs does in Rust): the next end user (cycling through the 4), then
for each of the 20 calls `before_tool`, and `after_tool` for the allowed ones; the engine's
clock is fixed at the workload's time. For every `before_tool` it records the wall time of the
Python call (time.perf_counter_ns around it, the timer's own cost measured and subtracted) and
the engine's own `latency_ns` (the Rust call, measured inside it), and prints the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List

import toolgate

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", nargs="?", default=str(ROOT / "benches" / "data" / "support-workload.json"))
    ap.add_argument("--runs", type=int, default=5000)
    a = ap.parse_args()
    w: Dict[str, Any] = json.loads(Path(a.workload).read_text())
    rules = [{k: v for k, v in r.items() if k != "policyId"} for r in w["rules10"]]
    tags = {t["name"]: t["categories"] for t in w["tools"]}
    calls = [(c[0], c[1], tags.get(c[0], [])) for c in w["calls"]]
    users = [{"id": u["externalId"], "tags": u["metadata"]} for u in w["endusers"]]
    clock = toolgate.ManualClock(datetime.fromisoformat(w["clock"].replace("Z", "+00:00")))
    engine = toolgate.Engine({"policy": {"name": "support"}, "rules": rules}, clock=clock)

    ns = time.perf_counter_ns
    timer = statistics.median([-(ns() - ns()) for _ in range(100_000)])
    wall: List[int] = []
    rust: List[int] = []
    after_wall: List[int] = []
    effects: Dict[str, int] = {}
    for i in range(a.runs):
        run = engine.start_run("support-bot", run_id=f"bench-{i}", enduser=users[i % len(users)])
        for name, args, t in calls:
            t0 = ns()
            d = run.before_tool(name, args, t)
            t1 = ns()
            if i >= a.runs // 10:  # warm-up excluded
                wall.append(t1 - t0 - timer)
                rust.append(d.latency_ns)
            effects[d.effect] = effects.get(d.effect, 0) + 1
            if d.allowed:
                t0 = ns()
                run.after_tool(d.call_id, output={"ok": True}, duration_ms=5)
                t1 = ns()
                if i >= a.runs // 10:
                    after_wall.append(t1 - t0 - timer)
        run.end()
    mw, mr = statistics.median(wall), statistics.median(rust)
    print(f"support workload, 10 rules, {len(wall)} before_tool decisions measured ({effects})")
    print(f"  timer cost subtracted:                 {timer:8.0f} ns")
    print(f"  median before_tool through Python:     {mw:8.0f} ns")
    print(f"  median of the engine's own latency_ns: {mr:8.0f} ns  (the Rust call)")
    print(f"  Python overhead (median difference):   {mw - mr:8.0f} ns")
    print(f"  p90 through Python:                    {sorted(wall)[len(wall) * 9 // 10]:8.0f} ns")
    print(f"  median after_tool through Python:      {statistics.median(after_wall):8.0f} ns")


if __name__ == "__main__":
    main()

"""Two builds of the package side by side in one process (not a test: prints numbers), for a
before/after on a loaded machine: the support workload of bench_decision.py, its runs
alternated between build A and build B, so that both see the same load.

    python python/benches/bench_ab.py MODULE_A MODULE_B [--runs N]

MODULE_A / MODULE_B: importable package names (e.g. a copy of an older build's `toolgate`
folder renamed `toolgate_base`, on PYTHONPATH, and `toolgate`). Per side: the median wall time
of `before_tool`, the median engine `latency_ns`, their difference (the crossing's overhead).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--runs", type=int, default=4000)
    ap.add_argument("--workload", default=str(ROOT / "benches" / "data" / "support-workload.json"))
    o = ap.parse_args()
    w: Dict[str, Any] = json.loads(Path(o.workload).read_text())
    rules = [{k: v for k, v in r.items() if k != "policyId"} for r in w["rules10"]]
    tags = {t["name"]: t["categories"] for t in w["tools"]}
    calls = [(c[0], c[1], tags.get(c[0], [])) for c in w["calls"]]
    users = [{"id": u["externalId"], "tags": u["metadata"]} for u in w["endusers"]]
    at = datetime.fromisoformat(w["clock"].replace("Z", "+00:00"))
    sides = []
    for name in (o.a, o.b):
        m = importlib.import_module(name)
        engine = m.Engine({"policy": {"name": "support"}, "rules": rules}, clock=m.ManualClock(at))
        sides.append((name, m.__file__, engine, [], []))
    ns = time.perf_counter_ns
    timer = statistics.median([-(ns() - ns()) for _ in range(100_000)])
    for i in range(o.runs):
        _, _, engine, wall, rust = sides[i % 2]
        run = engine.start_run("support-bot", run_id=f"ab-{i}", enduser=users[(i // 2) % len(users)])
        measured = i >= o.runs // 10
        for name, args, t in calls:
            t0 = ns()
            d = run.before_tool(name, args, t)
            t1 = ns()
            if measured:
                wall.append(t1 - t0 - timer)
                rust.append(d.latency_ns)
            if d.allowed:
                run.after_tool(d.call_id, output={"ok": True}, duration_ms=5)
        run.end()
    print(f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} (at the end), {o.runs} runs alternated")
    for k, (name, file, _, wall, rust) in enumerate(sides):
        mw, mr = statistics.median(wall), statistics.median(rust)
        print(f"{'AB'[k]} {name} ({file}): before_tool {mw:.0f} ns, engine {mr:.0f} ns, overhead {mw - mr:.0f} ns")


if __name__ == "__main__":
    main()

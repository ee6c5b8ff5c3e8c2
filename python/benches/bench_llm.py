"""Per-model-call overhead through Python (not a test: prints numbers).

    python python/benches/bench_llm.py [--calls N]

What every adapter adds to one model call: the ``llm.before`` gate (``run.before_llm`` with the
call's messages) and the usage record (``run.record_llm``), measured two ways:

- *bare*: the two binding calls with no messages (what the engine itself costs);
- *native*: the two binding calls alone, with the messages;
- *adapter*: through ``toolgate._llm.LlmGate`` as the adapters call it (messages bounded,
  usage read defensively, cost from an adapter price table).

Each on two policies: the support policy (10 tool rules, no ``llm.before`` rule: the gate
decides nothing) and the same plus a token budget (an ``llm.before`` metricWindow rule). The
messages are a typical short history (5 messages, ~2 KB). Medians and p90 in microseconds, the
timer's own cost subtracted; runs of 20 calls, the first tenth of the calls as warm-up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import toolgate
from toolgate._llm import LlmGate, usage

ROOT = Path(__file__).resolve().parents[2]

BUDGET = {
    "id": "token-budget", "name": "token budget", "priority": 1, "enabled": True,
    "selector": {"phase": "llm.before"},
    "condition": {"kind": "metricWindow", "scope": "run", "metric": {"kind": "inbuilt", "key": "llm_tokens_in"},
                  "aggregate": "sum", "windowSeconds": 3600, "op": "gte", "value": 10**9},
    "effect": {"type": "block", "reason": "budget"},
}

MESSAGES: List[Dict[str, Any]] = [
    {"role": "system", "kind": "text", "content": "You are a support agent. " * 20},
    {"role": "user", "kind": "text", "content": "Where is my order A-1? " * 10},
    {"role": "assistant", "kind": "tool_call", "content": {"name": "get_order", "args": {"id": "A-1"}}},
    {"role": "tool", "kind": "tool_result", "content": {"status": "shipped", "items": ["x"] * 50}},
    {"role": "user", "kind": "text", "content": "Thanks, and a refund? " * 10},
]


def measure(engine: toolgate.Engine, calls: int, step: Callable[[toolgate.Run], None]) -> List[int]:
    ns = time.perf_counter_ns
    timer = statistics.median([-(ns() - ns()) for _ in range(100_000)])
    out: List[int] = []
    run = engine.start_run("bench")
    for i in range(calls):
        if i % 20 == 0:
            run.end()
            run = engine.start_run("bench")
        t0 = ns()
        step(run)
        t1 = ns()
        if i >= calls // 10:
            out.append(t1 - t0 - timer)
    run.end()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=50_000)
    a = ap.parse_args()
    w = json.loads((ROOT / "benches" / "data" / "support-workload.json").read_text())
    rules = [{k: v for k, v in r.items() if k != "policyId"} for r in w["rules10"]]
    gate = LlmGate({"gpt-4o": {"in": 2.5, "out": 10.0}})

    def native(run: toolgate.Run) -> None:
        d = run.before_llm("gpt-4o", MESSAGES)
        run.record_llm(1200, 80, model="gpt-4o", duration_ms=812.0, call_id=d.call_id)

    def bare(run: toolgate.Run) -> None:
        d = run.before_llm("gpt-4o")
        run.record_llm(1200, 80, model="gpt-4o", duration_ms=812.0, call_id=d.call_id)

    def adapter(run: toolgate.Run) -> None:
        d = gate.before(run, "gpt-4o", MESSAGES)
        gate.record(run, "gpt-4o", usage(1200, 80, MESSAGES), 812.0, d.call_id)

    for label, policy in (("no llm.before rule", rules), ("with a token budget", rules + [BUDGET])):
        engine = toolgate.Engine({"policy": {"name": "bench"}, "rules": policy})
        for how, step in (("bare", bare), ("native", native), ("adapter", adapter)):
            t = measure(engine, a.calls, step)
            q = statistics.quantiles(t, n=10)
            print(f"{label:22} {how:8} median {statistics.median(t) / 1e3:6.2f} µs   p90 {q[8] / 1e3:6.2f} µs")
        engine.shutdown()


if __name__ == "__main__":
    main()

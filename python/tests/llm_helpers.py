"""What the model-side tests share: budget policies and the audit trail read back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

from policies_for_tests import policy, rule

PRICES = {"scripted-1": {"in": 2.0, "out": 8.0}}


def token_budget(max_in: int, scope: str = "run") -> Dict[str, Any]:
    """A policy that refuses a model call once ``max_in`` input tokens have been used."""
    cond = {"kind": "metricWindow", "scope": scope, "metric": {"kind": "inbuilt", "key": "llm_tokens_in"},
            "aggregate": "sum", "windowSeconds": 3600, "op": "gte", "value": max_in}
    return policy(rule("token-budget", cond, "block", phase="llm.before", reason="The token budget is spent."),
                  name="budget")


def model_hitl() -> Dict[str, Any]:
    """A policy that holds every model call for review."""
    cond = {"kind": "metricWindow", "scope": "run", "metric": {"kind": "inbuilt", "key": "llm_tokens_in"},
            "aggregate": "sum", "windowSeconds": 3600, "op": "gte", "value": 0}
    return policy(rule("ask-first", cond, "hitl", phase="llm.before", reason="A human approves model calls."),
                  name="model-hitl")


def events(folder: Path, kind: str = "") -> List[Dict[str, Any]]:
    """Every audit event written under ``folder`` (of ``kind``, if given), in order."""
    out: List[Dict[str, Any]] = []
    for f in sorted(folder.rglob("*.jsonl")):
        for line in f.read_text().splitlines():
            if line.strip():
                e = json.loads(line)
                if not kind or e.get("kind") == kind:
                    out.append(e)
    return out


def field(e: Dict[str, Any], name: str) -> Any:
    """An event field, wherever the event keeps its body."""
    if name in e:
        return e[name]
    for body in ("decision", "data", "body", "payload"):
        if isinstance(e.get(body), dict) and name in e[body]:
            return e[body][name]
    return None


def run_status(folder: Path) -> List[Any]:
    """The status of every ended run in the trail."""
    return [field(e, "status") for e in events(folder, "run.ended")]

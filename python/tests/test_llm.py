"""The model's side (issue 36, design §17) through the native API: run.before_llm /
abefore_llm decided by llm.before rules, run.record_llm with model, duration and a cost priced
from Engine(prices=...), Engine(record_messages=True) writing redacted llm.messages events."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

import toolgate

BUDGET: Dict[str, Any] = {
    "policy": {"name": "budget"},
    "rules": [
        {
            "id": "token-budget",
            "name": "token budget",
            "selector": {"phase": "llm.before", "tool": {"name": "gpt-*"}},
            "condition": {
                "kind": "metricWindow",
                "scope": "run",
                "metric": {"kind": "inbuilt", "key": "llm_tokens_in"},
                "aggregate": "sum",
                "op": "gte",
                "value": 1000,
            },
            "effect": {"type": "block", "reason": "token budget spent"},
        },
        {
            "id": "cost-review",
            "name": "cost review",
            "selector": {"phase": "llm.before"},
            "condition": {
                "kind": "metricWindow",
                "scope": "run",
                "metric": {"kind": "inbuilt", "key": "llm_cost_usd"},
                "aggregate": "sum",
                "op": "gte",
                "value": 1.0,
            },
            "effect": {"type": "hitl", "reason": "a human approves spending more"},
        },
        {
            "id": "no-keys",
            "name": "no keys to the model",
            "selector": {"phase": "llm.before"},
            "condition": {"kind": "sensitiveData", "target": "llmInput",
                          "detectors": [{"detector": "private_key"}, {"detector": "credit_card"}]},
            "effect": {"type": "block", "reason": "secrets must not reach the model"},
        },
    ],
}

MSGS: List[Dict[str, Any]] = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


def events(folder: Path) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for f in sorted(folder.rglob("*.jsonl")):
        out.extend(json.loads(line) for line in f.read_text().splitlines() if line.strip())
    return out


def test_before_llm_is_decided_by_the_llm_before_rules() -> None:
    engine = toolgate.Engine(BUDGET)
    run = engine.start_run("bot", run_id="r1")
    d = run.before_llm("gpt-4o", MSGS)
    assert d.allowed and d.effect == "allow" and d.phase == "llm.before" and d.call_id == "llm-1"
    run.record_llm(1200, 10, model="gpt-4o", duration_ms=300.0)
    d = run.before_llm("gpt-4o", MSGS)
    assert (d.effect, d.code, d.rule_id, d.reason) == ("block", "BLOCKED_RULE", "token-budget", "token budget spent")
    assert d.to_dict()["phase"] == "llm.before"
    # The budget rule selects gpt-* only.
    assert run.before_llm("claude-sonnet", MSGS, call_id="x").allowed
    run.end(toolgate_status := "budget_exceeded")
    assert toolgate_status == "budget_exceeded"


def test_prices_turn_tokens_into_cost_and_a_cost_budget_asks_a_human(tmp_path: Path) -> None:
    engine = toolgate.Engine(BUDGET, audit=str(tmp_path), prices={"claude-*": {"in": 3.0, "out": 15.0}})
    run = engine.start_run("bot", run_id="r1")
    run.record_llm(100_000, 50_000, model="claude-sonnet-4")  # 0.3 + 0.75 = 1.05 USD
    d = run.before_llm("claude-sonnet-4", MSGS)
    assert d.effect == "hitl" and d.code == "BLOCKED_HITL_REQUESTED" and d.review_id and run.aborted
    assert run.before_llm("claude-sonnet-4", MSGS).code == "BLOCKED_RUN_ABORTED"
    engine.reviews.approve(d.review_id)
    run._resume()
    assert run.before_llm("claude-sonnet-4", MSGS).code == "ALLOWED_HITL_APPROVED"
    run.end()
    engine.flush()
    result = [e for e in events(tmp_path) if e["kind"] == "llm.result"][0]
    assert result["costUsd"] == pytest.approx(1.05)
    assert result["model"] == "claude-sonnet-4"
    assert [e["kind"] for e in events(tmp_path)].count("llm.decision") == 3


def test_bad_prices_and_bad_usage_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match=r"prices.m.in"):
        toolgate.Engine(BUDGET, prices={"m": {"in": -1, "out": 1}})
    with pytest.raises(ValueError, match="unknown key"):
        toolgate.Engine(BUDGET, prices={"m": {"in": 1, "out": 1, "cache": 2}})
    run = toolgate.Engine(BUDGET).start_run("bot")
    with pytest.raises(ValueError, match="non-negative"):
        run.record_llm(-5, 0)
    with pytest.raises(TypeError):
        run.record_llm("5", 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        run.record_llm(True, 0)
    # A giant count saturates (never wraps below the budget).
    run.record_llm(2**80, 0, model="gpt-4o")
    assert not run.before_llm("gpt-4o", MSGS).allowed


def test_a_nan_or_negative_cost_cannot_lower_a_budget(tmp_path: Path) -> None:
    engine = toolgate.Engine(BUDGET, audit=str(tmp_path))
    run = engine.start_run("bot", run_id="r1")
    run.record_llm(0, 0, cost_usd=1.5)
    run.record_llm(0, 0, cost_usd=-100.0)
    run.record_llm(0, 0, cost_usd=float("nan"))
    assert run.before_llm("m", MSGS).effect == "hitl"
    run.end()
    engine.flush()
    errors = [e for e in events(tmp_path) if e["kind"] == "error"]
    assert len(errors) == 2 and "not a non-negative number" in errors[0]["message"]


def test_record_messages_writes_them_redacted(tmp_path: Path) -> None:
    engine = toolgate.Engine(BUDGET, audit=str(tmp_path), record_messages=True)
    run = engine.start_run("bot", run_id="r1")
    key = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
    d = run.before_llm("gpt-4o", [{"role": "user", "content": f"use this key: {key}"}])
    assert d.effect == "block" and d.rule_id == "no-keys"
    assert run.before_llm("gpt-4o", [{"role": "user", "content": "x" * 40_000}]).allowed
    run.end()
    engine.flush()
    all_events = events(tmp_path)
    msgs = [e for e in all_events if e["kind"] == "llm.messages"]
    assert len(msgs) == 2
    assert msgs[0]["messages"][0]["content"] == "use this key: [redacted:private_key]"
    assert msgs[1]["messages"][0]["truncated"] is True
    assert len(msgs[1]["messages"][0]["content"]) == 16 * 1024
    assert "BEGIN PRIVATE KEY" not in json.dumps(all_events)


async def test_abefore_llm_does_not_block_the_loop() -> None:
    engine = toolgate.Engine(BUDGET)
    seen: List[str] = []

    async def ticker() -> None:
        seen.append("tick")

    run = engine.start_run("bot")
    d, _ = await asyncio.gather(run.abefore_llm("gpt-4o", MSGS), ticker())
    assert d.allowed and seen == ["tick"]
    run.record_llm(5000, 0)
    d = await run.abefore_llm("gpt-4o", MSGS)
    assert d.rule_id == "token-budget"
    await run.aend()


def test_before_llm_after_the_run_ended_raises_run_closed() -> None:
    engine = toolgate.Engine(BUDGET)
    run = engine.start_run("bot")
    run.end()
    with pytest.raises(toolgate.RunClosed):
        run.before_llm("gpt-4o", MSGS)
    # Without llm.before rules too.
    plain = toolgate.Engine({"policy": {"name": "p"}, "rules": []}).start_run("bot")
    assert plain.before_llm("m").allowed
    plain.end()
    with pytest.raises(toolgate.RunClosed):
        plain.before_llm("m")


def test_messages_that_are_not_json_or_too_deep_are_refused() -> None:
    run = toolgate.Engine(BUDGET).start_run("bot")
    with pytest.raises(TypeError):
        run.before_llm("m", [object()])
    deep: Any = "x"
    for _ in range(150):
        deep = [deep]
    with pytest.raises(ValueError, match="deeper"):
        run.before_llm("m", deep)


def test_an_llm_before_rule_with_a_tool_condition_fails_to_load() -> None:
    bad = {"rules": [{"id": "r", "name": "r", "selector": {"phase": "llm.before"},
                      "condition": {"kind": "toolArg", "type": "string", "op": "eq", "path": "a", "value": "b"},
                      "effect": {"type": "block"}}]}
    with pytest.raises(toolgate.PolicyError) as e:
        toolgate.Engine(bad)
    assert e.value.path == "rules[0].condition.kind"
    assert 'rule "r"' in str(e.value) and "llm.before" in str(e.value)

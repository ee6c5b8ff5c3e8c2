"""The core API of design §12: decisions, guard, errors, callbacks, clock, reviews, reload."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Dict

import pytest

import toolgate
from conftest import POLICIES
from policies_for_tests import ALWAYS, GATE, policy, rule


def test_decision_fields_and_to_dict_are_the_rust_decision() -> None:
    engine = toolgate.Engine(GATE)
    run = engine.start_run("bot", run_id="r1")
    d = run.before_tool("deleteUser", {"id": 7}, call_id="c1")
    assert (d.call_id, d.effect, d.code, d.rule_id, d.allowed, d.abort_run) == (
        "c1", "block", "BLOCKED_RULE", "no-delete", False, False)
    assert d.reason == "Deleting is not allowed."
    assert d.review_id is None and not d
    dd = d.to_dict()
    assert dd["effect"] == "block" and dd["code"] == "BLOCKED_RULE" and dd["ruleId"] == "no-delete"
    assert dd["phase"] == "tool.before" and dd["abortRun"] is False
    assert dd["evaluated"][0]["ruleId"] == "no-delete" and dd["evaluated"][0]["triggered"] is True
    ok = run.before_tool("getUser", {"id": 7})
    assert ok.allowed and ok.effect == "allow" and ok.code == "ALLOWED" and ok.call_id == "call-1"
    h = run.before_tool("refund", {"amount": 500})
    assert h.effect == "hitl" and h.code == "BLOCKED_HITL_REQUESTED" and h.abort_run and h.review_id
    assert run.aborted
    assert run.before_tool("getUser", {}).code == "BLOCKED_RUN_ABORTED"
    run.end()


def test_policy_error_names_the_file_and_the_json_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(policy(rule("late", {"kind": "timeGate", "timezone": {"source": "static", "tz": "UTC"},
                                               "windows": [{"days": ["mon"], "start": "25:00", "end": "26:00"}]}, "block"))))
    with pytest.raises(toolgate.PolicyError) as e:
        toolgate.Engine(str(bad))
    assert e.value.file == str(bad)
    assert e.value.path == "rules[0].condition.windows[0].start"
    assert str(bad) in str(e.value) and "rules[0].condition.windows[0].start" in str(e.value)
    assert isinstance(e.value, toolgate.ToolgateError)
    with pytest.raises(toolgate.PolicyError) as e2:
        toolgate.Engine({"rules": [{"id": "x"}]})
    assert e2.value.path == "rules[0]"
    with pytest.raises(toolgate.PolicyError):
        toolgate.Engine(str(tmp_path / "absent.json"))


def test_policies_from_a_folder_a_dict_and_a_list() -> None:
    assert toolgate.Engine(str(POLICIES)).active_rules > toolgate.Engine(POLICIES / "coding-agent.json").active_rules
    assert toolgate.Engine([GATE, POLICIES / "coding-agent.json"]).active_rules == 3 + toolgate.Engine(POLICIES / "coding-agent.json").active_rules
    # A bare array of rules is one document inside the list (a list at the top is a list of policies).
    assert toolgate.Engine([GATE["rules"]]).active_rules == 3


def test_bad_arguments_read_like_python() -> None:
    with pytest.raises(ValueError, match="failure_mode"):
        toolgate.Engine(GATE, failure_mode="maybe")
    with pytest.raises(ValueError, match="IANA"):
        toolgate.Engine(GATE, org_timezone="Mars/Olympus")
    run = toolgate.Engine(GATE).start_run("bot")
    with pytest.raises(TypeError, match=r"\$\.when: a datetime is not a JSON value"):
        run.before_tool("x", {"when": datetime.now()})


def test_guard_sync_runs_only_allowed_calls_with_kwargs_as_args() -> None:
    engine = toolgate.Engine(GATE)
    ran = []
    with engine.start_run("bot") as run:
        def refund(amount: int, order: str) -> Dict[str, Any]:
            ran.append(amount)
            return {"ok": True}

        def deleteUser(id: int) -> None:
            ran.append("deleted")

        guarded = run.guard(refund)
        assert guarded(amount=50, order="A") == {"ok": True}
        with pytest.raises(toolgate.Blocked) as b:
            run.guard(deleteUser)(id=1)
        assert not isinstance(b.value, toolgate.ReviewRequired)
        assert str(b.value) == "toolgate blocked this call: Deleting is not allowed. [BLOCKED_RULE, rule no-delete]"
        assert b.value.decision.rule_id == "no-delete"
        with pytest.raises(toolgate.ReviewRequired) as r:
            guarded(amount=500, order="B")
        assert r.value.decision.review_id and r.value.review_id == r.value.decision.review_id
        assert r.value.review_id in str(r.value)
    assert ran == [50]


async def test_guard_async_and_async_with() -> None:
    engine = toolgate.Engine(GATE)
    async with engine.start_run("bot") as run:
        @run.guard
        async def refund(amount: int) -> int:
            await asyncio.sleep(0)
            return amount

        assert await refund(amount=10) == 10
        with pytest.raises(toolgate.ReviewRequired):
            await refund(amount=1000)
        approve = engine.reviews.list()
        assert [r["status"] for r in approve] == ["pending"]
        engine.reviews.approve(approve[0]["id"])
    async with engine.start_run("bot") as run2:
        d = await run2.abefore_tool("refund", {"amount": 1000})
        assert d.code == "ALLOWED_HITL_APPROVED" and d.allowed


def test_guard_records_a_failing_tool_and_reraises() -> None:
    engine = toolgate.Engine(policy(rule("after-error", {"kind": "executionTime", "scope": "tool", "op": "gte", "ms": 0},
                                         "block", phase="tool.after")))
    run = engine.start_run("bot")

    def flaky() -> None:
        raise KeyError("nope")

    with pytest.raises(KeyError):
        run.guard(flaky)()
    with pytest.raises(toolgate.Blocked) as b:
        run.guard(lambda: 1, name="ok")()
    assert b.value.decision.phase == "tool.after"


def test_signals_plain_async_decorator_and_failures_are_missing_data() -> None:
    engine = toolgate.Engine(GATE, signal_timeout_ms=200)
    seen = []

    @engine.signal("crm.vip")
    def vip(args: Dict[str, Any]) -> bool:
        seen.append(args)
        return bool(args["user"] == "ann")

    run = engine.start_run("bot")
    assert run.before_tool("close_account", {"user": "ann"}).effect == "block"
    assert run.before_tool("close_account", {"user": "bob"}).effect == "allow"
    assert seen == [{"user": "ann"}, {"user": "bob"}]

    async def avip(args: Dict[str, Any]) -> bool:
        await asyncio.sleep(0.001)
        return True

    engine.register_signal("crm.vip", avip)
    assert run.before_tool("close_account", {"user": "x"}).effect == "block"

    def raises(args: Dict[str, Any]) -> Any:
        raise ValueError("CRM is down")

    never = threading.Event()

    def hangs(args: Dict[str, Any]) -> Any:
        never.wait(5)
        return True

    async def ahangs(args: Dict[str, Any]) -> Any:
        await asyncio.sleep(5)

    for fn, err in [(raises, "ValueError: CRM is down"), (lambda a: {1, 2}, "set is not a JSON value"),
                    (hangs, None), (ahangs, None), (lambda a: float("nan"), "not a JSON number")]:
        engine.register_signal("crm.vip", fn)
        d = run.before_tool("close_account", {"user": "ann"})
        # onMissingDefault is allow: missing data never blocks here, and the decision says why.
        assert d.effect == "allow", d
        sig = d.to_dict()["signals"][0]
        assert sig["key"] == "crm.vip" and "value" not in sig or sig.get("value") is None
        assert sig["error"], sig
        if err:
            assert err in sig["error"]
        ev = d.to_dict()["evaluated"][0]
        assert ev["ruleId"] == "vip" and ev["missing"]
    never.set()


async def test_async_signal_runs_on_the_callers_loop() -> None:
    engine = toolgate.Engine(GATE)
    loops = []

    async def vip(args: Dict[str, Any]) -> bool:
        loops.append(asyncio.get_running_loop())
        return True

    engine.register_signal("crm.vip", vip)
    d = await engine.start_run("bot").abefore_tool("close_account", {"user": "a"})
    assert d.effect == "block"
    assert loops == [asyncio.get_running_loop()]


def test_subjects_plain_and_failing() -> None:
    p = policy(rule("need-customer", {"kind": "not", "not": {"kind": "requireSubject", "subjectType": "customer", "idSystem": "crm"}},
                    "block", tool="get*"))
    engine = toolgate.Engine(p)

    @engine.subjects("get*")
    def extract(tool: str, args: Dict[str, Any]) -> Any:
        if "customer" not in args:
            raise LookupError("no customer")
        return [{"subjectType": "customer", "id": args["customer"], "idSystem": "crm"}]

    run = engine.start_run("bot")
    assert run.before_tool("getOrder", {"customer": 7}).allowed
    d = run.before_tool("getOrder", {})
    assert d.effect == "block"


def test_manual_clock_drives_time_rules() -> None:
    clock = toolgate.ManualClock(datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc))
    engine = toolgate.Engine(policy(rule("slow-run", {"kind": "executionTime", "scope": "total", "op": "gt", "ms": 60000}, "block")),
                             clock=clock)
    run = engine.start_run("bot")
    assert run.before_tool("x").allowed
    clock.advance(61)
    assert run.before_tool("x").effect == "block"
    clock.set(datetime(2026, 1, 5, 9, 0, 30))  # naive: UTC
    assert clock.now() == datetime(2026, 1, 5, 9, 0, 30, tzinfo=timezone.utc)
    assert run.before_tool("x").allowed


def test_reviews_approve_deny_expire() -> None:
    engine = toolgate.Engine(GATE)
    run = engine.start_run("bot", enduser={"id": "u1", "tags": {"tier": "gold"}})
    d = run.before_tool("refund", {"amount": 500})
    assert d.code == "BLOCKED_HITL_REQUESTED"
    [r] = engine.reviews.list()
    assert r["id"] == d.review_id and r["ruleId"] == "big-refund" and r["enduserId"] == "u1"
    assert engine.reviews.deny(d.review_id)["status"] == "denied"
    run2 = engine.start_run("bot", enduser={"id": "u1"})
    assert run2.before_tool("refund", {"amount": 500}).code == "BLOCKED_HITL_DENIED"
    with pytest.raises(toolgate.ToolgateError):
        engine.reviews.approve(d.review_id)
    engine.reviews.expire(d.review_id)
    assert engine.start_run("bot", enduser={"id": "u1"}).before_tool("refund", {"amount": 500}).code == "BLOCKED_HITL_REQUESTED"


def test_reload_swaps_and_a_bad_policy_keeps_the_old() -> None:
    engine = toolgate.Engine(GATE)
    run = engine.start_run("bot")
    assert run.before_tool("deleteUser").effect == "block"
    engine.reload(policy(rule("no-get", ALWAYS, "block", tool="get*")))
    assert run.before_tool("deleteUser").allowed and run.before_tool("getUser").effect == "block"
    with pytest.raises(toolgate.PolicyError):
        engine.reload({"rules": [{}]})
    assert run.before_tool("getUser").effect == "block"
    engine.reload([POLICIES / "coding-agent.json"])
    assert engine.active_rules == toolgate.Engine(POLICIES / "coding-agent.json").active_rules


def test_after_tool_and_end() -> None:
    engine = toolgate.Engine(policy(rule("big-output", {"kind": "metricWindow", "scope": "run", "metric": {"kind": "inbuilt", "key": "bytes_out"},
                                                    "aggregate": "sum", "windowSeconds": 60, "op": "gt", "value": 10}, "block", phase="tool.after")))
    run = engine.start_run("bot")
    d = run.before_tool("read", {"p": 1})
    after = run.after_tool(d.call_id, output={"text": "x" * 20}, duration_ms=5)
    assert after is not None and after.phase == "tool.after" and after.effect == "block"
    # A call never allowed: its result is not recorded, and must not reach the agent.
    never = run.after_tool("never-allowed", output=1)
    assert not never.allowed and never.phase == "tool.after" and never.code == "BLOCKED_FAILURE"
    run.end("success", output={"answer": 42})

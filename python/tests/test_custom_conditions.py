"""Design §11 `custom` conditions (`engine.register_condition`, `@engine.condition`) and
`start_run(agent_tags=)` read by a policy's `agentSelector`."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Dict, List

import pytest

import toolgate
from conftest import ROOT
from policies_for_tests import policy, rule

FRAUD = {"kind": "custom", "name": "fraud.suspect", "args": {"limit": 100}}

# A suspect refund is blocked; when the check cannot run, the refund is blocked too
# (onMissing: block), so "missing data" is told apart from "the function said False".
FRAUD_POLICY = policy(
    rule("fraud", FRAUD, "block", tool="refund", reason="Suspected fraud.", onMissing="block"),
)


def missing_of(d: toolgate.Decision) -> List[str]:
    ev = d.to_dict()["evaluated"]
    assert ev and ev[0]["ruleId"] == "fraud", ev
    return list(ev[0].get("missing", []))


def test_sync_condition_decides_block_and_allow_and_sees_the_call() -> None:
    engine = toolgate.Engine(FRAUD_POLICY)
    seen: List[Any] = []

    @engine.condition("fraud.suspect")
    def suspect(args: Any, call: Dict[str, Any]) -> bool:
        seen.append((args, call))
        return bool(call["args"]["amount"] > args["limit"])

    run = engine.start_run("support-bot", run_id="r-custom", enduser={"id": "cust-1", "tags": {"tier": "gold"}},
                           agent_tags=["prod", "eu"])
    d = run.before_tool("refund", {"amount": 500}, tags=["payments"])
    assert (d.effect, d.rule_id, d.reason) == ("block", "fraud", "Suspected fraud."), d.to_dict()
    assert missing_of(d) == []
    d = run.before_tool("refund", {"amount": 5})
    assert d.effect == "allow" and missing_of(d) == [], d.to_dict()
    # The condition's args and the call's context as the function received them.
    args, call = seen[0]
    assert args == {"limit": 100}
    assert call == {
        "toolName": "refund", "toolTags": ["payments"], "args": {"amount": 500},
        "runId": "r-custom", "agentId": "support-bot", "agentTags": ["prod", "eu"],
        "sessionId": None, "enduser": {"id": "cust-1", "tags": {"tier": "gold"}},
    }
    # Other tools are not selected by the rule: the function is not called.
    n = len(seen)
    assert run.before_tool("search", {"amount": 500}).effect == "allow"
    assert len(seen) == n


def test_args_absent_is_none_and_register_condition_replaces() -> None:
    p = policy(rule("fraud", {"kind": "custom", "name": "always"}, "block", tool="*"))
    engine = toolgate.Engine(p)
    got: List[Any] = []

    def yes(args: Any, call: Dict[str, Any]) -> bool:
        got.append(args)
        return True

    engine.register_condition("always", yes)
    run = engine.start_run("bot")
    assert run.before_tool("x").effect == "block"
    assert got == [None]
    engine.register_condition("always", lambda args, call: False)
    assert run.before_tool("x").effect == "allow"
    with pytest.raises(TypeError):
        engine.register_condition("always", 42)  # type: ignore[arg-type]


def test_unregistered_condition_is_missing_data() -> None:
    engine = toolgate.Engine(FRAUD_POLICY)
    d = engine.start_run("bot").before_tool("refund", {"amount": 1})
    assert d.effect == "block"
    assert missing_of(d) == ["custom fraud.suspect: no function registered"]


async def test_async_condition_runs_on_the_callers_loop() -> None:
    engine = toolgate.Engine(FRAUD_POLICY)
    loops: List[asyncio.AbstractEventLoop] = []

    @engine.condition("fraud.suspect")
    async def suspect(args: Any, call: Dict[str, Any]) -> bool:
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return bool(call["args"]["amount"] > args["limit"])

    run = engine.start_run("bot")
    d = await run.abefore_tool("refund", {"amount": 101})
    assert d.effect == "block" and missing_of(d) == [], d.to_dict()
    d = await run.abefore_tool("refund", {"amount": 100})
    assert d.effect == "allow" and missing_of(d) == [], d.to_dict()
    assert loops == [asyncio.get_running_loop()] * 2


def test_async_condition_from_a_sync_decision() -> None:
    engine = toolgate.Engine(FRAUD_POLICY)

    async def suspect(args: Any, call: Dict[str, Any]) -> bool:
        await asyncio.sleep(0)
        return bool(call["args"]["amount"] > args["limit"])

    engine.register_condition("fraud.suspect", suspect)
    run = engine.start_run("bot")
    assert run.before_tool("refund", {"amount": 1000}).effect == "block"
    assert run.before_tool("refund", {"amount": 1}).effect == "allow"


def test_raising_hanging_and_non_bool_conditions_are_missing_data() -> None:
    engine = toolgate.Engine(FRAUD_POLICY, signal_timeout_ms=50)
    run = engine.start_run("bot")
    release = threading.Event()

    def raises(args: Any, call: Dict[str, Any]) -> bool:
        raise ValueError("fraud service is down")

    def hangs(args: Any, call: Dict[str, Any]) -> bool:
        release.wait(10)  # held until the decision came back without it
        return False

    async def ahangs(args: Any, call: Dict[str, Any]) -> bool:
        await asyncio.Event().wait()
        return False

    cases: List[Any] = [
        (raises, "custom fraud.suspect: the function failed: ValueError: fraud service is down"),
        (hangs, "custom fraud.suspect: timed out after 50 ms"),
        (ahangs, "custom fraud.suspect: timed out after 50 ms"),
        (lambda a, c: 1, "custom fraud.suspect: the function failed: TypeError: a custom condition returns a bool, not int"),
        (lambda a, c: None, "TypeError: a custom condition returns a bool, not NoneType"),
        (lambda a, c: "yes", "TypeError: a custom condition returns a bool, not str"),
    ]
    try:
        for fn, why in cases:
            engine.register_condition("fraud.suspect", fn)
            # The function never said True, yet the rule blocks: onMissing applies.
            d = run.before_tool("refund", {"amount": 1})
            assert (d.effect, d.rule_id) == ("block", "fraud"), d.to_dict()
            missing = missing_of(d)
            assert len(missing) == 1 and why in missing[0], missing
    finally:
        release.set()
    # The engine is unharmed: a working function decides again.
    engine.register_condition("fraud.suspect", lambda a, c: False)
    assert run.before_tool("refund", {"amount": 1}).effect == "allow"


async def test_async_failures_are_missing_data_on_abefore_tool() -> None:
    engine = toolgate.Engine(FRAUD_POLICY, signal_timeout_ms=50)
    run = engine.start_run("bot")

    async def araises(args: Any, call: Dict[str, Any]) -> bool:
        raise RuntimeError("boom")

    async def ahangs(args: Any, call: Dict[str, Any]) -> bool:
        await asyncio.Event().wait()
        return True

    async def anot_bool(args: Any, call: Dict[str, Any]) -> Any:
        return {"suspect": True}

    for fn, why in [(araises, "RuntimeError: boom"), (ahangs, "timed out after 50 ms"),
                    (anot_bool, "TypeError: a custom condition returns a bool, not dict")]:
        engine.register_condition("fraud.suspect", fn)
        d = await run.abefore_tool("refund", {"amount": 1})
        assert d.effect == "block", d.to_dict()
        missing = missing_of(d)
        assert len(missing) == 1 and why in missing[0], missing


def test_on_missing_allow_lets_the_call_through_with_the_error() -> None:
    p = policy(rule("fraud", FRAUD, "block", tool="refund", onMissing="allow"))
    engine = toolgate.Engine(p)

    def raises(args: Any, call: Dict[str, Any]) -> bool:
        raise KeyError("amount")

    engine.register_condition("fraud.suspect", raises)
    d = engine.start_run("bot").before_tool("refund", {"amount": 1})
    assert d.effect == "allow"
    assert "KeyError" in missing_of(d)[0]


SPEC_KINDS = ROOT / "examples" / "spec-kinds.json"  # agentSelector: {"anyOfTags": ["prod"]}


def test_agent_selector_applies_only_to_runs_with_matching_agent_tags() -> None:
    engine = toolgate.Engine(SPEC_KINDS)
    mail = {"to": "a@example.com", "cc": None}  # rule no-null-cc: a present cc is blocked
    d = engine.start_run("mailer", agent_tags=["prod"]).before_tool("send_mail", mail)
    assert (d.effect, d.rule_id) == ("block", "no-null-cc"), d.to_dict()
    d = engine.start_run("mailer", agent_tags=("staging", "prod")).before_tool("send_mail", mail)
    assert d.effect == "block"
    for tags in [(), ["dev"], ["production"]]:
        d = engine.start_run("mailer", agent_tags=tags).before_tool("send_mail", mail)
        assert d.effect == "allow" and d.to_dict()["evaluated"] == [], (tags, d.to_dict())


async def test_agent_selector_with_all_of_tags_async_and_bad_tags() -> None:
    p = policy(rule("no-delete", {"kind": "toolName", "op": "glob", "value": "*"}, "block", tool="delete*"))
    p["policy"]["agentSelector"] = {"allOfTags": ["prod", "eu"]}
    engine = toolgate.Engine(p)
    d = await engine.start_run("bot", agent_tags=["eu", "prod", "x"]).abefore_tool("delete_user")
    assert d.effect == "block"
    d = await engine.start_run("bot", agent_tags=["eu"]).abefore_tool("delete_user")
    assert d.effect == "allow"
    with pytest.raises(TypeError, match="agent_tags"):
        engine.start_run("bot", agent_tags=[1, 2])  # type: ignore[list-item]


def test_a_timed_out_coroutine_is_cancelled_not_left_pending() -> None:
    # Sync decision: the coroutine runs on the package's background loop.
    engine = toolgate.Engine(FRAUD_POLICY, signal_timeout_ms=50)
    cancelled = threading.Event()

    async def ahangs(args: Any, call: Dict[str, Any]) -> bool:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return False

    engine.register_condition("fraud.suspect", ahangs)
    d = engine.start_run("bot").before_tool("refund", {"amount": 1})
    assert d.effect == "block" and "timed out" in missing_of(d)[0]
    assert cancelled.wait(10), "the hanging coroutine was never cancelled"

    # Same for a signal provider (the same bridge).
    p = policy(rule("vip", {"kind": "signal", "key": "crm.vip", "op": "eq", "value": True}, "block", tool="x"))
    engine = toolgate.Engine(p, signal_timeout_ms=50)
    cancelled.clear()

    async def shangs(args: Dict[str, Any]) -> Any:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    engine.register_signal("crm.vip", shangs)
    assert engine.start_run("bot").before_tool("x").to_dict()["signals"][0]["error"]
    assert cancelled.wait(10), "the hanging signal coroutine was never cancelled"


async def test_a_timed_out_coroutine_on_the_callers_loop_is_cancelled() -> None:
    engine = toolgate.Engine(FRAUD_POLICY, signal_timeout_ms=50)
    cancelled = asyncio.Event()

    async def ahangs(args: Any, call: Dict[str, Any]) -> bool:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return False

    engine.register_condition("fraud.suspect", ahangs)
    d = await engine.start_run("bot").abefore_tool("refund", {"amount": 1})
    assert d.effect == "block" and "timed out" in missing_of(d)[0]
    await asyncio.wait_for(cancelled.wait(), 10)

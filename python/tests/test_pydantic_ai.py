"""PydanticAI: ToolgateToolset through Agent with FunctionModel (offline), deferred approvals."""

from __future__ import annotations

from typing import Any, List

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, FunctionToolset, ToolDenied
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

import toolgate
from toolgate.pydantic_ai import ToolgateToolset
from policies_for_tests import GATE

ran: List[str] = []


def refund(amount: int) -> str:
    """Refunds an amount."""
    ran.append(f"refund {amount}")
    return f"refunded {amount}"


def deleteUser(id: int) -> str:
    """Deletes a user."""
    ran.append(f"delete {id}")
    return "deleted"


def scripted(name: str, args: dict) -> FunctionModel:
    """Calls `name(args)` once, then answers with what the tool returned."""

    def fn(messages: List[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"tool said: {returns[-1].content}")])
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id="tc-1")])

    return FunctionModel(fn)


def make(engine: toolgate.Engine, model: Any) -> tuple[Agent[None, Any], ToolgateToolset]:
    toolset = ToolgateToolset(FunctionToolset([refund, deleteUser]), engine, "pai-bot")
    return Agent(model, toolsets=[toolset], output_type=[str, DeferredToolRequests]), toolset


@pytest.fixture(autouse=True)
def clear() -> None:
    ran.clear()


def test_allow_runs_the_tool() -> None:
    agent, _ = make(toolgate.Engine(GATE), scripted("refund", {"amount": 20}))
    assert agent.run_sync("go").output == "tool said: refunded 20"
    assert ran == ["refund 20"]


def test_block_the_model_reads_the_text() -> None:
    agent, _ = make(toolgate.Engine(GATE), scripted("deleteUser", {"id": 7}))
    out = agent.run_sync("go").output
    assert out == "tool said: toolgate blocked this call: Deleting is not allowed. [BLOCKED_RULE, rule no-delete]"
    assert ran == []


def test_hitl_defers_and_approval_approves_the_review() -> None:
    engine = toolgate.Engine(GATE)
    agent, toolset = make(engine, scripted("refund", {"amount": 500}))
    first = agent.run_sync("refund 500")
    assert isinstance(first.output, DeferredToolRequests)
    [req] = first.output.approvals
    review_id = first.output.metadata[req.tool_call_id]["toolgateReviewId"]
    assert [r["id"] for r in engine.reviews.pending()] == [review_id]
    assert ran == []
    second = agent.run_sync(message_history=first.all_messages(),
                            deferred_tool_results=DeferredToolResults(approvals={req.tool_call_id: True}))
    assert second.output == "tool said: refunded 500"
    assert ran == ["refund 500"]
    assert {r["id"]: r["status"] for r in engine.reviews.list()}[review_id] == "approved"


def test_denial_through_decide_denies_the_review() -> None:
    engine = toolgate.Engine(GATE)
    agent, toolset = make(engine, scripted("refund", {"amount": 700}))
    first = agent.run_sync("refund 700")
    [req] = first.output.approvals
    results = toolset.decide(DeferredToolResults(approvals={req.tool_call_id: ToolDenied("no")}))
    second = agent.run_sync(message_history=first.all_messages(), deferred_tool_results=results)
    assert "no" in second.output
    assert ran == []
    assert [r["status"] for r in engine.reviews.list()] == ["denied"]
    # The same call again is blocked by the denied review.
    d = engine.start_run("pai-bot").before_tool("refund", {"amount": 700})
    assert d.code == "BLOCKED_HITL_DENIED"


async def test_test_model_async() -> None:
    engine = toolgate.Engine(GATE)
    toolset = ToolgateToolset(FunctionToolset([deleteUser]), engine, "pai-bot")
    agent = Agent(TestModel(), toolsets=[toolset])
    result = await agent.run("go")
    assert "BLOCKED_RULE" in result.output and ran == []


# -- issue 33: an approval applies only to the review raised for exactly those arguments ---------

from pydantic_ai import ToolApproved  # noqa: E402


def edited_history(messages: List[ModelMessage], args: dict) -> List[ModelMessage]:
    """The message history with the held call's arguments edited (a careless app or a hostile
    client resending it)."""
    import copy

    out = copy.deepcopy(messages)
    for m in out:
        for p in getattr(m, "parts", []):
            if isinstance(p, ToolCallPart) and p.tool_call_id == "tc-1":
                p.args = args
    return out


def test_approving_a_call_whose_arguments_were_edited_does_not_run_them() -> None:
    engine = toolgate.Engine(GATE)
    agent, toolset = make(engine, scripted("refund", {"amount": 500}))
    first = agent.run_sync("refund 500")
    [req] = first.output.approvals
    second = agent.run_sync(message_history=edited_history(first.all_messages(), {"amount": 99999}),
                            deferred_tool_results=DeferredToolResults(approvals={req.tool_call_id: True}))
    assert ran == [], ran
    assert isinstance(second.output, DeferredToolRequests)  # the edited call is held afresh
    by_amount = {r["args"]["amount"]: r["status"] for r in engine.reviews.list()}
    assert by_amount[99999] == "pending", by_amount


def test_decide_then_edited_arguments_are_held_afresh() -> None:
    engine = toolgate.Engine(GATE)
    agent, toolset = make(engine, scripted("refund", {"amount": 500}))
    first = agent.run_sync("refund 500")
    [req] = first.output.approvals
    results = toolset.decide(DeferredToolResults(approvals={req.tool_call_id: True}))
    second = agent.run_sync(message_history=edited_history(first.all_messages(), {"amount": 99999}),
                            deferred_tool_results=results)
    assert ran == [], ran
    by_amount = {r["args"]["amount"]: r["status"] for r in engine.reviews.list()}
    assert by_amount == {500: "approved", 99999: "pending"}, by_amount


def test_override_args_are_decided_afresh() -> None:
    engine = toolgate.Engine(GATE)
    agent, toolset = make(engine, scripted("refund", {"amount": 500}))
    first = agent.run_sync("refund 500")
    [req] = first.output.approvals
    approve = ToolApproved(override_args={"amount": 99999})
    agent.run_sync(message_history=first.all_messages(), deferred_tool_results=DeferredToolResults(approvals={req.tool_call_id: approve}))
    assert ran == [], ran


# -- issue 33: who may approve -------------------------------------------------------------------


def test_an_approver_that_refuses_leaves_the_review_pending() -> None:
    engine = toolgate.Engine(GATE)
    seen: List[Any] = []

    def approver(review: dict, ctx: Any) -> bool:
        seen.append(review["toolName"])
        return getattr(ctx, "deps", None) == "team-lead"

    toolset = ToolgateToolset(FunctionToolset([refund]), engine, "pai-bot", approver=approver)
    agent = Agent(scripted("refund", {"amount": 500}), toolsets=[toolset], output_type=[str, DeferredToolRequests], deps_type=str)
    first = agent.run_sync("refund 500", deps="end-user")
    [req] = first.output.approvals
    second = agent.run_sync(message_history=first.all_messages(), deps="end-user",
                            deferred_tool_results=DeferredToolResults(approvals={req.tool_call_id: True}))
    assert ran == [] and isinstance(second.output, DeferredToolRequests)
    assert [r["status"] for r in engine.reviews.list()] == ["pending"] and seen == ["refund"]
    third = agent.run_sync(message_history=first.all_messages(), deps="team-lead",
                           deferred_tool_results=DeferredToolResults(approvals={req.tool_call_id: True}))
    assert third.output == "tool said: refunded 500" and ran == ["refund 500"]


def test_decide_asks_the_approver_with_its_context() -> None:
    engine = toolgate.Engine(GATE)

    async def approver(review: dict, ctx: Any) -> bool:
        return ctx == {"user": "team-lead"}

    toolset = ToolgateToolset(FunctionToolset([refund]), engine, "pai-bot", approver=approver)
    agent = Agent(scripted("refund", {"amount": 700}), toolsets=[toolset], output_type=[str, DeferredToolRequests])
    first = agent.run_sync("refund 700")
    [req] = first.output.approvals
    toolset.decide(DeferredToolResults(approvals={req.tool_call_id: ToolDenied("no")}), context={"user": "someone"})
    assert [r["status"] for r in engine.reviews.list()] == ["pending"]
    toolset.decide(DeferredToolResults(approvals={req.tool_call_id: ToolDenied("no")}), context={"user": "team-lead"})
    assert [r["status"] for r in engine.reviews.list()] == ["denied"]


async def test_adecide_asks_an_async_approver_on_the_callers_loop() -> None:
    engine = toolgate.Engine(GATE)
    loops: List[Any] = []

    async def approver(review: dict, ctx: Any) -> bool:
        import asyncio

        loops.append(asyncio.get_running_loop())
        return ctx == "team-lead"

    toolset = ToolgateToolset(FunctionToolset([refund]), engine, "pai-bot", approver=approver)
    agent = Agent(scripted("refund", {"amount": 700}), toolsets=[toolset], output_type=[str, DeferredToolRequests])
    first = await agent.run("refund 700")
    [req] = first.output.approvals
    await toolset.adecide(DeferredToolResults(approvals={req.tool_call_id: True}), context="team-lead")
    import asyncio

    assert loops == [asyncio.get_running_loop()]
    assert [r["status"] for r in engine.reviews.list()] == ["approved"]


# -- issue 36: the model's side -----------------------------------------------------------------

from pathlib import Path  # noqa: E402

from pydantic_ai.usage import RequestUsage  # noqa: E402

from llm_helpers import events, field, model_hitl, run_status, token_budget  # noqa: E402


def metered(name: str, args: dict, tin: int = 100, tout: int = 10, counter: List[int] | None = None) -> FunctionModel:
    """`scripted`, reporting usage and counting calls."""
    inner = scripted(name, args)

    def fn(messages: List[ModelMessage], info: AgentInfo) -> ModelResponse:
        if counter is not None:
            counter.append(1)
        r = inner.function(messages, info)  # type: ignore[misc,union-attr]
        r.usage = RequestUsage(input_tokens=tin, output_tokens=tout)
        return r

    return FunctionModel(fn, model_name="scripted-1")


def gated(engine: toolgate.Engine, model: Any, **kw: Any) -> Agent[None, Any]:
    toolset = ToolgateToolset(FunctionToolset([refund, deleteUser]), engine, "pai-bot", **kw)
    return Agent(model, capabilities=[toolset.capability()], output_type=[str, DeferredToolRequests])


def test_usage_is_recorded_with_model_and_cost(tmp_path: Path) -> None:
    engine = toolgate.Engine(GATE, audit=str(tmp_path))
    agent = gated(engine, metered("refund", {"amount": 5}, 1000, 50), prices={"scripted-1": {"in": 2.0, "out": 8.0}})
    assert agent.run_sync("go").output == "tool said: refunded 5"
    engine.shutdown()
    r = events(tmp_path, "llm.result")
    assert [(field(e, "tokensIn"), field(e, "tokensOut")) for e in r] == [(1000, 50), (1000, 50)]
    assert field(r[0], "costUsd") == pytest.approx((1000 * 2.0 + 50 * 8.0) / 1e6)
    assert {field(e, "model") for e in r} == {"scripted-1"}
    assert ran == ["refund 5"]


def test_blocked_tool_through_the_capability_reads_the_refusal() -> None:
    agent = gated(toolgate.Engine(GATE), metered("deleteUser", {"id": 1}))
    assert "BLOCKED_RULE, rule no-delete" in agent.run_sync("go").output and ran == []


def test_the_llm_before_gate_stops_the_model_once_the_budget_is_spent(tmp_path: Path) -> None:
    engine = toolgate.Engine([token_budget(1000), GATE], audit=str(tmp_path))
    n: List[int] = []
    out = gated(engine, metered("refund", {"amount": 5}, 1500, 5, n)).run_sync("go").output
    assert "The token budget is spent." in out and len(n) == 1 and ran == ["refund 5"]
    engine.shutdown()
    assert run_status(tmp_path) == ["budget_exceeded"]


def test_a_model_request_held_for_review_is_not_made() -> None:
    engine = toolgate.Engine(model_hitl())
    n: List[int] = []
    out = gated(engine, metered("refund", {"amount": 5}, counter=n)).run_sync("go").output
    [review] = engine.reviews.pending()
    assert n == [] and review["id"] in out


def test_hostile_usage_is_bounded_and_a_model_error_is_recorded(tmp_path: Path) -> None:
    engine = toolgate.Engine(GATE, audit=str(tmp_path))
    gated(engine, metered("refund", {"amount": 5}, 10**40, -9)).run_sync("go")

    def down(messages: List[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError("model down")

    with pytest.raises(RuntimeError, match="model down"):
        gated(engine, FunctionModel(down, model_name="scripted-1")).run_sync("go")
    engine.shutdown()
    r = events(tmp_path, "llm.result")
    assert [(field(e, "tokensIn"), field(e, "tokensOut")) for e in r[:2]] == [(10**12, 0), (10**12, 0)]
    assert field(r[2], "tokensIn") > 0 and field(r[2], "tokensOut") == 0  # the failed call: what was sent

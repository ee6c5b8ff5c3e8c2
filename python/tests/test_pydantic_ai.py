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

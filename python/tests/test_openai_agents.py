"""OpenAI Agents SDK: govern() through Runner.run with a scripted Model (offline, as the SDK's
own tests do with their FakeModel)."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, List

import pytest

pytest.importorskip("agents")

from agents import Agent, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled
from agents.models.interface import Model
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

import toolgate
from toolgate.openai_agents import govern
from policies_for_tests import GATE

set_tracing_disabled(True)
ran: List[str] = []


class ScriptedModel(Model):
    """Calls one tool, then answers with the text of the last tool output it was given."""

    def __init__(self, tool: str, args: dict, call_id: str = "call_1") -> None:
        self.tool, self.args, self.call_id = tool, args, call_id

    async def get_response(self, system_instructions: Any, input: Any, *a: Any, **kw: Any) -> ModelResponse:
        outputs = [i for i in (input if isinstance(input, list) else []) if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if outputs:
            text = f"tool said: {outputs[-1]['output']}"
            msg = ResponseOutputMessage(id="m1", type="message", role="assistant", status="completed",
                                        content=[ResponseOutputText(type="output_text", text=text, annotations=[])])
            return ModelResponse(output=[msg], usage=Usage(), response_id=None)
        call = ResponseFunctionToolCall(type="function_call", name=self.tool, arguments=json.dumps(self.args),
                                        call_id=self.call_id, id="fc1", status="completed")
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def stream_response(self, *a: Any, **kw: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


@function_tool
def refund(amount: int) -> str:
    """Refunds an amount."""
    ran.append(f"refund {amount}")
    return f"refunded {amount}"


@function_tool
def deleteUser(id: int) -> str:
    """Deletes a user."""
    ran.append(f"delete {id}")
    return "deleted"


def agent(engine: toolgate.Engine, tool: str, args: dict) -> Agent[Any]:
    return govern(Agent(name="oa-bot", model=ScriptedModel(tool, args), tools=[refund, deleteUser]), engine)


@pytest.fixture(autouse=True)
def clear() -> None:
    ran.clear()


async def test_allow() -> None:
    result = await Runner.run(agent(toolgate.Engine(GATE), "refund", {"amount": 20}), "go")
    assert result.final_output == "tool said: refunded 20" and ran == ["refund 20"]


async def test_block_the_model_reads_the_text() -> None:
    result = await Runner.run(agent(toolgate.Engine(GATE), "deleteUser", {"id": 7}), "go")
    assert result.final_output == "tool said: toolgate blocked this call: Deleting is not allowed. [BLOCKED_RULE, rule no-delete]"
    assert ran == []


async def test_hitl_is_an_interruption_and_approving_approves_the_review() -> None:
    engine = toolgate.Engine(GATE)
    a = agent(engine, "refund", {"amount": 500})
    first = await Runner.run(a, "refund 500")
    [item] = first.interruptions
    [review] = engine.reviews.pending()
    assert ran == []
    state = first.to_state()
    state.approve(item)
    second = await Runner.run(a, state)
    assert second.final_output == "tool said: refunded 500" and ran == ["refund 500"]
    assert {r["id"]: r["status"] for r in engine.reviews.list()}[review["id"]] == "approved"


async def test_rejecting_denies_the_review() -> None:
    engine = toolgate.Engine(GATE)
    a = agent(engine, "refund", {"amount": 600})
    first = await Runner.run(a, "refund 600")
    [item] = first.interruptions
    state = first.to_state()
    state.reject(item)
    await Runner.run(a, state)
    assert ran == []
    assert [r["status"] for r in engine.reviews.list()] == ["denied"]

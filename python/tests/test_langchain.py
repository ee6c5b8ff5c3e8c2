"""LangChain v1: ToolgateMiddleware through create_agent with langchain's fake chat model."""

from __future__ import annotations

from typing import Any, List

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool

import toolgate
from toolgate.langchain import ToolgateMiddleware
from policies_for_tests import GATE


class FakeToolModel(GenericFakeChatModel):
    """langchain's fake chat model, replaying scripted messages; tools bound are ignored."""

    def bind_tools(self, tools: Any, **kw: Any) -> "FakeToolModel":
        return self


def call(name: str, args: dict, id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": id, "type": "tool_call"}])


ran: List[str] = []


@tool
def refund(amount: int) -> str:
    """Refunds an amount."""
    ran.append(f"refund {amount}")
    return f"refunded {amount}"


@tool
def deleteUser(id: int) -> str:
    """Deletes a user."""
    ran.append(f"delete {id}")
    return "deleted"


def agent(engine: toolgate.Engine, *script: AIMessage) -> Any:
    model = FakeToolModel(messages=iter(list(script)))
    return create_agent(model, tools=[refund, deleteUser], middleware=[ToolgateMiddleware(engine, "lc-bot")])


def tool_messages(result: Any) -> List[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


@pytest.fixture(autouse=True)
def clear() -> None:
    ran.clear()


def test_allow_and_block_the_model_reads_the_refusal_and_goes_on() -> None:
    engine = toolgate.Engine(GATE)
    a = agent(engine, call("refund", {"amount": 20}, "t1"), call("deleteUser", {"id": 7}, "t2"), AIMessage(content="done"))
    result = a.invoke({"messages": [{"role": "user", "content": "go"}]})
    t1, t2 = tool_messages(result)
    assert t1.content == "refunded 20" and t1.status == "success"
    assert t2.status == "error"
    assert t2.content == "toolgate blocked this call: Deleting is not allowed. [BLOCKED_RULE, rule no-delete]"
    assert ran == ["refund 20"]
    assert result["messages"][-1].content == "done"


def test_hitl_names_the_review_stops_the_agent_and_approval_lets_it_through() -> None:
    engine = toolgate.Engine(GATE)
    a = agent(engine, call("refund", {"amount": 500}, "t1"), AIMessage(content="never reached"))
    result = a.invoke({"messages": [{"role": "user", "content": "refund 500"}]})
    [t1] = tool_messages(result)
    [review] = engine.reviews.list()
    assert t1.status == "error" and review["id"] in t1.content and "BLOCKED_HITL_REQUESTED" in t1.content
    assert result["messages"][-1] is not None and result["messages"][-1].content != "never reached"
    assert ran == []
    engine.reviews.approve(review["id"])
    b = agent(engine, call("refund", {"amount": 500}, "t9"), AIMessage(content="done"))
    result = b.invoke({"messages": [{"role": "user", "content": "refund 500"}]})
    assert tool_messages(result)[0].content == "refunded 500"
    assert ran == ["refund 500"]


async def test_async_invocation() -> None:
    engine = toolgate.Engine(GATE)
    a = agent(engine, call("deleteUser", {"id": 1}, "t1"), call("refund", {"amount": 5}, "t2"), AIMessage(content="ok"))
    result = await a.ainvoke({"messages": [{"role": "user", "content": "go"}]})
    t1, t2 = tool_messages(result)
    assert "BLOCKED_RULE" in t1.content and t2.content == "refunded 5"
    assert ran == ["refund 5"]


# -- issue 33: the arguments decided are those the tool receives ---------------------------------

from policies_for_tests import policy, rule  # noqa: E402

CAP = policy(rule("refund-cap", {"kind": "toolArg", "type": "number", "op": "gt", "path": "amount", "value": 100}, "block",
                  tool="refund", reason="Refunds above $100 are not allowed."))


def test_a_number_sent_as_a_string_is_decided_as_the_number_the_tool_gets() -> None:
    engine = toolgate.Engine(CAP)
    a = agent(engine, call("refund", {"amount": "5000"}, "t1"), AIMessage(content="done"))
    [t1] = tool_messages(a.invoke({"messages": [{"role": "user", "content": "refund"}]}))
    assert ran == [], ran
    assert t1.status == "error" and "BLOCKED_RULE, rule refund-cap" in t1.content


async def test_a_number_sent_as_a_string_is_decided_as_the_number_async() -> None:
    engine = toolgate.Engine(CAP)
    a = agent(engine, call("refund", {"amount": "5000"}, "t1"), call("refund", {"amount": "7"}, "t2"), AIMessage(content="done"))
    t1, t2 = tool_messages(await a.ainvoke({"messages": [{"role": "user", "content": "refund"}]}))
    assert ran == ["refund 7"], ran
    assert "BLOCKED_RULE" in t1.content and t2.content == "refunded 7"


def test_arguments_the_schema_refuses_never_reach_the_tool() -> None:
    engine = toolgate.Engine(CAP)
    a = agent(engine, call("refund", {"amount": "lots"}, "t1"), AIMessage(content="done"))
    [t1] = tool_messages(a.invoke({"messages": [{"role": "user", "content": "refund"}]}))
    assert ran == [] and t1.status == "error"

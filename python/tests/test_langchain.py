"""LangChain v1: ToolgateMiddleware through create_agent with langchain's fake chat model."""

from __future__ import annotations

import json
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


# -- issue 36: the model's side -----------------------------------------------------------------

from pathlib import Path  # noqa: E402

from llm_helpers import PRICES, events, field, model_hitl, run_status, token_budget  # noqa: E402


def used(msg: AIMessage, tin: Any, tout: Any) -> AIMessage:
    msg.usage_metadata = {"input_tokens": tin, "output_tokens": tout, "total_tokens": 0}  # type: ignore[typeddict-item]
    msg.response_metadata = {"model_name": "scripted-1"}
    return msg


class CountingModel(FakeToolModel):
    calls: int = 0

    def _generate(self, *a: Any, **k: Any) -> Any:
        self.calls += 1
        return super()._generate(*a, **k)


def counted_agent(engine: toolgate.Engine, *script: AIMessage, **kw: Any) -> tuple[Any, CountingModel]:
    model = CountingModel(messages=iter(list(script)))
    mw = ToolgateMiddleware(engine, "lc-bot", **kw)
    return create_agent(model, tools=[refund, deleteUser], middleware=[mw]), model


def test_usage_is_recorded_with_model_and_cost(tmp_path: Path) -> None:
    engine = toolgate.Engine(GATE, audit=str(tmp_path))
    a, _ = counted_agent(engine, used(call("refund", {"amount": 5}, "t1"), 1000, 50), used(AIMessage(content="done"), 1200, 20),
                         prices=PRICES)
    a.invoke({"messages": [{"role": "user", "content": "go"}]})
    engine.shutdown()
    r = events(tmp_path, "llm.result")
    assert [(field(e, "tokensIn"), field(e, "tokensOut")) for e in r] == [(1000, 50), (1200, 20)]
    assert field(r[0], "costUsd") == pytest.approx((1000 * 2.0 + 50 * 8.0) / 1e6)
    assert {field(e, "model") for e in r} == {"scripted-1"}


def test_missing_or_hostile_usage_is_estimated_or_bounded(tmp_path: Path) -> None:
    engine = toolgate.Engine(GATE, audit=str(tmp_path))
    a, _ = counted_agent(engine, used(call("refund", {"amount": 5}, "t1"), 10**40, -3), AIMessage(content="done"))
    a.invoke({"messages": [{"role": "user", "content": "go"}]})
    engine.shutdown()
    r = events(tmp_path, "llm.result")
    assert (field(r[0], "tokensIn"), field(r[0], "tokensOut")) == (10**12, 0)
    assert field(r[1], "tokensIn") > 0 and field(r[1], "tokensOut") > 0  # no usage: estimated


def test_the_llm_before_gate_stops_the_model_once_the_budget_is_spent(tmp_path: Path) -> None:
    engine = toolgate.Engine([token_budget(1000), GATE], audit=str(tmp_path))
    a, model = counted_agent(engine, used(call("refund", {"amount": 5}, "t1"), 1500, 5), AIMessage(content="never"))
    result = a.invoke({"messages": [{"role": "user", "content": "go"}]})
    assert model.calls == 1 and ran == ["refund 5"]
    assert "The token budget is spent." in result["messages"][-1].content
    engine.shutdown()
    assert run_status(tmp_path) == ["budget_exceeded"]


async def test_a_model_call_held_for_review_is_not_made_async() -> None:
    engine = toolgate.Engine(model_hitl())
    a, model = counted_agent(engine, AIMessage(content="never"))
    result = await a.ainvoke({"messages": [{"role": "user", "content": "hi"}]})
    [review] = engine.reviews.pending()
    assert model.calls == 0 and review["id"] in result["messages"][-1].content


def test_parallel_tool_calls_are_each_decided() -> None:
    engine = toolgate.Engine(GATE)
    many = AIMessage(content="", tool_calls=[{"name": "deleteUser", "args": {"id": i}, "id": f"d{i}", "type": "tool_call"} for i in range(5)]
                     + [{"name": "refund", "args": {"amount": i}, "id": f"r{i}", "type": "tool_call"} for i in range(5)])
    result = agent(engine, many, AIMessage(content="done")).invoke({"messages": [{"role": "user", "content": "go"}]})
    msgs = tool_messages(result)
    assert sorted(ran) == sorted(f"refund {i}" for i in range(5))
    assert sum(1 for m in msgs if m.status == "error" and "BLOCKED_RULE" in m.content) == 5


def test_record_messages_through_the_adapter_writes_them_redacted(tmp_path: Path) -> None:
    from policies_for_tests import policy as pol, rule as rl

    cards = pol(rl("no-cards", {"kind": "sensitiveData", "target": "llmInput", "detectors": [{"detector": "credit_card"}]},
                   "block", phase="llm.before", reason="Card numbers must not reach the model."))
    engine = toolgate.Engine([GATE, token_budget(10**9)], audit=str(tmp_path), record_messages=True)
    a, _ = counted_agent(engine, AIMessage(content="done"))
    a.invoke({"messages": [{"role": "user", "content": "hello, refund my order"}]})
    engine.shutdown()
    msgs = events(tmp_path, "llm.messages")
    assert msgs and "hello, refund my order" in json.dumps(msgs)
    # with a redacting detector in play, the card never reaches the trail
    audit2 = tmp_path / "b"
    engine = toolgate.Engine([GATE, cards], audit=str(audit2), record_messages=True)
    a, model = counted_agent(engine, AIMessage(content="never"))
    out = a.invoke({"messages": [{"role": "user", "content": "my card is 4111 1111 1111 1111"}]})
    engine.shutdown()
    assert model.calls == 0 and "Card numbers must not reach the model." in out["messages"][-1].content
    trail = json.dumps(events(audit2))
    assert "4111 1111 1111 1111" not in trail and "llm.messages" in trail

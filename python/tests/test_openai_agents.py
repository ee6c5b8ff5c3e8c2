"""OpenAI Agents SDK: govern() through Runner.run with a scripted Model (offline, as the SDK's
own tests do with their FakeModel)."""

from __future__ import annotations

import dataclasses
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


# -- issue 33: a decision belongs to one run, one call id and one set of arguments ----------------

from agents.exceptions import ModelBehaviorError  # noqa: E402
from policies_for_tests import policy, rule  # noqa: E402

CAP = policy(rule("refund-cap", {"kind": "toolArg", "type": "number", "op": "gt", "path": "amount", "value": 100}, "block",
                  tool="refund", reason="Refunds above $100 are not allowed."))


class Script(Model):
    """Calls the tools in `calls` ((name, args, call id), one per turn), then answers with the
    text of the tool outputs it was given."""

    def __init__(self, *calls: tuple) -> None:
        self.calls = list(calls)

    async def get_response(self, system_instructions: Any, input: Any, *a: Any, **kw: Any) -> ModelResponse:
        items = input if isinstance(input, list) else []
        outputs = [i["output"] for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        made = sum(1 for i in items if isinstance(i, dict) and i.get("type") == "function_call")
        if made < len(self.calls):
            name, args, call_id = self.calls[made]
            call = ResponseFunctionToolCall(type="function_call", name=name, arguments=json.dumps(args),
                                            call_id=call_id, id=f"fc{made}", status="completed")
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        msg = ResponseOutputMessage(id="m1", type="message", role="assistant", status="completed",
                                    content=[ResponseOutputText(type="output_text", text=" | ".join(map(str, outputs)), annotations=[])])
        return ModelResponse(output=[msg], usage=Usage(), response_id=None)

    def stream_response(self, *a: Any, **kw: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


async def test_a_call_id_reused_by_another_run_with_other_arguments_is_decided_afresh() -> None:
    engine = toolgate.Engine(CAP)
    model = Script(("refund", {"amount": 20}, "call_0"))
    a = govern(Agent(name="oa-bot", model=model, tools=[refund]), engine)
    assert (await Runner.run(a, "refund 20")).final_output == "refunded 20"
    model.calls = [("refund", {"amount": 9000}, "call_0")]  # run 2: the same call id, edited
    out = (await Runner.run(a, "refund 9000")).final_output
    assert ran == ["refund 20"], ran
    assert "BLOCKED_RULE, rule refund-cap" in out


async def test_a_call_id_reused_in_one_run_with_other_arguments_is_decided_afresh() -> None:
    engine = toolgate.Engine(CAP)
    a = govern(Agent(name="oa-bot", model=Script(("refund", {"amount": 20}, "call_0"),
                                                 ("refund", {"amount": 9000}, "call_0")), tools=[refund]), engine)
    try:  # the SDK (0.24) refuses a call id reused in one run itself; toolgate does too
        out = (await Runner.run(a, "two refunds")).final_output
        assert "BLOCKED_RULE, rule refund-cap" in out
    except ModelBehaviorError:
        pass
    assert ran == ["refund 20"], ran


async def test_an_approval_does_not_carry_over_to_other_arguments_under_its_call_id() -> None:
    engine = toolgate.Engine(GATE)
    model = Script(("refund", {"amount": 500}, "call_0"))
    a = govern(Agent(name="oa-bot", model=model, tools=[refund]), engine)
    first = await Runner.run(a, "refund 500")
    [item] = first.interruptions
    state = first.to_state()
    state.approve(item)
    model.calls = [("refund", {"amount": 500}, "call_0"), ("refund", {"amount": 99999}, "call_0")]
    try:
        await Runner.run(a, state)
    except ModelBehaviorError:
        pass  # the SDK (0.24) refuses the reused call id itself
    assert ran == ["refund 500"], ran
    statuses = sorted(r["status"] for r in engine.reviews.list())
    assert statuses.count("approved") == 1, engine.reviews.list()


# -- issue 33: the tool's own needs_approval is kept ---------------------------------------------


async def test_the_tools_own_needs_approval_still_asks() -> None:
    own = dataclasses.replace(refund, needs_approval=True)
    a = govern(Agent(name="oa-bot", model=Script(("refund", {"amount": 5}, "call_0")), tools=[own]), toolgate.Engine(CAP))
    first = await Runner.run(a, "refund 5")
    assert len(first.interruptions) == 1 and ran == []
    state = first.to_state()
    state.approve(first.interruptions[0])
    await Runner.run(a, state)
    assert ran == ["refund 5"]


async def test_the_tools_own_needs_approval_function_is_asked() -> None:
    asked: List[Any] = []

    async def own_check(ctx: Any, params: Any, call_id: str) -> bool:
        asked.append(params)
        return params["amount"] > 10

    own = dataclasses.replace(refund, needs_approval=own_check)
    a = govern(Agent(name="oa-bot", model=Script(("refund", {"amount": 50}, "call_0")), tools=[own]), toolgate.Engine(CAP))
    first = await Runner.run(a, "refund 50")
    assert len(first.interruptions) == 1 and ran == [] and asked


# -- issue 33: who may approve -------------------------------------------------------------------


async def test_an_approver_that_refuses_leaves_the_review_pending() -> None:
    engine = toolgate.Engine(GATE)
    seen: List[Any] = []

    def approver(review: dict, ctx: Any) -> bool:
        seen.append((review["toolName"], getattr(ctx, "context", None)))
        return getattr(ctx, "context", None) == {"user": "team-lead"}

    model = Script(("refund", {"amount": 500}, "call_0"))
    a = govern(Agent(name="oa-bot", model=model, tools=[refund]), engine, approver=approver)
    first = await Runner.run(a, "refund 500", context={"user": "end-user"})
    state = first.to_state()
    state.approve(first.interruptions[0])
    second = await Runner.run(a, state)
    assert ran == [] and "BLOCKED_HITL_PENDING" in str(second.final_output)
    assert [r["status"] for r in engine.reviews.list()] == ["pending"]
    assert seen and seen[0][0] == "refund"


async def test_an_approver_that_accepts_lets_the_answer_decide() -> None:
    engine = toolgate.Engine(GATE)

    async def approver(review: dict, ctx: Any) -> bool:
        return getattr(ctx, "context", None) == {"user": "team-lead"}

    a = govern(Agent(name="oa-bot", model=Script(("refund", {"amount": 500}, "call_0")), tools=[refund]), engine, approver=approver)
    first = await Runner.run(a, "refund 500", context={"user": "team-lead"})
    state = first.to_state()
    state.approve(first.interruptions[0])
    await Runner.run(a, state)
    assert ran == ["refund 500"]
    assert [r["status"] for r in engine.reviews.list()] == ["approved"]


# -- issue 36: the model's side -----------------------------------------------------------------

from pathlib import Path  # noqa: E402

from llm_helpers import PRICES, events, field, model_hitl, run_status, token_budget  # noqa: E402


class MeteredModel(ScriptedModel):
    """ScriptedModel reporting usage (``tin``/``tout``; None leaves the SDK's default, 0) and
    counting its calls; ``model`` is its name."""

    def __init__(self, tool: str, args: dict, tin: Any = 100, tout: Any = 10, fail: bool = False) -> None:
        super().__init__(tool, args)
        self.model, self.calls, self.tin, self.tout, self.fail = "scripted-1", 0, tin, tout, fail

    async def get_response(self, *a: Any, **kw: Any) -> ModelResponse:
        self.calls += 1
        if self.fail:
            raise RuntimeError("model down")
        r = await super().get_response(*a, **kw)
        if self.tin is not None:
            r.usage = Usage(requests=1)
            r.usage.input_tokens, r.usage.output_tokens = self.tin, self.tout
        return r


def metered(engine: toolgate.Engine, model: MeteredModel, **kw: Any) -> Agent[Any]:
    return govern(Agent(name="oa-bot", model=model, tools=[refund, deleteUser]), engine, **kw)


async def test_usage_is_recorded_with_model_and_cost(tmp_path: Path) -> None:
    engine = toolgate.Engine(GATE, audit=str(tmp_path))
    await Runner.run(metered(engine, MeteredModel("refund", {"amount": 5}, 1000, 50), prices=PRICES), "go")
    engine.shutdown()
    r = events(tmp_path, "llm.result")
    assert [(field(e, "tokensIn"), field(e, "tokensOut")) for e in r] == [(1000, 50), (1000, 50)]
    assert field(r[0], "costUsd") == pytest.approx((1000 * 2.0 + 50 * 8.0) / 1e6)
    assert {field(e, "model") for e in r} == {"scripted-1"}


async def test_zero_or_hostile_usage_is_estimated_or_bounded(tmp_path: Path) -> None:
    engine = toolgate.Engine(GATE, audit=str(tmp_path))
    await Runner.run(metered(engine, MeteredModel("refund", {"amount": 5}, tin=None)), "go")  # SDK default: 0 tokens
    await Runner.run(metered(engine, MeteredModel("refund", {"amount": 5}, tin=10**40, tout=10**40)), "go")
    engine.shutdown()
    r = events(tmp_path, "llm.result")
    assert all(field(e, "tokensIn") > 0 for e in r[:2])  # a prompt is never free
    assert (field(r[2], "tokensIn"), field(r[2], "tokensOut")) == (10**12, 10**12)


async def test_a_model_that_raises_reaches_the_app() -> None:
    with pytest.raises(RuntimeError, match="model down"):
        await Runner.run(metered(toolgate.Engine(GATE), MeteredModel("refund", {"amount": 5}, fail=True)), "go")


async def test_the_llm_before_gate_stops_the_model_once_the_budget_is_spent(tmp_path: Path) -> None:
    engine = toolgate.Engine([token_budget(1000), GATE], audit=str(tmp_path))
    model = MeteredModel("refund", {"amount": 5}, 1500, 5)
    with pytest.raises(toolgate.Blocked, match="The token budget is spent.") as e:
        await Runner.run(metered(engine, model), "go")
    assert not isinstance(e.value, toolgate.ReviewRequired)
    assert model.calls == 1 and ran == ["refund 5"]
    engine.shutdown()
    assert run_status(tmp_path) == ["budget_exceeded"]


async def test_a_model_call_held_for_review_is_not_made() -> None:
    engine = toolgate.Engine(model_hitl())
    model = MeteredModel("refund", {"amount": 5})
    with pytest.raises(toolgate.ReviewRequired) as e:
        await Runner.run(metered(engine, model), "go")
    [review] = engine.reviews.pending()
    assert model.calls == 0 and e.value.review_id == review["id"]

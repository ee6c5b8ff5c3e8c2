"""Google ADK: ToolgatePlugin through a real Runner, with a scripted BaseLlm (offline, no key)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, AsyncGenerator, Callable, List, Optional

import pytest

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

import toolgate
from toolgate.google_adk import ToolgatePlugin
from llm_helpers import PRICES, events, field, model_hitl, run_status, token_budget
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


Step = Callable[[LlmRequest], LlmResponse]


class ScriptedModel(BaseLlm):
    """An offline model: each call answers with the next step of its script."""

    model: str = "scripted-1"
    steps: List[Any] = []
    calls: int = 0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        step = self.steps[min(self.calls, len(self.steps) - 1)]
        self.calls += 1
        out = step(llm_request)
        if isinstance(out, Exception):
            raise out
        yield out


def usage(tin: Any = 100, tout: Any = 10) -> types.GenerateContentResponseUsageMetadata:
    return types.GenerateContentResponseUsageMetadata.model_construct(prompt_token_count=tin, candidates_token_count=tout)


def calls(*fcs: tuple[str, dict, str], tin: Any = 100, tout: Any = 10) -> Step:
    parts = [types.Part(function_call=types.FunctionCall(name=n, args=a, id=i)) for n, a, i in fcs]
    return lambda _req: LlmResponse(content=types.Content(role="model", parts=parts), model_version="scripted-1",
                                    usage_metadata=usage(tin, tout))


def echo(tin: Any = 100, tout: Any = 10) -> Step:
    """Answers with what the tools returned, as text."""

    def step(req: LlmRequest) -> LlmResponse:
        said = [str(p.function_response.response) for c in req.contents for p in c.parts or ()
                if p.function_response is not None]
        return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=" | ".join(said) or "hi")]),
                           model_version="scripted-1", usage_metadata=usage(tin, tout))

    return step


class Harness:
    def __init__(self, engine: toolgate.Engine, *steps: Step, **plugin: Any) -> None:
        self.model = ScriptedModel(steps=list(steps))
        agent = LlmAgent(name="adk_bot", model=self.model, tools=[refund, deleteUser])
        self.sessions = InMemorySessionService()
        app = App(name="t", root_agent=agent, plugins=[ToolgatePlugin(engine, **plugin)])
        self.runner = Runner(app=app, session_service=self.sessions)
        self.session_id: Optional[str] = None

    async def send(self, message: types.Content) -> List[Any]:
        if self.session_id is None:
            self.session_id = (await self.sessions.create_session(app_name="t", user_id="u")).id
        return [e async for e in self.runner.run_async(user_id="u", session_id=self.session_id, new_message=message)]

    async def say(self, text: str) -> List[Any]:
        return await self.send(types.Content(role="user", parts=[types.Part(text=text)]))


def texts(evs: List[Any]) -> List[str]:
    return [p.text for e in evs if e.content for p in e.content.parts or () if p.text]


def responses(evs: List[Any]) -> List[Any]:
    return [p.function_response for e in evs if e.content for p in e.content.parts or () if p.function_response]


def confirmations(evs: List[Any]) -> List[Any]:
    return [p.function_call for e in evs if e.content for p in e.content.parts or ()
            if p.function_call and p.function_call.name == "adk_request_confirmation"]


@pytest.fixture(autouse=True)
def clear() -> None:
    ran.clear()


async def test_allowed_runs_blocked_reaches_the_model_as_a_refusal() -> None:
    h = Harness(toolgate.Engine(GATE), calls(("refund", {"amount": 20}, "c1"), ("deleteUser", {"id": 7}, "c2")), echo())
    evs = await h.say("go")
    assert ran == ["refund 20"]
    by_name = {r.name: r.response for r in responses(evs)}
    assert by_name["refund"] == {"result": "refunded 20"}
    assert by_name["deleteUser"] == {"error": "toolgate blocked this call: Deleting is not allowed. [BLOCKED_RULE, rule no-delete]"}
    assert "BLOCKED_RULE, rule no-delete" in texts(evs)[-1]  # the model read it


async def test_hitl_goes_through_adk_confirmation_and_approval_runs_the_call() -> None:
    engine = toolgate.Engine(GATE)
    h = Harness(engine, calls(("refund", {"amount": 500}, "c1")), echo())
    evs = await h.say("refund 500")
    [req] = confirmations(evs)
    [review] = engine.reviews.pending()
    assert req.args["toolConfirmation"]["payload"]["toolgateReviewId"] == review["id"]
    assert req.args["originalFunctionCall"]["id"] == "c1"
    assert ran == [] and h.model.calls == 1  # the invocation stopped for the confirmation
    answer = types.Part(function_response=types.FunctionResponse(
        name="adk_request_confirmation", id=req.id, response={"confirmed": True}))
    evs = await h.send(types.Content(role="user", parts=[answer]))
    assert ran == ["refund 500"]
    assert {r["id"]: r["status"] for r in engine.reviews.list()}[review["id"]] == "approved"
    assert "refunded 500" in texts(evs)[-1]


async def test_a_rejected_confirmation_denies_the_review() -> None:
    engine = toolgate.Engine(GATE)
    h = Harness(engine, calls(("refund", {"amount": 500}, "c1")), echo())
    [req] = confirmations(await h.say("refund 500"))
    [review] = engine.reviews.pending()
    answer = types.Part(function_response=types.FunctionResponse(
        name="adk_request_confirmation", id=req.id, response={"confirmed": False}))
    evs = await h.send(types.Content(role="user", parts=[answer]))
    assert ran == []
    assert {r["id"]: r["status"] for r in engine.reviews.list()}[review["id"]] == "denied"
    assert any("BLOCKED" in str(r.response) for r in responses(evs))


async def test_usage_is_recorded_with_model_duration_and_cost(tmp_path: Path) -> None:
    engine = toolgate.Engine(GATE, audit=str(tmp_path))
    h = Harness(engine, calls(("refund", {"amount": 5}, "c1"), tin=1000, tout=50), echo(tin=1200, tout=20), prices=PRICES)
    await h.say("go")
    engine.shutdown()
    results = events(tmp_path, "llm.result")
    assert [field(e, "tokensIn") for e in results] == [1000, 1200]
    assert [field(e, "tokensOut") for e in results] == [50, 20]
    assert field(results[0], "costUsd") == pytest.approx((1000 * 2.0 + 50 * 8.0) / 1e6)
    assert {field(e, "model") for e in results} == {"scripted-1"}
    assert all(isinstance(field(e, "durationMs"), (int, float)) for e in results)


async def test_the_llm_before_gate_stops_the_model_once_the_budget_is_spent(tmp_path: Path) -> None:
    engine = toolgate.Engine([token_budget(1000), GATE], audit=str(tmp_path))
    h = Harness(engine, calls(("refund", {"amount": 5}, "c1"), tin=1500), echo())
    evs = await h.say("go")
    assert h.model.calls == 1  # the second model call was never made
    assert ran == ["refund 5"]
    assert "The token budget is spent." in texts(evs)[-1]
    engine.shutdown()
    assert run_status(tmp_path) == ["budget_exceeded"]
    assert [field(e, "effect") for e in events(tmp_path, "llm.decision")][-1] == "block"


async def test_a_model_call_held_for_review_is_not_made() -> None:
    engine = toolgate.Engine(model_hitl())
    h = Harness(engine, echo())
    evs = await h.say("hello")
    assert h.model.calls == 0
    [review] = engine.reviews.pending()
    assert review["id"] in texts(evs)[-1]


# -- a hostile model ----------------------------------------------------------------------------


async def test_hostile_usage_numbers_are_bounded_or_estimated(tmp_path: Path) -> None:
    engine = toolgate.Engine(GATE, audit=str(tmp_path))
    h = Harness(engine, calls(("refund", {"amount": 1}, "c1"), tin=10**40, tout=-5),
                calls(("refund", {"amount": 2}, "c2"), tin=float("nan"), tout=None), echo(tin=None, tout=None))
    await h.say("go")
    engine.shutdown()
    r = events(tmp_path, "llm.result")
    assert [field(e, "tokensIn") for e in r][0] == 10**12 and field(r[0], "tokensOut") == 0
    assert all(field(e, "tokensIn") > 0 for e in r[1:])  # missing usage: estimated, never free


async def test_a_model_that_raises_is_recorded_and_the_error_reaches_the_app(tmp_path: Path) -> None:
    engine = toolgate.Engine(GATE, audit=str(tmp_path))
    h = Harness(engine, lambda _r: RuntimeError("model down"))  # type: ignore[arg-type,return-value]
    with pytest.raises(RuntimeError, match="model down"):
        await h.say("go")
    engine.shutdown()
    assert len(events(tmp_path, "llm.result")) == 1


async def test_parallel_tool_calls_are_each_decided() -> None:
    h = Harness(toolgate.Engine(GATE), calls(*[("deleteUser", {"id": i}, f"d{i}") for i in range(8)],
                                             *[("refund", {"amount": i}, f"r{i}") for i in range(8)]), echo())
    evs = await h.say("go")
    assert sorted(ran) == sorted(f"refund {i}" for i in range(8))
    blocked = [r for r in responses(evs) if r.name == "deleteUser"]
    assert len(blocked) == 8 and all("BLOCKED_RULE" in str(r.response) for r in blocked)


async def test_many_invocations_at_once_keep_their_runs_apart() -> None:
    engine = toolgate.Engine(GATE)
    hs = [Harness(engine, calls(("refund", {"amount": i}, "c1")), echo()) for i in range(20)]
    await asyncio.gather(*(h.say("go") for h in hs))
    assert sorted(ran) == sorted(f"refund {i}" for i in range(20))


def test_the_readme_example_runs() -> None:
    import runpy
    from pathlib import Path as P

    example = runpy.run_path(str(P(__file__).resolve().parents[1] / "examples" / "google_adk_example.py"))
    texts = asyncio.run(example["main"]())
    assert "Deleting is not allowed." in texts[-1]


async def test_an_error_inside_toolgate_fails_the_invocation_and_the_tool_never_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(*a: Any, **k: Any) -> Any:
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(toolgate.Run, "abefore_tool", broken)
    h = Harness(toolgate.Engine(GATE), calls(("refund", {"amount": 5}, "c1")), echo())
    with pytest.raises(Exception, match="engine exploded"):
        await h.say("go")
    assert ran == []


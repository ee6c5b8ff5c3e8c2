"""CrewAI: govern() through a real Crew kickoff, with a scripted BaseLLM (offline, no key).

CrewAI cannot share a venv with openai-agents: CI runs this file in a venv of its own
(python/constraints-crewai.txt)."""

from __future__ import annotations

import os

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")

import builtins
import json
import threading
from pathlib import Path
from typing import Any, List, Optional

import pytest

pytest.importorskip("crewai")

from crewai import Agent, Crew, Task
from crewai.hooks import HookAborted
from crewai.llms.base_llm import BaseLLM
from crewai.tools import tool

import toolgate
from toolgate.crewai import ModelCallRefused, govern
from llm_helpers import PRICES, events, field, model_hitl, run_status, token_budget
from policies_for_tests import GATE

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ran: List[str] = []


@tool("refund")
def refund(amount: int) -> str:
    """Refunds an amount."""
    ran.append(f"refund {amount}")
    return f"refunded {amount}"


@tool("deleteUser")
def delete_user(id: int) -> str:
    """Deletes a user."""
    ran.append(f"delete {id}")
    return "deleted"


class ScriptedLLM(BaseLLM):
    """An offline model: each call answers with the next step (ReAct text) and reports usage as
    CrewAI's providers do (``_track_token_usage_internal``), unless ``usage`` is None."""

    steps: List[str] = []
    usage: Optional[Any] = (100, 10)
    calls: int = 0
    seen: List[Any] = []
    fail: Optional[str] = None

    def call(self, messages: Any, tools: Any = None, callbacks: Any = None, available_functions: Any = None,
             from_task: Any = None, from_agent: Any = None, response_model: Any = None) -> str:
        if self.fail:
            raise RuntimeError(self.fail)
        step = self.steps[min(self.calls, len(self.steps) - 1)]
        self.calls += 1
        self.seen.append(list(messages) if isinstance(messages, list) else messages)
        if self.usage is not None:
            tin, tout = self.usage
            self._track_token_usage_internal({"prompt_tokens": tin, "completion_tokens": tout, "total_tokens": tin + tout})
        return step

    def supports_function_calling(self) -> bool:
        return False


def act(name: str, args: str) -> str:
    return f"Thought: I will use a tool\nAction: {name}\nAction Input: {args}"


FINAL = "Thought: I know the answer\nFinal Answer: done"


def crew(engine: toolgate.Engine, *steps: str, usage: Any = (100, 10), **kw: Any) -> tuple[Crew, ScriptedLLM]:
    llm = ScriptedLLM(model="scripted-1", steps=list(steps), usage=usage, seen=[])
    agent = Agent(role="support", goal="help", backstory="a support agent", llm=llm, tools=[refund, delete_user],
                  max_iter=6, verbose=False)
    c = Crew(agents=[agent], tasks=[Task(description="do it", expected_output="text", agent=agent)], verbose=False)
    return govern(c, engine, **kw), llm


def tool_results(llm: ScriptedLLM) -> str:
    """Everything the model was shown (the tool results among it)."""
    return "\n".join(str(m) for call in llm.seen for m in (call if isinstance(call, list) else [call]))


@pytest.fixture(autouse=True)
def clear() -> None:
    ran.clear()


def test_allowed_runs_and_blocked_reaches_the_model_as_a_refusal() -> None:
    c, llm = crew(toolgate.Engine(GATE), act("refund", '{"amount": 20}'), act("deleteUser", '{"id": 7}'), FINAL)
    assert c.kickoff().raw == "done"
    assert ran == ["refund 20"]
    seen = tool_results(llm)
    assert "refunded 20" in seen
    assert "toolgate blocked this call: Deleting is not allowed. [BLOCKED_RULE, rule no-delete]" in seen


def test_hitl_asks_through_crewai_and_approval_runs_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = toolgate.Engine(GATE)
    asked: List[str] = []
    monkeypatch.setattr(builtins, "input", lambda *a: asked.append("?") or "approve")
    c, llm = crew(engine, act("refund", '{"amount": 500}'), FINAL)
    assert c.kickoff().raw == "done"
    assert asked == ["?"] and ran == ["refund 500"]
    [review] = engine.reviews.list()
    assert review["status"] == "approved"


def test_hitl_denied_through_crewai_denies_the_review(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = toolgate.Engine(GATE)
    monkeypatch.setattr(builtins, "input", lambda *a: "deny")
    c, llm = crew(engine, act("refund", '{"amount": 500}'), FINAL)
    c.kickoff()
    assert ran == []
    assert [r["status"] for r in engine.reviews.list()] == ["denied"]
    assert "BLOCKED" in tool_results(llm)


def test_hitl_without_a_human_refuses_names_the_review_and_stops_the_agent() -> None:
    engine = toolgate.Engine(GATE)
    c, llm = crew(engine, act("refund", '{"amount": 500}'), FINAL, ask_human=False)
    with pytest.raises(HookAborted):
        c.kickoff()
    [review] = engine.reviews.pending()
    assert ran == [] and llm.calls == 1
    assert review["id"] in tool_results(llm) or llm.calls == 1


def test_usage_is_recorded_with_model_and_cost(tmp_path: Path) -> None:
    engine = toolgate.Engine(GATE, audit=str(tmp_path))
    c, _ = crew(engine, act("refund", '{"amount": 5}'), FINAL, usage=(1000, 50), prices=PRICES)
    c.kickoff()
    engine.shutdown()
    r = events(tmp_path, "llm.result")
    assert [field(e, "tokensIn") for e in r] == [1000, 1000]
    assert [field(e, "tokensOut") for e in r] == [50, 50]
    assert field(r[0], "costUsd") == pytest.approx((1000 * 2.0 + 50 * 8.0) / 1e6)
    assert {field(e, "model") for e in r} == {"scripted-1"}
    assert run_status(tmp_path) == ["success"]


def test_the_llm_before_gate_stops_the_model_once_the_budget_is_spent(tmp_path: Path) -> None:
    engine = toolgate.Engine([token_budget(1000), GATE], audit=str(tmp_path))
    c, llm = crew(engine, act("refund", '{"amount": 5}'), FINAL, usage=(1500, 10))
    with pytest.raises(ModelCallRefused) as e:
        c.kickoff()
    assert "The token budget is spent." in str(e.value)
    assert llm.calls == 1 and ran == ["refund 5"]
    engine.shutdown()
    assert run_status(tmp_path) == ["budget_exceeded"]


def test_a_model_call_held_for_review_is_not_made() -> None:
    engine = toolgate.Engine(model_hitl())
    c, llm = crew(engine, FINAL)
    with pytest.raises(ModelCallRefused):
        c.kickoff()
    assert llm.calls == 0 and len(engine.reviews.pending()) == 1


# -- a hostile model ----------------------------------------------------------------------------


def test_missing_usage_is_estimated_never_free(tmp_path: Path) -> None:
    engine = toolgate.Engine(GATE, audit=str(tmp_path))
    c, _ = crew(engine, FINAL, usage=None)
    c.kickoff()
    engine.shutdown()
    [r] = events(tmp_path, "llm.result")
    assert field(r, "tokensIn") > 10 and field(r, "tokensOut") > 0


def test_huge_and_negative_usage_is_bounded(tmp_path: Path) -> None:
    engine = toolgate.Engine(GATE, audit=str(tmp_path))
    c, _ = crew(engine, FINAL, usage=(10**30, -10**9))
    try:
        c.kickoff()
    except Exception:
        pass  # CrewAI's own counters may refuse such numbers; what toolgate recorded is checked
    engine.shutdown()
    results = events(tmp_path, "llm.result")
    assert results
    for r in results:
        assert 0 <= field(r, "tokensIn") <= 10**12 and 0 <= field(r, "tokensOut") <= 10**12


def test_a_model_that_raises_reaches_the_app_and_the_run_ends(tmp_path: Path) -> None:
    engine = toolgate.Engine(GATE, audit=str(tmp_path))
    c, llm = crew(engine, FINAL)
    llm.fail = "model down"
    with pytest.raises(Exception, match="model down"):
        c.kickoff()
    c2, _ = crew(engine, FINAL)  # the next kickoff of another crew is unaffected
    assert c2.kickoff().raw == "done"


def test_an_error_inside_toolgate_blocks_instead_of_failing_open(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = toolgate.Engine(GATE)
    c, llm = crew(engine, act("refund", '{"amount": 5}'), FINAL)

    def broken(*a: Any, **k: Any) -> Any:
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(toolgate.Run, "before_tool", broken)
    c.kickoff()
    assert ran == []  # CrewAI swallows hook errors and runs the tool; toolgate's hook blocks it


def test_crews_not_governed_are_untouched_and_concurrent_kickoffs_stay_apart() -> None:
    engine = toolgate.Engine(GATE)
    llm = ScriptedLLM(model="free", steps=[act("deleteUser", '{"id": 1}'), FINAL], seen=[])
    agent = Agent(role="free", goal="g", backstory="b", llm=llm, tools=[delete_user], verbose=False)
    Crew(agents=[agent], tasks=[Task(description="d", expected_output="t", agent=agent)]).kickoff()
    assert ran == ["delete 1"]  # not governed: toolgate does not decide its calls
    ran.clear()
    crews = [crew(engine, act("refund", f'{{"amount": {i}}}'), FINAL)[0] for i in range(4)]
    threads = [threading.Thread(target=c.kickoff) for c in crews]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(ran) == sorted(f"refund {i}" for i in range(4))


def test_the_readme_example_runs() -> None:
    import runpy

    example = runpy.run_path(str(Path(__file__).resolve().parents[1] / "examples" / "crewai_example.py"))
    assert example["main"]() == "toolgate refused delete_user"


class NativeLLM(ScriptedLLM):
    """A model that calls tools natively (OpenAI-style tool calls), several in one answer."""

    batch: List[Any] = []

    def call(self, messages: Any, tools: Any = None, callbacks: Any = None, available_functions: Any = None,
             from_task: Any = None, from_agent: Any = None, response_model: Any = None) -> Any:
        self.calls += 1
        self.seen.append(list(messages) if isinstance(messages, list) else messages)
        self._track_token_usage_internal({"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110})
        if self.calls == 1:
            return self.batch
        return "all done"

    def supports_function_calling(self) -> bool:
        return True


def test_parallel_native_tool_calls_are_each_decided() -> None:
    engine = toolgate.Engine(GATE)
    batch = [{"id": f"d{i}", "type": "function", "function": {"name": "deleteUser", "arguments": json.dumps({"id": i})}}
             for i in range(4)]
    batch += [{"id": f"r{i}", "type": "function", "function": {"name": "refund", "arguments": json.dumps({"amount": i})}}
              for i in range(4)]
    llm = NativeLLM(model="scripted-1", batch=batch, seen=[])
    agent = Agent(role="support", goal="help", backstory="b", llm=llm, tools=[refund, delete_user], verbose=False)
    c = govern(Crew(agents=[agent], tasks=[Task(description="do it", expected_output="text", agent=agent)]), engine)
    c.kickoff()
    assert sorted(ran) == sorted(f"refund {i}" for i in range(4))
    assert tool_results(llm).count("Deleting is not allowed.") == 4

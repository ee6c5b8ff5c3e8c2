"""LangChain v1 agents: :class:`ToolgateMiddleware` governs every tool call of ``create_agent``.

>>> from langchain.agents import create_agent
>>> agent = create_agent(model, tools, middleware=[ToolgateMiddleware(engine, "support-bot")])

One toolgate run per agent invocation. Every model call goes through the ``llm.before`` gate
first (``wrap_model_call``): a refused call is not made; the agent ends with an ``AIMessage``
reading the refusal and the run ends ``budget_exceeded`` (a hitl leaves it paused for its
review). Each call's tokens (``usage_metadata``), model and duration are recorded
(``llm.result``), with a cost from ``prices`` (or the engine's). A blocked call never runs: the model reads a
``ToolMessage(status="error")`` saying ``toolgate blocked this call: <reason> [<CODE>, rule <id>]``
and may go on. A call held for human review (hitl) gets the same message naming the review, and
the agent stops before its next model call. Approving the review (``engine.reviews.approve`` or
``toolgate review approve``) lets the identical call through next time.

The arguments decided are those the tool will receive: the model's arguments validated (and
coerced) by the tool's own schema, so ``{"amount": "5000"}`` is decided as the number 5000 a
schema with ``amount: int`` makes of it. Arguments the schema refuses are decided as sent (the
tool then refuses them too).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain.agents.middleware.types import ModelRequest, ModelResponse, PrivateStateAttr
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command
from typing_extensions import Annotated, NotRequired

from . import _agent_tags, Decision, Engine, Run, _jsonable, refusal_text
from ._llm import LlmGate, Messages, Prices, Timer, Usage, usage

__all__ = ["ToolgateMiddleware", "ToolgateState"]

ToolResult = Union[ToolMessage, Command[Any]]
ModelResult = Union[ModelResponse[Any], AIMessage, Any]


def _model_name(model: Any) -> str:
    for attr in ("model_name", "model", "model_id"):
        v = getattr(model, attr, None)
        if isinstance(v, str) and v:
            return v
    return type(model).__name__


def _messages(request: ModelRequest[Any]) -> List[Dict[str, Any]]:
    msgs: List[BaseMessage] = list(request.messages)
    if request.system_message is not None:
        msgs.insert(0, request.system_message)
    out: List[Dict[str, Any]] = []
    for m in msgs:
        calls = getattr(m, "tool_calls", None)
        kind = "tool_result" if isinstance(m, ToolMessage) else ("tool_call" if calls else "text")
        content: Any = m.content if not calls else {"text": m.content, "toolCalls": calls}
        out.append({"role": m.type, "kind": kind, "content": _jsonable(content)})
    return out


def _usage(result: Any, messages: Any) -> Tuple[Usage, Optional[str]]:
    """The call's usage and the model's name from its AIMessage."""
    msgs = result.result if isinstance(result, ModelResponse) else [result]
    ai = next((m for m in msgs if isinstance(m, AIMessage)), None)
    um = getattr(ai, "usage_metadata", None) or {}
    name = (getattr(ai, "response_metadata", None) or {}).get("model_name")
    return (usage(um.get("input_tokens"), um.get("output_tokens"), messages, getattr(ai, "content", None)),
            name if isinstance(name, str) else None)


class ToolgateState(AgentState[Any]):
    """The agent state with the id of the invocation's toolgate run."""

    toolgate_run_id: NotRequired[Annotated[Optional[str], PrivateStateAttr]]


def _output(result: ToolResult) -> Dict[str, Any]:
    if isinstance(result, ToolMessage):
        if result.status == "error":
            return {"error": str(result.content)}
        return {"output": _jsonable(result.content)}
    return {"output": None}


def _as_received(request: ToolCallRequest) -> Any:
    """The call's arguments as the tool will receive them: validated and coerced by its schema
    (as ``BaseTool.run`` does before calling it), the model-visible ones only (arguments the
    agent injects later are not the model's). As sent when the schema refuses them."""
    call = request.tool_call
    raw = call.get("args") or {}
    tool = request.tool
    parse = getattr(tool, "_parse_input", None)
    if not callable(parse):
        return raw
    try:
        parsed = parse(raw, call.get("id"))
    except Exception:
        return raw  # the tool refuses these arguments too: it will not run on them
    if not isinstance(parsed, dict):
        return parsed
    try:
        visible = set(tool.args)  # type: ignore[union-attr]
    except Exception:
        return parsed
    return {k: v for k, v in parsed.items() if k in visible or k in raw}


class ToolgateMiddleware(AgentMiddleware[ToolgateState, Any, Any]):
    """Decides every tool call of the agent with ``engine`` (``wrap_tool_call`` /
    ``awrap_tool_call``); ``before_model`` ends the agent once a call waits for review."""

    state_schema = ToolgateState

    def __init__(
        self,
        engine: Engine,
        agent_id: str,
        enduser: Optional[Mapping[str, Any]] = None,
        agent_tags: Iterable[str] = (),
        prices: Optional[Prices] = None,
    ) -> None:
        super().__init__()
        self.llm = LlmGate(prices)
        self.engine = engine
        self.agent_id = agent_id
        self.enduser = enduser
        self.agent_tags = _agent_tags(agent_tags)
        self._runs: Dict[str, Run] = {}
        self._lock = threading.Lock()

    # -- one run per invocation ------------------------------------------------------------
    def _start(self) -> Dict[str, Any]:
        run = self.engine.start_run(self.agent_id, enduser=self.enduser, agent_tags=self.agent_tags)
        with self._lock:
            self._runs[run.run_id] = run
        return {"toolgate_run_id": run.run_id}

    def _run(self, state: Any) -> Run:
        rid = state.get("toolgate_run_id") if isinstance(state, Mapping) else None
        with self._lock:
            run = self._runs.get(rid) if rid else None
            if run is None:
                # Used outside an invocation's before_agent (e.g. a bare ToolNode): a run of its own.
                run = self.engine.start_run(self.agent_id, enduser=self.enduser, agent_tags=self.agent_tags)
                self._runs[run.run_id] = run
            return run

    def _pop(self, state: Any) -> Optional[Run]:
        rid = state.get("toolgate_run_id") if isinstance(state, Mapping) else None
        with self._lock:
            return self._runs.pop(rid, None) if rid else None

    def before_agent(self, state: ToolgateState, runtime: Any) -> Dict[str, Any] | None:
        return self._start()

    async def abefore_agent(self, state: ToolgateState, runtime: Any) -> Dict[str, Any] | None:
        return self._start()

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: ToolgateState, runtime: Any) -> Dict[str, Any] | None:
        return {"jump_to": "end"} if self._run(state).aborted else None

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: ToolgateState, runtime: Any) -> Dict[str, Any] | None:
        return {"jump_to": "end"} if self._run(state).aborted else None

    def after_agent(self, state: ToolgateState, runtime: Any) -> Dict[str, Any] | None:
        run = self._pop(state)
        if run is not None and run.closed is None:
            run.end("aborted" if run.aborted else "success")
        return None

    async def aafter_agent(self, state: ToolgateState, runtime: Any) -> Dict[str, Any] | None:
        run = self._pop(state)
        if run is not None and run.closed is None:
            await run.aend("aborted" if run.aborted else "success")
        return None

    # -- model calls --------------------------------------------------------------------------
    @staticmethod
    def _refused_model(d: Decision) -> AIMessage:
        return AIMessage(content=refusal_text(d), response_metadata={"toolgateCode": d.code,
                                                                       "toolgateReviewId": d.review_id})

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResult:
        run = self._run(request.state)
        model, messages = _model_name(request.model), Messages(lambda: _messages(request))
        d = self.llm.before(run, model, messages)
        if not d.allowed:
            self.llm.end_refused(run, d)
            return self._refused_model(d)
        timer = Timer()
        try:
            result = handler(request)
        except Exception:
            self.llm.record(run, model, usage(None, 0, messages), timer.ms(), d.call_id)  # what was sent counts
            raise
        u, name = _usage(result, messages)
        self.llm.record(run, name or model, u, timer.ms(), d.call_id)
        return result

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
    ) -> ModelResult:
        run = self._run(request.state)
        model, messages = _model_name(request.model), Messages(lambda: _messages(request))
        d = await self.llm.abefore(run, model, messages)
        if not d.allowed:
            await self.llm.aend_refused(run, d)
            return self._refused_model(d)
        timer = Timer()
        try:
            result = await handler(request)
        except Exception:
            self.llm.record(run, model, usage(None, 0, messages), timer.ms(), d.call_id)
            raise
        u, name = _usage(result, messages)
        self.llm.record(run, name or model, u, timer.ms(), d.call_id)
        return result

    # -- tool calls ---------------------------------------------------------------------------
    @staticmethod
    def _refused(request: ToolCallRequest, decision: Any) -> ToolMessage:
        call = request.tool_call
        return ToolMessage(
            content=refusal_text(decision),
            tool_call_id=call.get("id") or "",
            name=call.get("name"),
            status="error",
        )

    @staticmethod
    def _what(request: ToolCallRequest) -> tuple[str, Any, tuple[str, ...], Optional[str]]:
        call = request.tool_call
        tags = tuple(getattr(request.tool, "tags", None) or ())
        return call["name"], _jsonable(_as_received(request)), tags, call.get("id")

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolResult]
    ) -> ToolResult:
        run = self._run(request.state)
        name, args, tags, call_id = self._what(request)
        d = run.before_tool(name, args, tags, call_id)
        if not d.allowed:
            return self._refused(request, d)
        started = time.perf_counter()
        try:
            result = handler(request)
        except Exception as e:
            run.after_tool(d.call_id, duration_ms=(time.perf_counter() - started) * 1e3, error=f"{type(e).__name__}: {e}")
            raise
        after = run.after_tool(d.call_id, duration_ms=(time.perf_counter() - started) * 1e3, **_output(result))
        if not after.allowed:
            return self._refused(request, after)
        return result

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[ToolResult]]
    ) -> ToolResult:
        run = self._run(request.state)
        name, args, tags, call_id = self._what(request)
        d = await run.abefore_tool(name, args, tags, call_id)
        if not d.allowed:
            return self._refused(request, d)
        started = time.perf_counter()
        try:
            result = await handler(request)
        except Exception as e:
            await run.aafter_tool(d.call_id, duration_ms=(time.perf_counter() - started) * 1e3, error=f"{type(e).__name__}: {e}")
            raise
        after = await run.aafter_tool(d.call_id, duration_ms=(time.perf_counter() - started) * 1e3, **_output(result))
        if not after.allowed:
            return self._refused(request, after)
        return result



"""PydanticAI: :class:`ToolgateToolset` wraps a toolset so toolgate decides every call.

>>> agent = Agent(model, toolsets=[ToolgateToolset(FunctionToolset([refund]), engine, "bot")],
...               output_type=[str, DeferredToolRequests])

One toolgate run per agent run. A blocked call does not run: the model reads
``toolgate blocked this call: <reason> [<CODE>, rule <id>]`` as the tool's result. A call held
for human review (hitl) raises ``ApprovalRequired``: the agent run ends with
``DeferredToolRequests`` whose ``metadata[tool_call_id]`` names the toolgate review
(``toolgateReviewId``). Resuming with ``DeferredToolResults(approvals={id: True})`` approves
the toolgate review and runs the call. A denial never reaches a toolset in PydanticAI, so pass
the results through :meth:`ToolgateToolset.decide` (``deferred_tool_results=toolset.decide(r)``),
which approves or denies every review they answer.

An approval applies only to the review raised for exactly the call's arguments: a call resumed
with edited arguments (or with ``ToolApproved(override_args=...)``) is decided afresh, and a new
review is asked for them.

**Model calls**: PydanticAI decides them outside toolsets, so the toolset comes with a
capability, :meth:`ToolgateToolset.capability` (``Agent(model, capabilities=[ts.capability()])``,
which also brings the toolset's tools): every model request goes through the ``llm.before``
gate first (``wrap_model_request``); a refused request is not made: the agent's answer is a
text reading the refusal, and the run ends ``budget_exceeded`` (a hitl leaves it paused for
its review). Each request's tokens (``ModelResponse.usage``), model and duration are recorded
(``llm.result``), with a cost from ``prices`` (or the engine's).

``approver``: who may answer a toolgate review through ``DeferredToolResults``. By default
(``None``) whoever builds the results decides the review. Given a callable
``approver(review, context) -> bool`` (plain or ``async def``; ``review`` as
``engine.reviews.list()`` shows it; ``context`` the tool call's ``RunContext`` when the answer
arrives with the resumed run, or the ``context=`` given to :meth:`ToolgateToolset.decide`), an
answer it refuses leaves the review pending and the call deferred again.
"""

from __future__ import annotations

import inspect
import json
import threading
import time
from collections import OrderedDict
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Awaitable, Callable, Dict, Mapping, Optional, Tuple, Union

from pydantic_ai import ApprovalRequired, DeferredToolResults, ToolDenied, WrapperToolset
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool

from . import Engine, Run, ToolgateError, _jsonable, refusal_text
from ._llm import LlmGate, Messages, Prices, Timer, usage

__all__ = ["ToolgateToolset", "ToolgateCapability", "Approver"]

Approver = Callable[[Dict[str, Any], Any], Union[bool, Awaitable[bool]]]
"""``approver(review, context)``: whether this answer may decide the toolgate review."""

# Held calls remembered (oldest forgotten first past this many).
_MAX_HELD = 4096


def _args_key(args: Any) -> str:
    return json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)


@dataclass
class ToolgateToolset(WrapperToolset[Any]):
    """A wrapper toolset deciding each call of ``wrapped`` with ``engine``."""

    engine: Engine = field(repr=False)
    agent_id: str = "pydantic-ai"
    enduser: Optional[Mapping[str, Any]] = None
    _: KW_ONLY
    tags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Tool tags by tool name (PydanticAI tools have none of their own)."""
    agent_tags: tuple[str, ...] = ()
    """The agent's tags, which policies' ``agentSelector`` matches."""
    approver: Optional[Approver] = field(default=None, repr=False)
    """``approver(review, context)``: whether an answer may decide a toolgate review (see the
    module's doc); ``None``: any answer does."""
    prices: Optional[Prices] = field(default=None, repr=False)
    """``{model: {"in": usd_per_M, "out": usd_per_M}}`` for model calls (default: the engine's)."""

    def __post_init__(self) -> None:
        self._llm = LlmGate(self.prices)
        self._runs: Dict[str, Run] = {}
        # tool call id -> (review id, arguments key): the review raised for that held call.
        self._reviews: "OrderedDict[str, Tuple[str, str]]" = OrderedDict()
        self._entered = 0
        self._lock = threading.Lock()

    async def __aenter__(self) -> "ToolgateToolset":
        await super().__aenter__()
        with self._lock:
            self._entered += 1
        return self

    async def __aexit__(self, *args: Any) -> Optional[bool]:
        ended = []
        with self._lock:
            self._entered -= 1
            if self._entered <= 0:
                ended = list(self._runs.values())
                self._runs.clear()
        for run in ended:
            if run.closed is None:
                await run.aend("aborted" if run.aborted else "success")
        return await super().__aexit__(*args)

    def _run(self, ctx: RunContext[Any]) -> Run:
        key = ctx.run_id or "default"
        with self._lock:
            run = self._runs.get(key)
            if run is None:
                run = self.engine.start_run(self.agent_id, enduser=self.enduser, agent_tags=self.agent_tags)
                self._runs[key] = run
            return run

    def capability(self) -> "ToolgateCapability":
        """The capability that gates and records this toolset's agent's model requests (and
        brings this toolset's tools): ``Agent(model, capabilities=[toolset.capability()])``."""
        return ToolgateCapability(self)

    def decide(self, results: DeferredToolResults, context: Any = None) -> DeferredToolResults:
        """Approves or denies the toolgate reviews that ``results`` answer (each the review
        raised for that call, if ``approver`` accepts the answer, given ``context``); returns
        ``results``. From async code with an ``async def`` approver, use :meth:`adecide`."""
        if self.approver is None:
            for call_id, answer in results.approvals.items():
                self._apply(call_id, answer)
            return results
        return _sync(self.adecide(results, context))

    async def adecide(self, results: DeferredToolResults, context: Any = None) -> DeferredToolResults:
        """:meth:`decide` for async code (an ``async def`` approver runs on the caller's loop)."""
        for call_id, answer in results.approvals.items():
            with self._lock:
                held = self._reviews.get(call_id)
            if held is None:
                continue
            if not await self._may_answer(held[0], context):
                continue  # refused: the review stays pending
            self._apply(call_id, answer)
        return results

    def _apply(self, call_id: str, answer: Any) -> None:
        with self._lock:
            held = self._reviews.pop(call_id, None)
        if held is None:
            return
        denied = answer is False or isinstance(answer, ToolDenied)
        try:
            if denied:
                self.engine.reviews.deny(held[0])
            else:
                self.engine.reviews.approve(held[0])
        except ToolgateError:
            pass  # decided already (by another reviewer or an earlier resume)

    async def _may_answer(self, review_id: str, context: Any) -> bool:
        if self.approver is None:
            return True
        review = next((r for r in self.engine.reviews.list() if r.get("id") == review_id), None)
        if review is None:
            return False
        verdict = self.approver(review, context)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return bool(verdict)

    async def call_tool(
        self, name: str, tool_args: Dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        run = self._run(ctx)
        args = _jsonable(tool_args)
        tags = tuple(self.tags.get(name, ()))
        d = await run.abefore_tool(name, args, tags, ctx.tool_call_id)
        call_id = ctx.tool_call_id
        if d.effect == "hitl" and ctx.tool_call_approved and d.review_id is not None and call_id is not None:
            # A human approved this deferred call in the host application: that approves the
            # toolgate review raised for exactly these arguments (edited ones raise their own),
            # and the call is decided again in the same run (now ALLOWED_HITL_APPROVED).
            with self._lock:
                held = self._reviews.get(call_id)
            if held == (d.review_id, _args_key(args)) and await self._may_answer(d.review_id, ctx):
                with self._lock:
                    self._reviews.pop(call_id, None)
                try:
                    self.engine.reviews.approve(d.review_id)
                except ToolgateError:
                    pass
                run._resume()
                d = await run.abefore_tool(name, args, tags, call_id)
        if d.effect == "hitl":
            if call_id is not None and d.review_id is not None:
                with self._lock:
                    self._reviews[call_id] = (d.review_id, _args_key(args))
                    while len(self._reviews) > _MAX_HELD:
                        self._reviews.popitem(last=False)
            raise ApprovalRequired(
                metadata={"toolgateReviewId": d.review_id, "toolgateReason": refusal_text(d)}
            )
        if not d.allowed:
            return refusal_text(d)
        started = time.perf_counter()
        try:
            out = await super().call_tool(name, tool_args, ctx, tool)
        except Exception as e:
            await run.aafter_tool(d.call_id, duration_ms=(time.perf_counter() - started) * 1e3, error=f"{type(e).__name__}: {e}")
            raise
        after = await run.aafter_tool(d.call_id, output=_jsonable(out), duration_ms=(time.perf_counter() - started) * 1e3)
        if not after.allowed:
            return refusal_text(after)
        return out


def _model_messages(messages: Any) -> list[Dict[str, Any]]:
    out: list[Dict[str, Any]] = []
    for m in messages or ():
        role = "assistant" if isinstance(m, ModelResponse) else "user"
        for p in getattr(m, "parts", ()) or ():
            kind = getattr(p, "part_kind", "text")
            content = getattr(p, "content", None)
            if content is None and hasattr(p, "args"):
                content = {"tool": getattr(p, "tool_name", None), "args": p.args}
            k = "tool_call" if kind == "tool-call" else "tool_result" if kind == "tool-return" else "text"
            out.append({"role": "system" if kind == "system-prompt" else role, "kind": k, "content": _jsonable(content)})
    return out


@dataclass
class ToolgateCapability(AbstractCapability[Any]):
    """Gates and records every model request of the agent it is given to, in the runs of its
    :class:`ToolgateToolset` (made by :meth:`ToolgateToolset.capability`)."""

    toolset: ToolgateToolset

    def get_toolset(self) -> AbstractToolset[Any]:
        return self.toolset

    async def wrap_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, handler: Any
    ) -> ModelResponse:
        ts = self.toolset
        run = ts._run(ctx)
        model = str(getattr(request_context.model, "model_name", None) or "unknown")
        messages = Messages(lambda: _model_messages(request_context.messages))
        if run.closed is not None:
            return ModelResponse(parts=[TextPart(f"toolgate: this run has ended ({run.closed}); the model is not called")],
                                 model_name="toolgate")
        d = await ts._llm.abefore(run, model, messages)
        if not d.allowed:
            await ts._llm.aend_refused(run, d)
            return ModelResponse(parts=[TextPart(refusal_text(d))], model_name="toolgate")
        timer = Timer()
        try:
            response: ModelResponse = await handler(request_context)
        except Exception:
            ts._llm.record(run, model, usage(None, 0, messages), timer.ms(), d.call_id)  # what was sent counts
            raise
        u = response.usage
        ts._llm.record(run, response.model_name or model,
                       usage(getattr(u, "input_tokens", None), getattr(u, "output_tokens", None), messages,
                             _jsonable([getattr(p, "content", None) for p in response.parts])),
                       timer.ms(), d.call_id)
        return response


def _sync(aw: Awaitable[DeferredToolResults]) -> DeferredToolResults:
    """Runs ``aw`` to completion here (``decide`` is called outside the agent's event loop);
    from inside a running loop, on a thread of its own (use ``adecide`` there)."""
    import asyncio

    async def run() -> DeferredToolResults:
        return await aw

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run())
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, run()).result(timeout=60)

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
"""

from __future__ import annotations

import threading
import time
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Dict, Mapping, Optional

from pydantic_ai import ApprovalRequired, DeferredToolResults, ToolDenied, WrapperToolset
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import ToolsetTool

from . import Engine, Run, ToolgateError, _jsonable, refusal_text

__all__ = ["ToolgateToolset"]


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

    def __post_init__(self) -> None:
        self._runs: Dict[str, Run] = {}
        self._reviews: Dict[str, str] = {}
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

    def decide(self, results: DeferredToolResults) -> DeferredToolResults:
        """Approves or denies the toolgate reviews that ``results`` answer; returns ``results``."""
        for call_id, answer in results.approvals.items():
            review_id = self._reviews.pop(call_id, None)
            if review_id is None:
                continue
            denied = answer is False or isinstance(answer, ToolDenied)
            try:
                if denied:
                    self.engine.reviews.deny(review_id)
                else:
                    self.engine.reviews.approve(review_id)
            except ToolgateError:
                pass  # decided already (by another reviewer or an earlier resume)
        return results

    async def call_tool(
        self, name: str, tool_args: Dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        run = self._run(ctx)
        args = _jsonable(tool_args)
        tags = tuple(self.tags.get(name, ()))
        d = await run.abefore_tool(name, args, tags, ctx.tool_call_id)
        if d.effect == "hitl" and ctx.tool_call_approved and d.review_id is not None:
            # A human approved this deferred call in the host application: that approves the
            # toolgate review, and the call is decided again (now ALLOWED_HITL_APPROVED).
            try:
                self.engine.reviews.approve(d.review_id)
            except ToolgateError:
                pass
            run = self.engine.start_run(self.agent_id, enduser=self.enduser, agent_tags=self.agent_tags)
            with self._lock:
                self._runs[ctx.run_id or "default"] = run
            d = await run.abefore_tool(name, args, tags, ctx.tool_call_id)
        if d.effect == "hitl":
            if ctx.tool_call_id is not None and d.review_id is not None:
                self._reviews[ctx.tool_call_id] = d.review_id
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
        if after is not None and not after.allowed:
            return refusal_text(after)
        return out

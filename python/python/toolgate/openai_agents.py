"""OpenAI Agents SDK: :func:`govern` returns the agent with every function tool decided by toolgate.

>>> agent = govern(Agent(name="support", tools=[refund]), engine)
>>> result = await Runner.run(agent, "refund order 7")

Each function tool gets a ``needs_approval`` check and a tool input guardrail; the agent gets
hooks that record results. One toolgate run per agent run. A blocked call does not run and the
model reads ``toolgate blocked this call: <reason> [<CODE>, rule <id>]``. A call held for human
review (hitl) is an SDK approval interruption (``result.interruptions``); approving it through
the SDK's ``RunState`` (``state.approve(item)``) approves the toolgate review and the call runs
on resume; rejecting it (``state.reject(item)``) denies the review.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

from agents import Agent, AgentHooks, FunctionTool, RunContextWrapper, ToolGuardrailFunctionOutput
from agents.tool_guardrails import ToolInputGuardrail, ToolInputGuardrailData

from . import _agent_tags, Decision, Engine, Run, ToolgateError, _jsonable, refusal_text

__all__ = ["govern"]


def _args(raw: Any) -> Any:
    import json

    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return {"_raw": raw}
    return _jsonable(raw)


class _Governor(AgentHooks[Any]):
    """State shared by the hooks, checks and guardrails of one governed agent."""

    def __init__(
        self,
        engine: Engine,
        agent_id: str,
        enduser: Optional[Mapping[str, Any]],
        inner: Optional[AgentHooks[Any]],
        agent_tags: Iterable[str] = (),
    ) -> None:
        self.engine = engine
        self.agent_id = agent_id
        self.enduser = enduser
        self.agent_tags = _agent_tags(agent_tags)
        self.inner = inner
        self.lock = threading.Lock()
        self.runs: Dict[int, Run] = {}
        self.decisions: Dict[str, Decision] = {}
        self.pending: Dict[str, Tuple[str, str]] = {}  # call id -> (tool name, review id)

    def run(self, ctx: Any) -> Run:
        # The run's Usage object is shared by the run's context wrapper and its tool contexts.
        key = id(getattr(ctx, "usage", ctx))
        with self.lock:
            run = self.runs.get(key)
            if run is None:
                run = self.engine.start_run(self.agent_id, enduser=self.enduser, agent_tags=self.agent_tags)
                self.runs[key] = run
            return run

    def settle(self, ctx: Any) -> None:
        """Applies the SDK's approvals and rejections of held calls to their toolgate reviews."""
        is_approved = getattr(ctx, "is_tool_approved", None)
        if is_approved is None:
            return
        with self.lock:
            items = list(self.pending.items())
        for call_id, (tool, review_id) in items:
            status = is_approved(tool, call_id)
            if status is None:
                continue
            with self.lock:
                self.pending.pop(call_id, None)
            try:
                if status:
                    self.engine.reviews.approve(review_id)
                else:
                    self.engine.reviews.deny(review_id)
            except ToolgateError:
                pass  # decided already

    async def decide(self, ctx: Any, tool: str, args: Any, call_id: str) -> Decision:
        with self.lock:
            known = self.decisions.get(call_id)
        if known is not None:
            return known
        self.settle(ctx)
        d = await self.run(ctx).abefore_tool(tool, args, None, call_id)
        with self.lock:
            self.decisions[call_id] = d
            if d.effect == "hitl" and d.review_id is not None:
                self.pending[call_id] = (tool, d.review_id)
        return d

    # -- hooks ---------------------------------------------------------------------------------
    async def on_start(self, context: Any, agent: Any) -> None:
        self.settle(context)
        if self.inner is not None:
            await self.inner.on_start(context, agent)

    async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
        self.settle(context)
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        call_id = getattr(context, "tool_call_id", None)
        if call_id is not None:
            with self.lock:
                d = self.decisions.get(call_id)
            if d is not None and d.allowed:
                await self.run(context).aafter_tool(call_id, output=_jsonable(result))
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        self.settle(context)
        with self.lock:
            run = self.runs.pop(id(getattr(context, "usage", context)), None)
        if run is not None:
            await run.aend("aborted" if run.aborted else "success")
        if self.inner is not None:
            await self.inner.on_end(context, agent, output)

    async def on_handoff(self, context: Any, agent: Any, source: Any) -> None:
        if self.inner is not None:
            await self.inner.on_handoff(context, agent, source)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)

    # -- per tool ------------------------------------------------------------------------------
    def needs_approval(self, tool: str) -> Any:
        async def check(ctx: RunContextWrapper[Any], params: Dict[str, Any], call_id: str) -> bool:
            d = await self.decide(ctx, tool, _jsonable(params), call_id)
            return d.effect == "hitl"

        return check

    def guardrail(self, tool: str) -> ToolInputGuardrail[Any]:
        async def check(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
            ctx = data.context
            call_id = ctx.tool_call_id
            d = await self.decide(ctx, tool, _args(ctx.tool_arguments), call_id)
            if d.effect == "hitl":
                self.settle(ctx)
                with self.lock:
                    still_pending = call_id in self.pending
                if still_pending:
                    # Asked before the SDK's approval step: let the interruption happen.
                    return ToolGuardrailFunctionOutput.allow(output_info=d.code)
                # The SDK approved the call: the review is approved now; decide it again.
                with self.lock:
                    self.decisions.pop(call_id, None)
                run = self.engine.start_run(self.agent_id, enduser=self.enduser, agent_tags=self.agent_tags)
                with self.lock:
                    self.runs[id(getattr(ctx, "usage", ctx))] = run
                d = await self.decide(ctx, tool, _args(ctx.tool_arguments), call_id)
            if d.allowed:
                return ToolGuardrailFunctionOutput.allow(output_info=d.code)
            return ToolGuardrailFunctionOutput.reject_content(refusal_text(d), output_info=d.code)

        return ToolInputGuardrail(guardrail_function=check, name=f"toolgate:{tool}")


def govern(
    agent: Agent[Any],
    engine: Engine,
    agent_id: Optional[str] = None,
    enduser: Optional[Mapping[str, Any]] = None,
    agent_tags: Iterable[str] = (),
) -> Agent[Any]:
    """A copy of ``agent`` whose function tools toolgate decides (see the module's doc).
    ``agent_tags`` are the agent's tags, which policies' ``agentSelector`` matches."""
    gov = _Governor(engine, agent_id or agent.name, enduser, agent.hooks, agent_tags)
    tools = []
    for t in agent.tools:
        if isinstance(t, FunctionTool):
            t = dataclasses.replace(
                t,
                needs_approval=gov.needs_approval(t.name),
                tool_input_guardrails=[*(t.tool_input_guardrails or []), gov.guardrail(t.name)],
            )
        tools.append(t)
    return agent.clone(tools=tools, hooks=gov)

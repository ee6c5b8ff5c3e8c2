"""OpenAI Agents SDK: :func:`govern` returns the agent with every function tool decided by toolgate.

>>> agent = govern(Agent(name="support", tools=[refund]), engine)
>>> result = await Runner.run(agent, "refund order 7")

Each function tool gets a ``needs_approval`` check and a tool input guardrail; the agent gets
hooks that record results. One toolgate run per agent run (a run resumed from its ``RunState``
is the same run). A blocked call does not run and the model reads ``toolgate blocked this
call: <reason> [<CODE>, rule <id>]``. A call held for human review (hitl) is an SDK approval
interruption (``result.interruptions``); approving it through the SDK's ``RunState``
(``state.approve(item)``) approves the toolgate review raised for exactly that call and its
arguments, and the call runs on resume; rejecting it (``state.reject(item)``) denies the
review. A tool's own ``needs_approval`` is kept: either asking means approval is needed.

Every model call goes through the ``llm.before`` gate first (the agent's ``on_llm_start``
hook): a refused call is not made and ``Runner.run`` raises :class:`toolgate.Blocked` (the run
ends ``budget_exceeded``) or :class:`toolgate.ReviewRequired` (a hitl: the run is paused for
its review), which the app catches. Each call's tokens (``ModelResponse.usage``), model and
duration are recorded (``llm.result``, ``on_llm_end``), with a cost from ``prices`` (or the
engine's).

A decision belongs to one run, one call id and one set of arguments: a call id the model sends
again (in this run or another) with other arguments is decided afresh, and an SDK approval is
applied to one review only.

``approver``: who may answer a toolgate review through the SDK. By default (``None``) whoever
approves or rejects the interruption in the ``RunState`` decides the review, as for the tool's
own approvals. Given a callable ``approver(review, context) -> bool`` (plain or ``async def``;
``review`` is the review as ``engine.reviews.list()`` shows it, ``context`` the SDK's
``RunContextWrapper``), an answer it refuses leaves the review pending: the call stays held
until someone it accepts answers, or the review is decided in toolgate itself.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import threading
from collections import OrderedDict
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from agents import Agent, AgentHooks, FunctionTool, RunContextWrapper, ToolGuardrailFunctionOutput
from agents.tool_guardrails import ToolInputGuardrail, ToolInputGuardrailData

from . import _agent_tags, Decision, Engine, Run, ToolgateError, _jsonable, refusal_text
from ._llm import LlmGate, Messages, Prices, Timer, usage

__all__ = ["govern", "Approver"]

Approver = Callable[[Dict[str, Any], Any], Union[bool, Awaitable[bool]]]
"""``approver(review, context)``: whether this answer may decide the toolgate review."""

# Runs tracked per governed agent (runs interrupted and never resumed are forgotten, oldest
# first, past this many) and decisions kept per run.
_MAX_RUNS = 1024
_MAX_DECISIONS = 4096


def _args(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return {"_raw": raw}
    return _jsonable(raw)


def _key(call_id: str, args: Any) -> Tuple[str, str]:
    """A decision's key in its run: the call id and the exact arguments."""
    return call_id, json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)


class _RunState:
    """One SDK run (until it is resumed from a copied ``RunState``): its toolgate run and its
    decisions."""

    def __init__(self, anchor: Any, run: Run) -> None:
        self.anchor = anchor  # kept alive, so its id() is not reused while tracked
        self.run = run
        self.decisions: "OrderedDict[Tuple[str, str], Decision]" = OrderedDict()
        self.model_call: Optional[Tuple[Timer, Any, str, str]] = None  # (timer, messages, model, call id)


def _model_name(agent: Any) -> str:
    m = getattr(agent, "model", None)
    if isinstance(m, str) and m:
        return m
    name = getattr(m, "model", None)
    return name if isinstance(name, str) and name else (type(m).__name__ if m is not None else "default")


def _messages(system_prompt: Any, items: Any) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    if system_prompt:
        out.append({"role": "system", "kind": "text", "content": _jsonable(system_prompt)})
    for it in items if isinstance(items, list) else [items]:
        if not isinstance(it, Mapping):
            out.append({"role": "user", "kind": "text", "content": _jsonable(it)})
            continue
        t = it.get("type")
        kind = "tool_call" if t == "function_call" else "tool_result" if t == "function_call_output" else "text"
        content = it.get("content", it.get("output", it.get("arguments")))
        out.append({"role": str(it.get("role") or t or "user"), "kind": kind, "content": _jsonable(content)})
    return out


async def _maybe_await(v: Any) -> Any:
    return await v if inspect.isawaitable(v) else v


class _Governor(AgentHooks[Any]):
    """State shared by the hooks, checks and guardrails of one governed agent."""

    def __init__(
        self,
        engine: Engine,
        agent_id: str,
        enduser: Optional[Mapping[str, Any]],
        inner: Optional[AgentHooks[Any]],
        agent_tags: Iterable[str] = (),
        approver: Optional[Approver] = None,
        prices: Optional[Prices] = None,
    ) -> None:
        self.llm = LlmGate(prices)
        self.engine = engine
        self.agent_id = agent_id
        self.enduser = enduser
        self.agent_tags = _agent_tags(agent_tags)
        self.inner = inner
        self.approver = approver
        self.lock = threading.Lock()
        self.runs: "OrderedDict[int, _RunState]" = OrderedDict()
        # Calls the SDK was asked to hold, by (call id, arguments key): (tool, review id). An
        # SDK answer decides the review of exactly the call it was given for, once.
        self.held: "OrderedDict[Tuple[str, str], Tuple[str, str]]" = OrderedDict()

    def state(self, ctx: Any) -> _RunState:
        # The run's Usage object is shared by the run's context wrapper and its tool contexts.
        anchor = getattr(ctx, "usage", ctx)
        with self.lock:
            st = self.runs.get(id(anchor))
            if st is None or st.anchor is not anchor:
                run = self.engine.start_run(self.agent_id, enduser=self.enduser, agent_tags=self.agent_tags)
                st = _RunState(anchor, run)
                self.runs[id(anchor)] = st
                while len(self.runs) > _MAX_RUNS:
                    self.runs.popitem(last=False)
            return st

    def run(self, ctx: Any) -> Run:
        return self.state(ctx).run

    async def _may_answer(self, review_id: str, ctx: Any) -> bool:
        if self.approver is None:
            return True
        review = next((r for r in self.engine.reviews.list() if r.get("id") == review_id), None)
        if review is None:
            return False
        return bool(await _maybe_await(self.approver(review, ctx)))

    async def _answer(self, key: Tuple[str, str], approve: bool, ctx: Any) -> bool:
        """Applies an SDK answer to the review held for ``key``; whether it was applied."""
        with self.lock:
            held = self.held.get(key)
        if held is None:
            return False
        review_id = held[1]
        if not await self._may_answer(review_id, ctx):
            return False  # not this answerer's review: it stays pending
        with self.lock:
            if self.held.pop(key, None) is None:
                return False  # answered meanwhile
        try:
            if approve:
                self.engine.reviews.approve(review_id)
            else:
                self.engine.reviews.deny(review_id)
        except ToolgateError:
            pass  # decided already
        return True

    async def settle(self, ctx: Any) -> None:
        """Applies the SDK's rejections of held calls to their reviews (approvals are applied
        when the approved call is about to run, with its exact arguments in hand)."""
        is_approved = getattr(ctx, "is_tool_approved", None)
        if is_approved is None:
            return
        with self.lock:
            items = list(self.held.items())
        for key, (tool, _) in items:
            if is_approved(tool, key[0]) is False:
                await self._answer(key, False, ctx)

    async def decide(self, ctx: Any, tool: str, args: Any, call_id: str) -> Decision:
        st = self.state(ctx)
        key = _key(call_id, args)
        with self.lock:
            known = st.decisions.get(key)
        if known is not None:
            return known
        d = await st.run.abefore_tool(tool, args, None, call_id)
        with self.lock:
            st.decisions[key] = d
            while len(st.decisions) > _MAX_DECISIONS:
                st.decisions.popitem(last=False)
        return d

    def hold(self, tool: str, key: Tuple[str, str], d: Decision) -> None:
        """The SDK is asked to hold this call for approval: its answer will decide ``d``'s
        review."""
        if d.review_id is None:
            return
        with self.lock:
            self.held[key] = (tool, d.review_id)
            while len(self.held) > _MAX_DECISIONS:
                self.held.popitem(last=False)

    # -- hooks ---------------------------------------------------------------------------------
    async def on_start(self, context: Any, agent: Any) -> None:
        await self.settle(context)
        if self.inner is not None:
            await self.inner.on_start(context, agent)

    async def on_llm_start(self, context: Any, agent: Any, system_prompt: Any, input_items: Any) -> None:
        await self.settle(context)
        st = self.state(context)
        model, messages = _model_name(agent), Messages(lambda: _messages(system_prompt, input_items))
        d = await self.llm.abefore(st.run, model, messages)
        if not d.allowed:
            await self.llm.aend_refused(st.run, d)
            raise self.llm.refused(d)  # the model is not called; the app catches it
        st.model_call = (Timer(), messages, model, d.call_id)
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        call_id = getattr(context, "tool_call_id", None)
        if call_id is not None:
            st = self.state(context)
            key = _key(call_id, _args(getattr(context, "tool_arguments", "")))
            with self.lock:
                d = st.decisions.pop(key, None)
            if d is not None and d.allowed:
                await st.run.aafter_tool(d.call_id, output=_jsonable(result))
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        await self.settle(context)
        anchor = getattr(context, "usage", context)
        with self.lock:
            st = self.runs.get(id(anchor))
            if st is not None and st.anchor is anchor:
                del self.runs[id(anchor)]
            else:
                st = None
        if st is not None:
            await st.run.aend("aborted" if st.run.aborted else "success")
        if self.inner is not None:
            await self.inner.on_end(context, agent, output)

    async def on_handoff(self, context: Any, agent: Any, source: Any) -> None:
        if self.inner is not None:
            await self.inner.on_handoff(context, agent, source)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        st = self.state(context)
        started, st.model_call = st.model_call, None
        if started is not None:
            u = getattr(response, "usage", None)
            output = _jsonable(getattr(response, "output", None))
            self.llm.record(st.run, started[2],
                            usage(getattr(u, "input_tokens", None), getattr(u, "output_tokens", None), started[1], output),
                            started[0].ms(), started[3])
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)

    # -- per tool ------------------------------------------------------------------------------
    def needs_approval(self, tool: str, own: Any) -> Any:
        async def check(ctx: RunContextWrapper[Any], params: Dict[str, Any], call_id: str) -> bool:
            args = _jsonable(params)
            d = await self.decide(ctx, tool, args, call_id)
            if d.effect == "hitl":
                approved = getattr(ctx, "is_tool_approved", lambda *_: None)(tool, call_id)
                if approved is None:
                    # Asked now, before any answer: the answer will be for these arguments.
                    self.hold(tool, _key(call_id, args), d)
                return True
            # The tool's own setting: a bool, or a function (plain or async) of the same three.
            if callable(own):
                return bool(await _maybe_await(own(ctx, params, call_id)))
            return bool(own)

        return check

    def guardrail(self, tool: str) -> ToolInputGuardrail[Any]:
        async def check(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
            ctx = data.context
            call_id = ctx.tool_call_id
            args = _args(ctx.tool_arguments)
            key = _key(call_id, args)
            await self.settle(ctx)
            d = await self.decide(ctx, tool, args, call_id)
            if d.effect == "hitl":
                if _before_approval(ctx, tool, call_id):
                    # The SDK's pre-approval guardrails: let the approval interruption happen.
                    return ToolGuardrailFunctionOutput.allow(output_info=d.code)
                approved = getattr(ctx, "is_tool_approved", lambda *_: None)(tool, call_id)
                if approved and await self._answer(key, True, ctx):
                    # The SDK approved exactly this held call: its review is approved; the
                    # run goes on and the call is decided again (ALLOWED_HITL_APPROVED).
                    st = self.state(ctx)
                    with self.lock:
                        st.decisions.pop(key, None)
                    st.run._resume()
                    d = await self.decide(ctx, tool, args, call_id)
            if d.allowed:
                return ToolGuardrailFunctionOutput.allow(output_info=d.code)
            return ToolGuardrailFunctionOutput.reject_content(refusal_text(d), output_info=d.code)

        return ToolInputGuardrail(guardrail_function=check, name=f"toolgate:{tool}")


def _before_approval(ctx: Any, tool: str, call_id: str) -> bool:
    """Whether this guardrail runs before the SDK's approval step (the run config's
    ``pre_approval_tool_input_guardrails``, with the call not answered yet), not before the
    tool runs: then a held call is left to the approval interruption."""
    execution = getattr(getattr(ctx, "run_config", None), "tool_execution", None)
    if not getattr(execution, "pre_approval_tool_input_guardrails", False):
        return False
    is_approved = getattr(ctx, "is_tool_approved", None)
    return is_approved is not None and is_approved(tool, call_id) is None


def govern(
    agent: Agent[Any],
    engine: Engine,
    agent_id: Optional[str] = None,
    enduser: Optional[Mapping[str, Any]] = None,
    agent_tags: Iterable[str] = (),
    approver: Optional[Approver] = None,
    prices: Optional[Prices] = None,
) -> Agent[Any]:
    """A copy of ``agent`` whose function tools toolgate decides (see the module's doc).
    ``agent_tags`` are the agent's tags, which policies' ``agentSelector`` matches;
    ``approver(review, context)`` says whether an SDK answer may decide a toolgate review;
    ``prices`` (``{model: {"in": usd_per_M, "out": usd_per_M}}``) defaults to the engine's."""
    gov = _Governor(engine, agent_id or agent.name, enduser, agent.hooks, agent_tags, approver, prices)
    tools = []
    for t in agent.tools:
        if isinstance(t, FunctionTool):
            t = dataclasses.replace(
                t,
                needs_approval=gov.needs_approval(t.name, t.needs_approval),
                tool_input_guardrails=[*(t.tool_input_guardrails or []), gov.guardrail(t.name)],
            )
        tools.append(t)
    return agent.clone(tools=tools, hooks=gov)

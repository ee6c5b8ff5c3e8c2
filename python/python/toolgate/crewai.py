"""CrewAI: :func:`govern` puts a crew (or an agent) under toolgate through CrewAI's tool-call and
LLM-call hooks.

>>> crew = govern(Crew(agents=[support], tasks=[task]), engine)
>>> crew.kickoff()

One toolgate run per ``crew.kickoff()`` (started by a before-kickoff callback, ended by an
after-kickoff one; an agent governed alone has one run until :meth:`Governor.end`).

- **Tools** (``before_tool_call`` / ``after_tool_call``): a blocked call does not run; the agent
  (its model) reads ``toolgate blocked this call: <reason> [<CODE>, rule <id>]`` as the tool's
  result. A call held for human review (hitl) is put to a human through CrewAI's own
  ``request_human_input`` (the console prompt its hooks use): ``approve`` (or ``yes``)
  approves the toolgate review and the call runs; ``deny`` (or ``no``) denies it; anything
  else, or no console (``ask_human=False``, or standard input closed), leaves the review
  pending: the model reads the refusal naming the review and the agent stops before its next
  model call (:class:`ModelCallRefused`). The result of a call that ran is recorded.
- **Model** (``before_llm_call`` / ``after_llm_call``): the ``llm.before`` gate decides each
  model call; a refused call is not made: the hook raises :class:`ModelCallRefused` (CrewAI's
  ``HookAborted``, which CrewAI lets through to the caller of ``kickoff``) and the run ends
  ``budget_exceeded`` (a hitl leaves it paused). Each call's tokens (the LLM's usage counters
  before and after the call), model and duration are recorded (``llm.result``), with a cost
  from ``prices`` (or the engine's).

CrewAI runs its hooks fail-open (an exception a hook raises is swallowed and the call goes on);
toolgate's hooks therefore never let one escape: an error inside them refuses the call.
The hooks are installed once per process and dispatch to the governed crews and agents only.
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from collections import OrderedDict
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from crewai import Agent, Crew
from crewai.hooks import (
    HookAborted,
    LLMCallHookContext,
    ToolCallHookContext,
    register_after_llm_call_hook,
    register_after_tool_call_hook,
    register_before_llm_call_hook,
    register_before_tool_call_hook,
)

from . import Decision, Engine, Run, ToolgateError, _agent_tags, _jsonable, refusal_text
from ._llm import LlmGate, Messages, Prices, Timer, usage

__all__ = ["govern", "Governor", "ModelCallRefused"]

log = logging.getLogger("toolgate")

# Calls in flight remembered per governor (tool calls between their before and after hooks,
# model calls between theirs); the oldest forgotten past this many.
_MAX_INFLIGHT = 4096


class ModelCallRefused(HookAborted):  # type: ignore[misc]
    """toolgate refused a model call (``llm.before`` block or hitl, or a run paused for a
    review): CrewAI's ``HookAborted``, raised out of ``kickoff``. ``decision``: the decision,
    when there was one."""

    def __init__(self, reason: str, decision: Optional[Decision] = None) -> None:
        super().__init__(reason, source="toolgate")
        self.decision = decision


def _args_key(args: Any) -> str:
    return json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)


def _messages(messages: Any) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for m in messages or ():
        if isinstance(m, Mapping):
            out.append({"role": str(m.get("role", "user")), "kind": "text", "content": _jsonable(m.get("content"))})
        else:
            out.append({"role": "user", "kind": "text", "content": _jsonable(m)})
    return out


def _model(llm: Any) -> str:
    return str(getattr(llm, "model", None) or llm or "unknown")


def _counters(llm: Any) -> Tuple[Optional[int], Optional[int]]:
    """The LLM's lifetime usage counters (prompt, completion), if it keeps them."""
    try:
        s = llm.get_token_usage_summary()
        return int(s.prompt_tokens), int(s.completion_tokens)
    except Exception:
        return None, None


_Call = Tuple[Timer, Any, Tuple[Optional[int], Optional[int]], Any, str, str]


class Governor:
    """toolgate's hooks for one governed crew or agent (see the module's doc)."""

    def __init__(
        self,
        target: Any,
        engine: Engine,
        agent_id: Optional[str],
        enduser: Optional[Mapping[str, Any]],
        agent_tags: Iterable[str],
        prices: Optional[Prices],
        ask_human: bool,
    ) -> None:
        self.target = weakref.ref(target)
        self.is_crew = isinstance(target, Crew)
        agents = list(getattr(target, "agents", None) or []) if self.is_crew else [target]
        self.agent_ids = {id(a) for a in agents}
        self.engine = engine
        default_id = getattr(target, "name", None) if self.is_crew else getattr(target, "role", None)
        self.agent_id = agent_id or str(default_id or "crewai")
        self.enduser = enduser
        self.agent_tags = _agent_tags(agent_tags)
        self.llm = LlmGate(prices)
        self.ask_human = ask_human
        self._lock = threading.Lock()
        self._run: Optional[Run] = None
        # (thread, tool, args) -> allowed call id, or the refusal text the agent will read
        self._tools: "OrderedDict[Tuple[int, str, str], Tuple[Optional[str], Optional[str]]]" = OrderedDict()
        # (thread, executor or llm) -> (timer, llm, counters before, messages, model, gate call id)
        self._calls: "OrderedDict[Tuple[int, int], _Call]" = OrderedDict()

    # -- which calls are ours ----------------------------------------------------------------
    def owns(self, ctx: Any) -> bool:
        target = self.target()
        if target is None:
            return False
        crew = getattr(ctx, "crew", None)
        if crew is not None:
            return crew is target
        return id(getattr(ctx, "agent", None)) in self.agent_ids

    # -- the run ------------------------------------------------------------------------------
    def run(self) -> Run:
        """The current run (started when there is none, or the last one ended)."""
        with self._lock:
            if self._run is None or self._run.closed is not None:
                self._run = self.engine.start_run(self.agent_id, enduser=self.enduser, agent_tags=self.agent_tags)
            return self._run

    def start(self) -> None:
        """A kickoff starts: a run left open by a kickoff that failed is ended ``error``."""
        with self._lock:
            old, self._run = self._run, None
            self._tools.clear()
            self._calls.clear()
        if old is not None and old.closed is None:
            old.end("error")
        self.run()

    def end(self, status: Optional[str] = None) -> None:
        """Ends the current run (``aborted`` when paused by a review, else ``success``)."""
        self._flush_all()
        with self._lock:
            run, self._run = self._run, None
        if run is not None and run.closed is None:
            run.end(status or ("aborted" if run.aborted else "success"))

    # -- model calls --------------------------------------------------------------------------
    def _call_key(self, ctx: LLMCallHookContext) -> Tuple[int, int]:
        return threading.get_ident(), id(ctx.executor if ctx.executor is not None else ctx.llm)

    def before_llm(self, ctx: LLMCallHookContext) -> None:
        key = self._call_key(ctx)
        self._flush(key)  # a call whose after hook CrewAI skipped (a structured answer)
        run = self.run()
        model = _model(ctx.llm)
        snapshot = list(ctx.messages or ())
        messages = Messages(lambda: _messages(snapshot))
        d = self.llm.before(run, model, messages)
        if not d.allowed:
            self.llm.end_refused(run, d)
            raise ModelCallRefused(refusal_text(d), d)
        if run.aborted:
            raise ModelCallRefused("toolgate: this run waits for a human review; the agent stops here")
        with self._lock:
            self._calls[key] = (Timer(), ctx.llm, _counters(ctx.llm), messages, model, d.call_id)
            while len(self._calls) > _MAX_INFLIGHT:
                self._calls.popitem(last=False)

    def after_llm(self, ctx: LLMCallHookContext) -> None:
        self._flush(self._call_key(ctx), ctx.response)

    def _flush(self, key: Tuple[int, int], response: Any = None) -> None:
        with self._lock:
            started = self._calls.pop(key, None)
        if started is not None:
            self._record(started, response)

    def _flush_all(self) -> None:
        with self._lock:
            calls = list(self._calls.values())
            self._calls.clear()
        for started in calls:
            self._record(started, None)

    def _record(self, started: _Call, response: Any) -> None:
        timer, llm, before, messages, model, call_id = started
        after = _counters(llm)
        tin = tout = None
        if before[0] is not None and after[0] is not None and before[1] is not None and after[1] is not None:
            if (after[0] - before[0], after[1] - before[1]) != (0, 0):
                tin, tout = after[0] - before[0], after[1] - before[1]
        run = self._run
        if run is not None:
            self.llm.record(run, model, usage(tin, tout, messages, response), timer.ms(), call_id)

    # -- tool calls ---------------------------------------------------------------------------
    def _tool_key(self, ctx: ToolCallHookContext) -> Tuple[int, str, str]:
        return threading.get_ident(), str(ctx.tool_name), _args_key(_jsonable(ctx.tool_input))

    def _remember(self, key: Tuple[int, str, str], call_id: Optional[str], refusal: Optional[str]) -> None:
        with self._lock:
            self._tools[key] = (call_id, refusal)
            while len(self._tools) > _MAX_INFLIGHT:
                self._tools.popitem(last=False)

    def before_tool(self, ctx: ToolCallHookContext) -> Optional[bool]:
        run = self.run()
        key = self._tool_key(ctx)
        name, args = key[1], _jsonable(ctx.tool_input)
        tags = tuple(getattr(getattr(ctx, "tool", None), "tags", None) or ())
        d = run.before_tool(name, args, tags)
        if d.effect == "hitl" and d.review_id is not None and self.ask_human:
            answer = self._ask(ctx, d)
            if answer is not None:
                try:
                    (self.engine.reviews.approve if answer else self.engine.reviews.deny)(d.review_id)
                except ToolgateError:
                    pass  # decided meanwhile
                if run.aborted:
                    run._resume()
                d = run.before_tool(name, args, tags)
        if d.allowed:
            self._remember(key, d.call_id, None)
            return None
        self._remember(key, None, refusal_text(d))
        return False

    @staticmethod
    def _ask(ctx: ToolCallHookContext, d: Decision) -> Optional[bool]:
        """The human's answer through CrewAI's prompt: True approve, False deny, None none."""
        try:
            said = ctx.request_human_input(
                prompt=f"{refusal_text(d)}\nApprove this call? (approve / deny)",
                default_message="Type 'approve' or 'deny' (anything else leaves the review pending):",
            )
        except (EOFError, OSError, RuntimeError):
            return None
        said = (said or "").strip().lower()
        if said in ("approve", "approved", "yes", "y"):
            return True
        if said in ("deny", "denied", "no", "n", "reject"):
            return False
        return None

    def after_tool(self, ctx: ToolCallHookContext) -> Optional[str]:
        with self._lock:
            known = self._tools.pop(self._tool_key(ctx), None)
        if known is None:
            return None
        call_id, refusal = known
        if refusal is not None:
            return refusal  # what the model reads instead of CrewAI's "blocked by hook"
        run = self._run
        if call_id is None or run is None:
            return None
        raw = ctx.raw_tool_result if ctx.raw_tool_result is not None else ctx.tool_result
        after = run.after_tool(call_id, output=_jsonable(raw))
        return None if after.allowed else refusal_text(after)


# -- one set of process-wide hooks, dispatching to the governors ------------------------------

_lock = threading.Lock()
_governors: "OrderedDict[int, Governor]" = OrderedDict()
_installed = False
# Governed crews and agents tracked at once (a collected one is dropped; past this many the
# oldest governor is let go).
_MAX_GOVERNORS = 4096


def _find(ctx: Any) -> Optional[Governor]:
    with _lock:
        govs = list(_governors.values())
    for g in govs:
        if g.owns(ctx):
            return g
    return None


def _before_llm(ctx: LLMCallHookContext) -> Optional[bool]:
    g = _find(ctx)
    if g is None:
        return None
    try:
        g.before_llm(ctx)
    except HookAborted:
        raise
    except Exception as e:  # never fail open: CrewAI would swallow it and call the model
        log.error("toolgate: the model-call hook failed; refusing the call: %s", e)
        raise ModelCallRefused(f"toolgate could not decide this model call: {type(e).__name__}: {e}") from e
    return None


def _after_llm(ctx: LLMCallHookContext) -> Optional[str]:
    g = _find(ctx)
    if g is not None:
        try:
            g.after_llm(ctx)
        except Exception as e:
            log.warning("toolgate: recording a model call failed: %s", e)
    return None


def _before_tool(ctx: ToolCallHookContext) -> Optional[bool]:
    g = _find(ctx)
    if g is None:
        return None
    try:
        return g.before_tool(ctx)
    except Exception as e:  # never fail open
        log.error("toolgate: the tool-call hook failed; blocking the call: %s", e)
        return False


def _after_tool(ctx: ToolCallHookContext) -> Optional[str]:
    g = _find(ctx)
    if g is None:
        return None
    try:
        return g.after_tool(ctx)
    except Exception as e:
        log.error("toolgate: recording a tool result failed; withholding it: %s", e)
        return f"toolgate could not record this call's result: {type(e).__name__}"


def _install() -> None:
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    register_before_llm_call_hook(_before_llm)
    register_after_llm_call_hook(_after_llm)
    register_before_tool_call_hook(_before_tool)
    register_after_tool_call_hook(_after_tool)


def _forget(key: int) -> None:
    with _lock:
        _governors.pop(key, None)


def govern(
    crew_or_agent: Any,
    engine: Engine,
    agent_id: Optional[str] = None,
    enduser: Optional[Mapping[str, Any]] = None,
    agent_tags: Iterable[str] = (),
    prices: Optional[Prices] = None,
    ask_human: bool = True,
) -> Any:
    """Puts ``crew_or_agent`` (a ``Crew`` or an ``Agent``) under toolgate and returns it (see the
    module's doc). ``agent_id``: default the crew's name or the agent's role; ``prices``:
    ``{model: {"in": usd_per_M, "out": usd_per_M}}`` (default: the engine's);
    ``ask_human``: put hitl calls to a human through
    CrewAI's console prompt (``False``: refuse them, naming the review)."""
    if not isinstance(crew_or_agent, (Crew, Agent)):
        raise TypeError(f"govern: expected a crewai Crew or Agent, got {type(crew_or_agent).__name__}")
    g = Governor(crew_or_agent, engine, agent_id, enduser, agent_tags, prices, ask_human)
    if isinstance(crew_or_agent, Crew):

        def started(inputs: Any) -> Any:
            g.start()
            return inputs

        def ended(output: Any) -> Any:
            g.end()
            return output

        crew_or_agent.before_kickoff_callbacks.append(started)
        crew_or_agent.after_kickoff_callbacks.append(ended)
    key = id(crew_or_agent)
    with _lock:
        _governors[key] = g
        while len(_governors) > _MAX_GOVERNORS:
            _governors.popitem(last=False)
    weakref.finalize(crew_or_agent, _forget, key)
    _install()
    return crew_or_agent


def governor(crew_or_agent: Any) -> Optional[Governor]:
    """The governor of a governed crew or agent (its ``run()``, ``end()``)."""
    with _lock:
        g = _governors.get(id(crew_or_agent))
    return g if g is not None and g.target() is crew_or_agent else None

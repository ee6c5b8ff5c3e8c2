"""Google ADK: :class:`ToolgatePlugin` governs every tool and model call of a ``Runner``.

>>> app = App(name="support", root_agent=agent, plugins=[ToolgatePlugin(engine)])
>>> runner = Runner(app=app, session_service=sessions)

One toolgate run per invocation (``runner.run_async(...)``), ended when the invocation ends.

- **Tools** (``before_tool_callback``): a blocked call does not run; the model reads
  ``{"error": "toolgate blocked this call: <reason> [<CODE>, rule <id>]"}`` as the tool's
  response. A call held for human review (hitl) goes through ADK's own tool confirmation: the
  invocation yields an ``adk_request_confirmation`` function call (its ``toolConfirmation.payload``
  names the toolgate review, ``toolgateReviewId``) and stops; answering it with a
  ``FunctionResponse(name="adk_request_confirmation", response={"confirmed": True})`` approves
  the toolgate review raised for exactly that call's arguments and the call runs;
  ``{"confirmed": False}`` denies it. ``after_tool_callback`` records the result (an
  after-phase block replaces it with the refusal).
- **Model** (``before_model_callback``): the ``llm.before`` gate decides each model call; a
  refused call is not made: the invocation ends with a model turn reading the refusal, and the
  run ends ``budget_exceeded`` (a hitl leaves it paused for its review).
  ``after_model_callback`` records the call's tokens (``usage_metadata``), model and duration
  (``llm.result``), with its cost from ``prices`` (or the engine's).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from google.adk.agents.callback_context import CallbackContext
from google.adk.agents.invocation_context import InvocationContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from . import Decision, Engine, Run, ToolgateError, _agent_tags, _jsonable, refusal_text
from ._llm import LlmGate, Messages, Prices, Timer, usage

__all__ = ["ToolgatePlugin"]

# Invocations tracked at once (the oldest, never ended, is let go past this many); held calls.
_MAX_RUNS = 4096
_MAX_HELD = 4096


def _contents(contents: Iterable[types.Content]) -> List[Dict[str, Any]]:
    """An ADK request's contents as toolgate messages: role, kind, content."""
    out: List[Dict[str, Any]] = []
    for c in contents:
        for p in c.parts or ():
            if p.text is not None:
                out.append({"role": c.role or "user", "kind": "text", "content": p.text})
            elif p.function_call is not None:
                fc = p.function_call
                out.append({"role": c.role or "model", "kind": "tool_call",
                            "content": _jsonable({"name": fc.name, "args": fc.args})})
            elif p.function_response is not None:
                fr = p.function_response
                out.append({"role": c.role or "user", "kind": "tool_result",
                            "content": _jsonable({"name": fr.name, "response": fr.response})})
    return out


def _text(content: Optional[types.Content]) -> str:
    if content is None:
        return ""
    return "".join(p.text or "" for p in content.parts or ())


class ToolgatePlugin(BasePlugin):
    """An ADK plugin deciding every tool and model call with ``engine`` (see the module's doc).

    ``agent_id``: the toolgate agent id (default: the invocation's root agent's name);
    ``enduser``: ``{"id", "tags"}``; ``agent_tags``: matched by policies' ``agentSelector``;
    ``prices``: ``{model: {"in": usd_per_M, "out": usd_per_M}}`` (default: the engine's);
    (each model call's messages go to the gate, and to the trail as ``llm.messages`` when the
    engine has ``record_messages=True``)."""

    def __init__(
        self,
        engine: Engine,
        agent_id: Optional[str] = None,
        enduser: Optional[Mapping[str, Any]] = None,
        agent_tags: Iterable[str] = (),
        prices: Optional[Prices] = None,
        name: str = "toolgate",
    ) -> None:
        super().__init__(name)
        self.engine = engine
        self.agent_id = agent_id
        self.enduser = enduser
        self.agent_tags = _agent_tags(agent_tags)
        self.llm = LlmGate(prices)
        self._lock = threading.Lock()
        self._runs: "OrderedDict[str, Run]" = OrderedDict()
        # (invocation, agent) -> (timer, messages, gate call id) of the model call under way
        self._calls: Dict[Tuple[str, str], Tuple[Timer, Any, str]] = {}
        # function call id -> (review id, args key): the review a confirmation answers
        self._held: "OrderedDict[str, Tuple[str, str]]" = OrderedDict()
        # (invocation, function call id) -> toolgate call id, for calls let through to run
        self._allowed: "OrderedDict[Tuple[str, str], str]" = OrderedDict()

    # -- runs ---------------------------------------------------------------------------------
    def _run(self, invocation_id: str, root: Any) -> Run:
        with self._lock:
            run = self._runs.get(invocation_id)
            if run is None:
                agent_id = self.agent_id or (root.name if root is not None else "adk-agent")
                run = self.engine.start_run(agent_id, enduser=self.enduser, agent_tags=self.agent_tags)
                self._runs[invocation_id] = run
                while len(self._runs) > _MAX_RUNS:
                    self._runs.popitem(last=False)
            return run

    def _ctx_run(self, ctx: Any) -> Run:
        ic = getattr(ctx, "_invocation_context", None)
        return self._run(str(ctx.invocation_id), getattr(ic, "agent", None))

    async def before_run_callback(self, *, invocation_context: InvocationContext) -> Optional[types.Content]:
        self._run(invocation_context.invocation_id, invocation_context.agent)
        return None

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        with self._lock:
            run = self._runs.pop(invocation_context.invocation_id, None)
            for k in [k for k in self._calls if k[0] == invocation_context.invocation_id]:
                del self._calls[k]
            for a in [a for a in self._allowed if a[0] == invocation_context.invocation_id]:
                del self._allowed[a]
        if run is not None and run.closed is None:
            await run.aend("aborted" if run.aborted else "success")

    # -- model calls --------------------------------------------------------------------------
    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> Optional[LlmResponse]:
        run = self._ctx_run(callback_context)
        model = llm_request.model or "unknown"
        messages = Messages(lambda: _contents(llm_request.contents))
        d = await self.llm.abefore(run, model, messages)
        if not d.allowed:
            await self.llm.aend_refused(run, d)
            return LlmResponse(
                content=types.Content(role="model", parts=[types.Part(text=refusal_text(d))]),
                turn_complete=True,
                custom_metadata={"toolgateCode": d.code, "toolgateReviewId": d.review_id},
            )
        with self._lock:
            self._calls[(callback_context.invocation_id, callback_context.agent_name)] = (Timer(), messages, d.call_id)
            while len(self._calls) > _MAX_RUNS:  # invocations that died without after_run
                del self._calls[next(iter(self._calls))]
        return None

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> Optional[LlmResponse]:
        if llm_response.partial:
            return None  # streamed chunks: the final response carries the usage
        with self._lock:
            started = self._calls.pop((callback_context.invocation_id, callback_context.agent_name), None)
        if started is None:
            return None  # not a call this plugin let through (e.g. a refusal it answered)
        run = self._ctx_run(callback_context)
        um = llm_response.usage_metadata
        u = usage(getattr(um, "prompt_token_count", None), getattr(um, "candidates_token_count", None),
                  started[1], _text(llm_response.content))
        model = llm_response.model_version or "unknown"
        self.llm.record(run, str(model), u, started[0].ms(), started[2])
        return None

    async def on_model_error_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> Optional[LlmResponse]:
        with self._lock:
            started = self._calls.pop((callback_context.invocation_id, callback_context.agent_name), None)
        if started is not None:
            # A failed call is still a call: what was sent counts, nothing came back.
            run = self._ctx_run(callback_context)
            self.llm.record(run, llm_request.model or "unknown", usage(None, 0, started[1]), started[0].ms(), started[2])
        return None

    # -- tool calls ---------------------------------------------------------------------------
    @staticmethod
    def _key(args: Any) -> str:
        import json

        return json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)

    def _hold(self, call_id: str, d: Decision, args: Any) -> None:
        if d.review_id is None:
            return
        with self._lock:
            self._held[call_id] = (d.review_id, self._key(args))
            while len(self._held) > _MAX_HELD:
                self._held.popitem(last=False)

    def _answer(self, call_id: str, d: Decision, args: Any, confirmed: bool) -> bool:
        """Applies an ADK confirmation to the review held for exactly this call; whether it
        was applied."""
        with self._lock:
            held = self._held.get(call_id)
            if held is None or held != (d.review_id, self._key(args)):
                return False
            del self._held[call_id]
        try:
            if confirmed:
                self.engine.reviews.approve(held[0])
            else:
                self.engine.reviews.deny(held[0])
        except ToolgateError:
            pass  # decided already
        return True

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: Dict[str, Any], tool_context: ToolContext
    ) -> Optional[Dict[str, Any]]:
        run = self._ctx_run(tool_context)
        args = _jsonable(tool_args)
        call_id = tool_context.function_call_id
        d = await run.abefore_tool(tool.name, args, None, call_id)
        confirmation = tool_context.tool_confirmation
        if d.effect == "hitl" and confirmation is not None and call_id is not None:
            if self._answer(call_id, d, args, bool(confirmation.confirmed)):
                if run.aborted:
                    run._resume()
                d = await run.abefore_tool(tool.name, args, None, call_id)
        if d.allowed:
            if call_id is not None:
                with self._lock:
                    self._allowed[(tool_context.invocation_id, call_id)] = d.call_id
                    while len(self._allowed) > _MAX_HELD:
                        self._allowed.popitem(last=False)
            return None
        if d.effect == "hitl" and confirmation is None and call_id is not None:
            self._hold(call_id, d, args)
            tool_context.request_confirmation(
                hint=refusal_text(d),
                payload={"toolgateReviewId": d.review_id, "tool": tool.name, "args": args},
            )
            tool_context.actions.skip_summarization = True
        return {"error": refusal_text(d)}

    async def after_tool_callback(
        self, *, tool: BaseTool, tool_args: Dict[str, Any], tool_context: ToolContext, result: Dict[str, Any]
    ) -> Optional[Dict[str, Any]]:
        decided = self._ran(tool_context)
        if decided is None:
            return None  # a call this plugin refused: it never ran
        run = self._ctx_run(tool_context)
        after = await run.aafter_tool(decided, output=_jsonable(result))
        if not after.allowed:
            return {"error": refusal_text(after)}
        return None

    async def on_tool_error_callback(
        self, *, tool: BaseTool, tool_args: Dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> Optional[Dict[str, Any]]:
        decided = self._ran(tool_context)
        if decided is not None:
            run = self._ctx_run(tool_context)
            await run.aafter_tool(decided, error=f"{type(error).__name__}: {error}")
        return None

    def _ran(self, tool_context: ToolContext) -> Optional[str]:
        """The toolgate call id of a call this plugin let through (forgotten once asked)."""
        call_id = tool_context.function_call_id
        if call_id is None:
            return None
        with self._lock:
            return self._allowed.pop((tool_context.invocation_id, call_id), None)

"""Claude Agent SDK: :func:`hooks` gives ``PreToolUse`` / ``PostToolUse`` hook matchers.

>>> options = ClaudeAgentOptions(hooks=hooks(engine, "coding-agent"))

One toolgate run per session (``session_id``), until the session's ``Stop`` hook (or
:meth:`ToolgateHooks.end`) ends it: a hitl pauses that run (later calls are
``BLOCKED_RUN_ABORTED``) until the review is answered, and it goes on, caps and all, rather
than a fresh run starting. ``PreToolUse``: a blocked call or one held for
human review (hitl) is answered ``permissionDecision: "deny"`` with
``toolgate blocked this call: <reason> [<CODE>, rule <id>]`` (naming the review for hitl);
allowed calls get no decision from toolgate (the SDK's own permissions still apply).
``PostToolUse`` records the tool's result (and an after-phase block or hitl is reported to
Claude as ``decision: "block"`` with the same text).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set

from claude_agent_sdk import HookContext, HookInput, HookJSONOutput, HookMatcher

from . import _agent_tags, Engine, Run, _jsonable, refusal_text

__all__ = ["hooks", "ToolgateHooks"]

# Sessions tracked at once (the oldest, never ended, is let go past this many).
_MAX_SESSIONS = 4096


class ToolgateHooks:
    """The hook callbacks (``pre_tool_use``, ``post_tool_use``) and their runs by session."""

    def __init__(
        self,
        engine: Engine,
        agent_id: str,
        enduser: Optional[Mapping[str, Any]] = None,
        agent_tags: Iterable[str] = (),
    ) -> None:
        self.engine = engine
        self.agent_id = agent_id
        self.enduser = enduser
        self.agent_tags = _agent_tags(agent_tags)
        self._runs: "OrderedDict[str, Run]" = OrderedDict()
        # session id -> the reviews that paused its run
        self._held: Dict[str, Set[str]] = {}
        self._lock = threading.Lock()

    def run(self, session_id: str) -> Run:
        """The session's run: one run until the session ends (a hitl pauses it, never
        replaces it); it goes on once every review that paused it has been answered."""
        with self._lock:
            run = self._runs.get(session_id)
            if run is None or run.closed is not None:
                run = self.engine.start_run(self.agent_id, enduser=self.enduser, agent_tags=self.agent_tags)
                self._runs[session_id] = run
                self._held.pop(session_id, None)
                while len(self._runs) > _MAX_SESSIONS:
                    old, _ = self._runs.popitem(last=False)
                    self._held.pop(old, None)
            held = set(self._held.get(session_id, ()))
        if run.aborted and held:
            pending = {r["id"] for r in self.engine.reviews.list() if r.get("status") == "pending"}
            if not held & pending:
                with self._lock:
                    self._held.pop(session_id, None)
                run._resume()
        return run

    async def end(self, session_id: str, status: str = "success") -> None:
        """Ends the session's run (also done by a ``Stop`` hook, see :func:`hooks`)."""
        with self._lock:
            run = self._runs.pop(session_id, None)
            self._held.pop(session_id, None)
        if run is not None:
            await run.aend(status)

    async def pre_tool_use(self, hook_input: HookInput, tool_use_id: Optional[str], context: HookContext) -> HookJSONOutput:
        input: Dict[str, Any] = dict(hook_input)
        run = self.run(input.get("session_id", ""))
        call_id = tool_use_id or input.get("tool_use_id")
        d = await run.abefore_tool(input["tool_name"], _jsonable(input.get("tool_input") or {}), None, call_id)
        if d.effect == "hitl" and d.review_id is not None:
            with self._lock:
                self._held.setdefault(input.get("session_id", ""), set()).add(d.review_id)
        if d.allowed:
            return {}
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": refusal_text(d),
            }
        }

    async def post_tool_use(self, hook_input: HookInput, tool_use_id: Optional[str], context: HookContext) -> HookJSONOutput:
        input: Dict[str, Any] = dict(hook_input)
        run = self.run(input.get("session_id", ""))
        call_id = tool_use_id or input.get("tool_use_id")
        if call_id is None:
            return {}
        after = await run.aafter_tool(call_id, output=_jsonable(input.get("tool_response")),
                                      duration_ms=input.get("duration_ms"))
        if not after.allowed:
            return {"decision": "block", "reason": refusal_text(after)}
        return {}

    async def stop(self, hook_input: HookInput, tool_use_id: Optional[str], context: HookContext) -> HookJSONOutput:
        await self.end(str(dict(hook_input).get("session_id", "")))
        return {}


def hooks(
    engine: Engine,
    agent_id: str,
    enduser: Optional[Mapping[str, Any]] = None,
    agent_tags: Iterable[str] = (),
) -> Dict[str, List[HookMatcher]]:
    """Hook matchers for ``ClaudeAgentOptions(hooks=...)``: every tool's calls go through toolgate.
    ``agent_tags`` are the agent's tags, which policies' ``agentSelector`` matches."""
    h = ToolgateHooks(engine, agent_id, enduser, agent_tags)
    return {
        "PreToolUse": [HookMatcher(matcher=None, hooks=[h.pre_tool_use])],
        "PostToolUse": [HookMatcher(matcher=None, hooks=[h.post_tool_use])],
        "Stop": [HookMatcher(matcher=None, hooks=[h.stop])],
    }

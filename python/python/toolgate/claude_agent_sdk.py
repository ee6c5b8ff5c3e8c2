"""Claude Agent SDK: :func:`hooks` gives ``PreToolUse`` / ``PostToolUse`` hook matchers.

>>> options = ClaudeAgentOptions(hooks=hooks(engine, "coding-agent"))

One toolgate run per session (``session_id``). ``PreToolUse``: a blocked call or one held for
human review (hitl) is answered ``permissionDecision: "deny"`` with
``toolgate blocked this call: <reason> [<CODE>, rule <id>]`` (naming the review for hitl);
allowed calls get no decision from toolgate (the SDK's own permissions still apply).
``PostToolUse`` records the tool's result (and an after-phase block or hitl is reported to
Claude as ``decision: "block"`` with the same text).
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Iterable, List, Mapping, Optional

from claude_agent_sdk import HookContext, HookInput, HookJSONOutput, HookMatcher

from . import _agent_tags, Engine, Run, _jsonable, refusal_text

__all__ = ["hooks", "ToolgateHooks"]


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
        self._runs: Dict[str, Run] = {}
        self._lock = threading.Lock()

    def run(self, session_id: str) -> Run:
        with self._lock:
            run = self._runs.get(session_id)
            if run is None or run.aborted:
                run = self.engine.start_run(self.agent_id, enduser=self.enduser, agent_tags=self.agent_tags)
                self._runs[session_id] = run
            return run

    async def end(self, session_id: str, status: str = "success") -> None:
        """Ends the session's run (also done by a ``Stop`` hook, see :func:`hooks`)."""
        with self._lock:
            run = self._runs.pop(session_id, None)
        if run is not None:
            await run.aend(status)

    async def pre_tool_use(self, hook_input: HookInput, tool_use_id: Optional[str], context: HookContext) -> HookJSONOutput:
        input: Dict[str, Any] = dict(hook_input)
        run = self.run(input.get("session_id", ""))
        call_id = tool_use_id or input.get("tool_use_id")
        d = await run.abefore_tool(input["tool_name"], _jsonable(input.get("tool_input") or {}), None, call_id)
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
        if after is not None and not after.allowed:
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

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

**Model calls** happen inside Claude Code, where a hook cannot see them; toolgate gates them at
the two points every model call of a turn follows, and reads their usage from the session's
transcript:

- the ``llm.before`` gate decides before the turn's first model call (``UserPromptSubmit``:
  a refused prompt is blocked, ``decision: "block"``) and before each model call that follows
  a tool result (``PostToolUse``: a refusal stops Claude, ``continue: false`` with the
  refusal as ``stopReason``); a block ends the run ``budget_exceeded``, a hitl pauses it;
- each assistant message in the transcript (``transcript_path``, read incrementally at every
  hook, at most 8 MiB a read) is recorded once (by message id) as ``llm.result``: its model,
  its input tokens (``input_tokens`` plus cache creation and cache reads) and output tokens,
  with a cost from ``prices`` (or the engine's).
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import threading
from collections import OrderedDict
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from claude_agent_sdk import HookContext, HookInput, HookJSONOutput, HookMatcher

from . import _agent_tags, Engine, Run, _jsonable, refusal_text
from ._llm import LlmGate, Prices, usage

__all__ = ["hooks", "ToolgateHooks"]

# Sessions tracked at once (the oldest, never ended, is let go past this many).
_MAX_SESSIONS = 4096
# Transcript bytes read per hook, and message ids remembered per session (to record each once).
_MAX_READ = 8 * 1024 * 1024
_MAX_SEEN = 65536


def _input_tokens(u: Mapping[str, Any]) -> Any:
    parts = [u.get("input_tokens"), u.get("cache_creation_input_tokens"), u.get("cache_read_input_tokens")]
    nums = [p for p in parts if isinstance(p, (int, float)) and not isinstance(p, bool)]
    return sum(nums) if nums else None


class _Transcript:
    """What has been read of one session's transcript."""

    def __init__(self) -> None:
        self.offset = 0
        self.seen: "OrderedDict[str, None]" = OrderedDict()
        self.model: Optional[str] = None


def _read_new(path: str, offset: int) -> Tuple[List[bytes], int]:
    """Complete lines appended to ``path`` since ``offset`` (at most ``_MAX_READ`` bytes)."""
    try:
        # Non-blocking, and regular files only: a FIFO or device named as the transcript must
        # not hang the hook.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return [], offset
    try:
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                return [], offset
            size = st.st_size
            if size < offset:
                offset = 0  # a new file (rotated or rewritten)
            f.seek(offset)
            data = f.read(_MAX_READ)
    except OSError:
        return [], offset
    end = data.rfind(b"\n")
    if end < 0:
        # no complete line yet, or one line longer than a read: skip past it when huge
        return [], offset + (len(data) if len(data) >= _MAX_READ else 0)
    return data[: end + 1].splitlines(), offset + end + 1


class ToolgateHooks:
    """The hook callbacks (``pre_tool_use``, ``post_tool_use``) and their runs by session."""

    def __init__(
        self,
        engine: Engine,
        agent_id: str,
        enduser: Optional[Mapping[str, Any]] = None,
        agent_tags: Iterable[str] = (),
        prices: Optional[Prices] = None,
        model: Optional[str] = None,
    ) -> None:
        self.engine = engine
        self.llm = LlmGate(prices)
        self.model = model
        self._transcripts: "OrderedDict[str, _Transcript]" = OrderedDict()
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
            self._transcripts.pop(session_id, None)
        if run is not None and run.closed is None:
            await run.aend(status)

    # -- model calls --------------------------------------------------------------------------
    async def _usage(self, input: Mapping[str, Any], run: Run) -> None:
        """Records the assistant messages the transcript gained since the last hook."""
        path = input.get("transcript_path")
        if not isinstance(path, str) or not path:
            return
        sid = str(input.get("session_id", ""))
        with self._lock:
            t = self._transcripts.get(sid)
            if t is None:
                t = self._transcripts[sid] = _Transcript()
                while len(self._transcripts) > _MAX_SESSIONS:
                    self._transcripts.popitem(last=False)
            offset = t.offset
        lines, new_offset = await asyncio.to_thread(_read_new, path, offset)
        with self._lock:
            if t.offset != offset:
                return  # another hook of this session read them meanwhile
            t.offset = new_offset
            calls = []
            for line in lines:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                msg = e.get("message") if isinstance(e, dict) and e.get("type") == "assistant" else None
                if not isinstance(msg, dict):
                    continue
                mid = str(msg.get("id") or e.get("uuid") or "")
                if not mid or mid in t.seen:
                    continue  # one model call is written as several lines (one per block)
                t.seen[mid] = None
                while len(t.seen) > _MAX_SEEN:
                    t.seen.popitem(last=False)
                model = msg.get("model") if isinstance(msg.get("model"), str) else None
                t.model = model or t.model
                raw_usage = msg.get("usage")
                u: Dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
                calls.append((model or self.model or "claude", u, msg.get("content")))
        for model, u, content in calls:
            self.llm.record(run, model, usage(_input_tokens(u), u.get("output_tokens"), None, content), None)

    async def _gate(self, input: Mapping[str, Any], run: Run, messages: Any) -> Optional[str]:
        """The ``llm.before`` decision for the model call about to follow: the refusal text,
        or None when it may go on."""
        if run.closed is not None:
            return None
        with self._lock:
            t = self._transcripts.get(str(input.get("session_id", "")))
            model = self.model or (t.model if t is not None else None) or "claude"
        d = await self.llm.abefore(run, model, messages)
        if d.allowed:
            return None
        await self.llm.aend_refused(run, d)
        return refusal_text(d)

    async def user_prompt_submit(self, hook_input: HookInput, tool_use_id: Optional[str], context: HookContext) -> HookJSONOutput:
        input: Dict[str, Any] = dict(hook_input)
        run = self.run(input.get("session_id", ""))
        await self._usage(input, run)
        refused = await self._gate(input, run, [{"role": "user", "kind": "text", "content": _jsonable(input.get("prompt"))}])
        if refused is None:
            return {}
        return {"decision": "block", "reason": refused}

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
        output = _jsonable(input.get("tool_response"))
        after = await run.aafter_tool(call_id, output=output, duration_ms=input.get("duration_ms"))
        await self._usage(input, run)
        answer: Dict[str, Any] = {}
        if not after.allowed:
            answer = {"decision": "block", "reason": refusal_text(after)}
        refused = await self._gate(input, run, [{"role": "tool", "kind": "tool_result", "content": output}])
        if refused is not None:
            answer.update({"continue": False, "stopReason": refused})
        return answer  # type: ignore[return-value]

    async def stop(self, hook_input: HookInput, tool_use_id: Optional[str], context: HookContext) -> HookJSONOutput:
        input: Dict[str, Any] = dict(hook_input)
        sid = str(input.get("session_id", ""))
        with self._lock:
            run = self._runs.get(sid)
        if run is not None:
            await self._usage(input, run)
        await self.end(sid, "aborted" if run is not None and run.aborted else "success")
        return {}

    def matchers(self) -> Dict[str, List[HookMatcher]]:
        """Hook matchers for ``ClaudeAgentOptions(hooks=...)``."""
        return {
            "UserPromptSubmit": [HookMatcher(matcher=None, hooks=[self.user_prompt_submit])],
            "PreToolUse": [HookMatcher(matcher=None, hooks=[self.pre_tool_use])],
            "PostToolUse": [HookMatcher(matcher=None, hooks=[self.post_tool_use])],
            "Stop": [HookMatcher(matcher=None, hooks=[self.stop])],
        }


def hooks(
    engine: Engine,
    agent_id: str,
    enduser: Optional[Mapping[str, Any]] = None,
    agent_tags: Iterable[str] = (),
    prices: Optional[Prices] = None,
    model: Optional[str] = None,
) -> Dict[str, List[HookMatcher]]:
    """Hook matchers for ``ClaudeAgentOptions(hooks=...)``: every tool's calls go through toolgate,
    every model call through the ``llm.before`` gate, and the transcript's usage is recorded.
    ``agent_tags`` are the agent's tags, which policies' ``agentSelector`` matches; ``prices``
    defaults to the engine's; ``model``: the model's name for the gate
    (default: the one the transcript names)."""
    return ToolgateHooks(engine, agent_id, enduser, agent_tags, prices, model).matchers()

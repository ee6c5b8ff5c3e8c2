"""Claude Agent SDK: the hooks run through the SDK's own control protocol (ClaudeSDKClient,
Query, hook registration and dispatch), with a Transport that plays the Claude Code CLI's side
of that protocol in-process: the CLI itself needs the network, so no model runs here."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Dict, List, Optional

import pytest

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient
from claude_agent_sdk._internal.transport import Transport

import toolgate
from toolgate.claude_agent_sdk import hooks
from policies_for_tests import GATE, policy, rule


class FakeCLI(Transport):
    """The CLI's side of the SDK control protocol: answers `initialize`, sends `hook_callback`s."""

    def __init__(self) -> None:
        self.out: "asyncio.Queue[Optional[Dict[str, Any]]]" = asyncio.Queue()
        self.hooks: Dict[str, Any] = {}
        self.answers: Dict[str, "asyncio.Future[Dict[str, Any]]"] = {}
        self.n = 0
        self.ready = False

    async def connect(self) -> None:
        self.ready = True

    async def write(self, data: str) -> None:
        for line in data.splitlines():
            msg = json.loads(line)
            if msg.get("type") == "control_request" and msg["request"]["subtype"] == "initialize":
                self.hooks = msg["request"]["hooks"] or {}
                await self.out.put({"type": "control_response", "response": {
                    "subtype": "success", "request_id": msg["request_id"], "response": {"commands": []}}})
            elif msg.get("type") == "control_response":
                r = msg["response"]
                self.answers[r["request_id"]].set_result(r)

    async def read_messages(self) -> AsyncIterator[Dict[str, Any]]:  # type: ignore[override]
        while True:
            m = await self.out.get()
            if m is None:
                return
            yield m

    async def close(self) -> None:
        self.ready = False
        await self.out.put(None)

    def is_ready(self) -> bool:
        return self.ready

    async def end_input(self) -> None:
        pass

    async def hook(self, event: str, input: Dict[str, Any], tool_use_id: Optional[str]) -> Dict[str, Any]:
        """Fires every callback registered for `event`, as the CLI does; returns the last answer."""
        answer: Dict[str, Any] = {}
        for matcher in self.hooks.get(event, []):
            for cb in matcher["hookCallbackIds"]:
                self.n += 1
                rid = f"cli_{self.n}"
                self.answers[rid] = asyncio.get_running_loop().create_future()
                await self.out.put({"type": "control_request", "request_id": rid, "request": {
                    "subtype": "hook_callback", "callback_id": cb, "input": input, "tool_use_id": tool_use_id}})
                r = await asyncio.wait_for(self.answers[rid], 10)
                assert r["subtype"] == "success", r
                answer = r["response"]
        return answer


def pre(tool: str, args: Dict[str, Any], id: str) -> Dict[str, Any]:
    return {"hook_event_name": "PreToolUse", "session_id": "s1", "transcript_path": "/dev/null", "cwd": "/",
            "tool_name": tool, "tool_input": args, "tool_use_id": id}


def post(tool: str, args: Dict[str, Any], out: Any, id: str) -> Dict[str, Any]:
    return {"hook_event_name": "PostToolUse", "session_id": "s1", "transcript_path": "/dev/null", "cwd": "/",
            "tool_name": tool, "tool_input": args, "tool_response": out, "tool_use_id": id, "duration_ms": 12}


async def connected(engine: toolgate.Engine) -> tuple[ClaudeSDKClient, FakeCLI]:
    cli = FakeCLI()
    client = ClaudeSDKClient(options=ClaudeAgentOptions(hooks=hooks(engine, "claude-bot")), transport=cli)
    await client.connect()
    assert set(cli.hooks) == {"PreToolUse", "PostToolUse", "Stop"}
    return client, cli


async def test_pre_tool_use_allows_blocks_and_holds() -> None:
    engine = toolgate.Engine(GATE)
    client, cli = await connected(engine)
    try:
        assert await cli.hook("PreToolUse", pre("refund", {"amount": 5}, "t1"), "t1") == {}
        assert await cli.hook("PostToolUse", post("refund", {"amount": 5}, {"ok": True}, "t1"), "t1") == {}
        blocked = await cli.hook("PreToolUse", pre("deleteUser", {"id": 1}, "t2"), "t2")
        out = blocked["hookSpecificOutput"]
        assert out["hookEventName"] == "PreToolUse" and out["permissionDecision"] == "deny"
        assert out["permissionDecisionReason"] == "toolgate blocked this call: Deleting is not allowed. [BLOCKED_RULE, rule no-delete]"
        held = (await cli.hook("PreToolUse", pre("refund", {"amount": 900}, "t3"), "t3"))["hookSpecificOutput"]
        [review] = engine.reviews.pending()
        assert held["permissionDecision"] == "deny" and review["id"] in held["permissionDecisionReason"]
        engine.reviews.approve(review["id"])
        # The session's run was stopped by the hitl; the next call starts a new run, and the
        # approved call goes through.
        assert await cli.hook("PreToolUse", pre("refund", {"amount": 900}, "t4"), "t4") == {}
        assert await cli.hook("Stop", {"hook_event_name": "Stop", "session_id": "s1", "transcript_path": "", "cwd": "/",
                                       "stop_hook_active": False}, None) == {}
    finally:
        await client.disconnect()


async def test_post_tool_use_after_phase_block_is_reported(tmp_path: Any) -> None:
    engine = toolgate.Engine(policy(rule("big-output", {"kind": "metricWindow", "scope": "run", "metric": {"kind": "inbuilt", "key": "bytes_out"},
                                                    "aggregate": "sum", "windowSeconds": 60, "op": "gt", "value": 10}, "block",
                                         phase="tool.after", reason="Too much data out.")),
                             audit=str(tmp_path))
    client, cli = await connected(engine)
    try:
        assert await cli.hook("PreToolUse", pre("read", {"p": 1}, "t1"), "t1") == {}
        r = await cli.hook("PostToolUse", post("read", {"p": 1}, "x" * 50, "t1"), "t1")
        assert r["decision"] == "block" and "Too much data out." in r["reason"]
    finally:
        await client.disconnect()
    engine.shutdown()
    kinds = [json.loads(l)["kind"] for f in tmp_path.glob("*.jsonl") for l in f.read_text().splitlines()]
    assert "tool.result" in kinds


# -- issue 33: a session is one run until it ends -------------------------------------------------


async def test_a_hitl_pauses_the_sessions_run_and_its_caps_hold_after_the_review() -> None:
    from policies_for_tests import max_calls

    engine = toolgate.Engine([max_calls(2), GATE])
    client, cli = await connected(engine)

    async def denied(tool: str, args: Dict[str, Any], id: str) -> str:
        out = (await cli.hook("PreToolUse", pre(tool, args, id), id)).get("hookSpecificOutput", {})
        return out.get("permissionDecisionReason", "") if out.get("permissionDecision") == "deny" else ""

    try:
        assert await denied("search", {"q": 1}, "t1") == ""
        assert await denied("search", {"q": 2}, "t2") == ""
        assert "BLOCKED_HITL_REQUESTED" in await denied("refund", {"amount": 900}, "t3")
        # While the review waits, the session's run stays paused: no fresh run, no fresh cap.
        assert "BLOCKED_RUN_ABORTED" in await denied("search", {"q": 3}, "t4")
        [review] = engine.reviews.pending()
        engine.reviews.approve(review["id"])
        # Answered: the same run goes on, with its counts.
        assert await denied("refund", {"amount": 900}, "t5") == ""
        assert "Too many searches." in await denied("search", {"q": 4}, "t6")
        assert "Too many searches." in await denied("search", {"q": 5}, "t7")
    finally:
        await client.disconnect()

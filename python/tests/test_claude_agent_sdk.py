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


async def connected(engine: toolgate.Engine, **kw: Any) -> tuple[ClaudeSDKClient, FakeCLI]:
    cli = FakeCLI()
    client = ClaudeSDKClient(options=ClaudeAgentOptions(hooks=hooks(engine, "claude-bot", **kw)), transport=cli)
    await client.connect()
    assert set(cli.hooks) == {"UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"}
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


# -- issue 36: the model's side (usage from the transcript, the gate at the turn's model calls) ---

from pathlib import Path  # noqa: E402

from llm_helpers import events, field, model_hitl, run_status, token_budget  # noqa: E402


def assistant(mid: str, tin: Any, tout: Any, model: str = "claude-test-1", **cache: Any) -> str:
    """One transcript line of an assistant message, as Claude Code writes it."""
    return json.dumps({"type": "assistant", "uuid": mid + "-u", "sessionId": "s1", "message": {
        "id": mid, "role": "assistant", "model": model, "content": [{"type": "text", "text": "ok"}],
        "usage": {"input_tokens": tin, "output_tokens": tout, **cache}}}) + "\n"


def prompt(text: str, transcript: Path) -> Dict[str, Any]:
    return {"hook_event_name": "UserPromptSubmit", "session_id": "s1", "transcript_path": str(transcript), "cwd": "/",
            "prompt": text}


def post_t(tool: str, out: Any, id: str, transcript: Path) -> Dict[str, Any]:
    return {**post(tool, {}, out, id), "transcript_path": str(transcript)}


def stop(transcript: Path) -> Dict[str, Any]:
    return {"hook_event_name": "Stop", "session_id": "s1", "transcript_path": str(transcript), "cwd": "/",
            "stop_hook_active": False}


async def test_usage_is_read_from_the_transcript_once_per_message(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("")
    engine = toolgate.Engine(GATE, audit=str(audit))
    client, cli = await connected(engine, prices={"claude-test-1": {"in": 3.0, "out": 15.0}})
    try:
        assert await cli.hook("UserPromptSubmit", prompt("hi", transcript), None) == {}
        # one model call written as two lines (one per content block), then a partial line
        with transcript.open("a") as f:
            f.write(assistant("m1", 100, 20, cache_read_input_tokens=900) + assistant("m1", 100, 20, cache_read_input_tokens=900))
            f.write('{"type": "assistant", "message": {"id": "m2"')  # still being written
        assert await cli.hook("PreToolUse", pre("refund", {"amount": 5}, "t1"), "t1") == {}
        assert await cli.hook("PostToolUse", post_t("refund", "ok", "t1", transcript), "t1") == {}
        with transcript.open("a") as f:
            f.write(', "model": "claude-test-1", "usage": {"input_tokens": 50, "output_tokens": 5}}}\n')
            f.write("not json\n" + assistant("m3", None, None))
        assert await cli.hook("Stop", stop(transcript), None) == {}
    finally:
        await client.disconnect()
    engine.shutdown()
    r = events(audit, "llm.result")
    assert [(field(e, "tokensIn"), field(e, "tokensOut")) for e in r][:2] == [(1000, 20), (50, 5)]
    assert field(r[2], "tokensIn") > 0  # m3 reported nothing: estimated, never free
    assert field(r[0], "costUsd") == pytest.approx((1000 * 3.0 + 20 * 15.0) / 1e6)
    assert field(r[0], "model") == "claude-test-1"


async def test_the_gate_blocks_the_prompt_and_stops_claude_after_a_tool(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("")
    engine = toolgate.Engine([token_budget(1000), GATE], audit=str(audit))
    client, cli = await connected(engine)
    try:
        assert await cli.hook("UserPromptSubmit", prompt("hi", transcript), None) == {}
        transcript.write_text(assistant("m1", 1500, 20))
        assert await cli.hook("PreToolUse", pre("refund", {"amount": 5}, "t1"), "t1") == {}
        out = await cli.hook("PostToolUse", post_t("refund", "ok", "t1", transcript), "t1")
        assert out["continue"] is False and "The token budget is spent." in out["stopReason"]
    finally:
        await client.disconnect()
    engine.shutdown()
    assert run_status(audit) == ["budget_exceeded"]


async def test_a_prompt_held_for_review_is_blocked(tmp_path: Path) -> None:
    engine = toolgate.Engine(model_hitl())
    client, cli = await connected(engine)
    try:
        out = await cli.hook("UserPromptSubmit", prompt("hi", tmp_path / "none.jsonl"), None)
        [review] = engine.reviews.pending()
        assert out["decision"] == "block" and review["id"] in out["reason"]
    finally:
        await client.disconnect()


async def test_a_hostile_transcript_is_bounded(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    transcript = tmp_path / "t.jsonl"
    # a 20 MiB line with no newline, then real lines: toolgate reads 8 MiB at a time, skips it
    transcript.write_bytes(b"x" * (20 * 1024 * 1024) + b"\n" + assistant("m1", 10**40, -1).encode())
    engine = toolgate.Engine(GATE, audit=str(audit))
    client, cli = await connected(engine)
    try:
        for i in range(4):
            await cli.hook("PreToolUse", pre("refund", {"amount": 1}, f"t{i}"), f"t{i}")
            await cli.hook("PostToolUse", post_t("refund", "ok", f"t{i}", transcript), f"t{i}")
    finally:
        await client.disconnect()
    engine.shutdown()
    [r] = events(audit, "llm.result")
    assert (field(r, "tokensIn"), field(r, "tokensOut")) == (10**12, 0)


async def test_a_fifo_or_device_named_as_the_transcript_does_not_hang_the_hook(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    engine = toolgate.Engine(GATE)
    client, cli = await connected(engine)
    try:
        for path in (fifo, Path("/dev/zero")):
            out = await asyncio.wait_for(cli.hook("UserPromptSubmit", prompt("hi", path), None), 10)
            assert out == {}
    finally:
        await client.disconnect()

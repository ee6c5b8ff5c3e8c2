"""Official Python SDK clients (`mcp` pinned in .ci/mcp-constraints.txt) through one
`toolgate mcp-proxy --listen` gateway at the same time: a 2026-07-28 client (stateless,
approvals through `input_required`) and a 2025-11-25 client (a session, approvals through
`elicitation/create`), plus a client without a valid token.

Usage: clients.py URL SCENARIO (fs DIR | py | progress). Prints one JSON object of what each
client saw. `progress`: three 2026-07-28 clients (two of one token) call `count` at once, each
recording the progress its callback got.
"""

import asyncio
import json
import sys

import mcp.types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def transport(url, token):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return streamable_http_client(url, http_client=http)


def answering(approve):
    async def cb(context, params):
        return types.ElicitResult(action="accept", content={"approve": approve})

    return cb


def text_of(result):
    return "".join(getattr(c, "text", "") for c in result.content)


def blocked_code(result):
    meta = result.meta or {}
    return (meta.get("toolgate") or {}).get("code", "")


async def run_client(url, token, mode, approve, calls):
    out = {"mode": mode}
    async with Client(transport(url, token), mode=mode, elicitation_callback=answering(approve)) as c:
        out["protocol"] = c.protocol_version
        tools = await c.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        for key, name, args in calls:
            r = await c.call_tool(name, args)
            out[key] = {"text": text_of(r), "code": blocked_code(r), "isError": bool(r.is_error)}
    return out


async def bad_token(url):
    try:
        async with Client(transport(url, "tok-wrong"), mode="2026-07-28") as c:
            await c.list_tools()
        return "no error"
    except BaseException as e:  # the SDK wraps the HTTP 401 in its own errors
        return repr(e)


async def counting(url, token, label, steps):
    seen = []

    async def on_progress(progress, total, message):
        seen.append({"progress": progress, "total": total, "message": message})

    async with Client(transport(url, token), mode="2026-07-28") as c:
        r = await c.call_tool("count", {"label": label, "steps": steps}, progress_callback=on_progress)
        return {"text": text_of(r), "progress": seen}


async def main():
    url, scenario = sys.argv[1], sys.argv[2]
    if scenario == "progress":
        got = await asyncio.gather(
            counting(url, "tok-alice", "alice-1", 3),
            counting(url, "tok-alice", "alice-2", 4),
            counting(url, "tok-bob", "bob", 5),
        )
        print(json.dumps(dict(zip(["alice-1", "alice-2", "bob"], got))))
        return
    if scenario == "fs":
        d = sys.argv[3]
        modern_calls = [
            ("list", "list_directory", {"path": d}),
            ("write", "write_file", {"path": f"{d}/modern.txt", "content": "from 2026-07-28"}),
        ]
        legacy_calls = [
            ("list", "list_directory", {"path": d}),
            ("write", "write_file", {"path": f"{d}/legacy.txt", "content": "from 2025-11-25"}),
        ]
    else:
        modern_calls = [("add", "add", {"a": 2, "b": 3}), ("publish", "publish", {"id": "m"})]
        legacy_calls = [("add", "add", {"a": 4, "b": 5}), ("publish", "publish", {"id": "l"})]
    modern, legacy, bad = await asyncio.gather(
        run_client(url, "tok-alice", "2026-07-28", True, modern_calls),
        run_client(url, "tok-bob", "legacy", False, legacy_calls),
        bad_token(url),
    )
    print(json.dumps({"modern": modern, "legacy": legacy, "bad_token": bad}))


asyncio.run(main())

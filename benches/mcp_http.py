#!/usr/bin/env python3
"""Latency of a `tools/call` over streamable HTTP through `toolgate mcp-proxy --listen` in front
of the fixture server over stdio (2026-07-28 stateless and 2025-11-25 session), against the bare
HTTP round trip to the same gateway (`server/discover`, answered without the upstream or the
engine), one keep-alive connection, sequential calls. The stdio figures to compare with come
from `cargo bench --bench mcp_proxy`.

  cargo build --release --bin toolgate --example mcp_fixture
  python3 benches/mcp_http.py target/release/toolgate target/release/examples/mcp_fixture [CALLS]
"""

import hashlib
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

POLICY = [
    {"id": "no-secrets", "name": "No secrets", "priority": 2, "enabled": True,
     "selector": {"phase": "tool.before", "tool": {"name": "*"}},
     "condition": {"kind": "toolArg", "type": "string", "op": "contains", "path": "text", "value": "password"},
     "effect": {"type": "block", "reason": "no secrets"}},
    {"id": "budget", "name": "Budget", "priority": 1, "enabled": True,
     "selector": {"phase": "tool.before", "tool": {"name": "echo"}},
     "condition": {"kind": "maxCalls", "selector": {"by": "toolName", "patterns": ["echo"]}, "max": 1000000},
     "effect": {"type": "block", "reason": "budget"}},
]


def post(conn, path, body, headers):
    conn.request("POST", path, body=json.dumps(body), headers=headers)
    r = conn.getresponse()
    data = r.read()
    sid = r.getheader("mcp-session-id")
    if r.getheader("content-type", "").startswith("text/event-stream"):
        msgs = [json.loads(l[5:]) for l in data.decode().splitlines() if l.startswith("data:") and l[5:].strip()]
        return (msgs[-1] if msgs else None), sid
    return (json.loads(data) if data else None), sid


def measure(host, port, path, headers, meta, calls, warmup, method="tools/call"):
    conn = http.client.HTTPConnection(host, port)
    out = []
    for i in range(warmup + calls):
        params = {"name": "echo", "arguments": {"text": f"m{i}"}} if method == "tools/call" else {}
        if meta:
            params["_meta"] = meta
        body = {"jsonrpc": "2.0", "id": i + 10, "method": method, "params": params}
        t = time.perf_counter()
        resp, _ = post(conn, path, body, headers)
        dt = time.perf_counter() - t
        assert resp and "result" in resp, resp
        if i >= warmup:
            out.append(dt)
    return out


def main():
    toolgate, fixture = sys.argv[1], sys.argv[2]
    calls = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    warmup = 300
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "policy.json"), "w") as f:
        json.dump(POLICY, f)
    with open(os.path.join(d, "tokens.json"), "w") as f:
        json.dump({"tokens": [{"sha256": hashlib.sha256(b"bench").hexdigest(), "agentId": "bench"}]}, f)
    gw = subprocess.Popen([toolgate, "mcp-proxy", "--listen", "127.0.0.1:0", "--token-file",
                           os.path.join(d, "tokens.json"), "--policy", os.path.join(d, "policy.json"),
                           "--", fixture], stderr=subprocess.PIPE, text=True)
    gw_url = None
    while gw_url is None:
        line = gw.stderr.readline()
        if not line:
            sys.exit("the gateway did not start")
        if "listening on " in line:
            gw_url = line.split("listening on ")[1].strip()
    ghost, gport = gw_url.split("//")[1].split("/")[0].split(":")
    base = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    try:
        meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}}
        dh = dict(base, **{"authorization": "Bearer bench", "mcp-protocol-version": "2026-07-28",
                           "mcp-method": "server/discover"})
        bare = measure(ghost, int(gport), "/mcp", dh, meta, calls, warmup, "server/discover")
        gh = dict(base, **{"authorization": "Bearer bench", "mcp-protocol-version": "2026-07-28",
                           "mcp-method": "tools/call", "mcp-name": "echo"})
        through = measure(ghost, int(gport), "/mcp", gh, meta, calls, warmup)
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}
        gconn = http.client.HTTPConnection(ghost, int(gport))
        _, gsid = post(gconn, "/mcp", init, dict(base, authorization="Bearer bench"))
        lh = dict(base, **{"authorization": "Bearer bench", "mcp-session-id": gsid})
        post(gconn, "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"}, lh)
        legacy = measure(ghost, int(gport), "/mcp", lh, None, calls, warmup)
    finally:
        gw.terminate()
    us = lambda xs: statistics.median(xs) * 1e6
    p99 = lambda xs: sorted(xs)[int(len(xs) * 0.99)] * 1e6
    print(f"{calls} sequential tools/call over HTTP (after {warmup} to warm up), one keep-alive connection")
    print(f"HTTP round trip alone (server/discover): median {us(bare):.0f} us, p99 {p99(bare):.0f} us")
    print(f"tools/call, 2026-07-28 (stateless):      median {us(through):.0f} us, p99 {p99(through):.0f} us")
    print(f"tools/call, 2025-11-25 (session):        median {us(legacy):.0f} us, p99 {p99(legacy):.0f} us")


if __name__ == "__main__":
    main()

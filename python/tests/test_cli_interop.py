"""Audit trails written from Python pass `toolgate verify`; reviews are shared with
`toolgate review --store`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import toolgate
from conftest import POLICIES
from policies_for_tests import GATE


def test_audit_trail_from_python_passes_toolgate_verify(toolgate_bin: Path, tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    engine = toolgate.Engine(POLICIES / "customer-support.json", audit=str(audit))
    for i in range(3):
        with engine.start_run("support-bot", run_id=f"r{i}", enduser={"id": "u1", "tags": {"tier": "gold"}}) as run:
            d = run.before_tool("kb_search", {"query": "returns"}, ["kb", "read"])
            run.after_tool(d.call_id, output={"hits": [1, 2]}, duration_ms=3)
            run.before_tool("issue_refund", {"amount": 5000, "orderId": "A"}, ["payments"])
    engine.shutdown()
    files = list(audit.glob("*.jsonl"))
    assert files
    kinds = [json.loads(l)["kind"] for f in files for l in f.read_text().splitlines()]
    assert kinds.count("run.started") == 3 and kinds.count("run.ended") == 3 and "tool.decision" in kinds
    out = subprocess.run([str(toolgate_bin), "verify", str(audit)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    # An edit breaks the chain, and verify says so.
    f = files[0]
    lines = f.read_text().splitlines()
    ev = json.loads(lines[1])
    ev["agentId"] = "someone-else"
    lines[1] = json.dumps(ev)
    f.write_text("\n".join(lines) + "\n")
    bad = subprocess.run([str(toolgate_bin), "verify", str(audit)], capture_output=True, text=True)
    assert bad.returncode != 0


def test_audit_object_with_signing_key_verifies(toolgate_bin: Path, tmp_path: Path) -> None:
    key = tmp_path / "key.pem"
    subprocess.run([str(toolgate_bin), "keygen", "--out", str(key)], check=True, capture_output=True)
    engine = toolgate.Engine(GATE, audit=toolgate.Audit(dir=tmp_path / "trail", signing_key=key))
    with engine.start_run("bot") as run:
        run.before_tool("deleteUser", {"id": 1})
    engine.shutdown()
    ended = [json.loads(l) for f in (tmp_path / "trail").glob("*.jsonl") for l in f.read_text().splitlines()]
    assert any(e["kind"] == "run.ended" and e.get("signature") for e in ended)
    out = subprocess.run([str(toolgate_bin), "verify", str(tmp_path / "trail")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_reviews_are_shared_with_toolgate_review_store(toolgate_bin: Path, tmp_path: Path) -> None:
    store = tmp_path / "reviews.json"
    engine = toolgate.Engine(GATE, reviews=store)
    d = engine.start_run("bot").before_tool("refund", {"amount": 500})
    assert d.code == "BLOCKED_HITL_REQUESTED"
    listed = subprocess.run([str(toolgate_bin), "review", "--store", str(store), "list", "--json"],
                            capture_output=True, text=True, check=True).stdout
    assert d.review_id in listed
    subprocess.run([str(toolgate_bin), "review", "--store", str(store), "approve", d.review_id],
                   capture_output=True, text=True, check=True)
    again = engine.start_run("bot").before_tool("refund", {"amount": 500})
    assert again.code == "ALLOWED_HITL_APPROVED" and again.allowed
    # And the other way: a review denied from Python is denied for the CLI.
    d2 = engine.start_run("bot").before_tool("refund", {"amount": 900})
    engine.reviews.deny(d2.review_id)
    all_ = subprocess.run([str(toolgate_bin), "review", "--store", str(store), "list", "--all", "--json"],
                          capture_output=True, text=True, check=True).stdout
    statuses = {r["id"]: r["status"] for r in json.loads(all_)}
    assert statuses[d.review_id] == "approved" and statuses[d2.review_id] == "denied"


def test_audit_to_a_toolgate_collector(toolgate_bin: Path, tmp_path: Path) -> None:
    import re
    import urllib.request

    out = tmp_path / "collected"
    proc = subprocess.Popen([str(toolgate_bin), "collect", "--listen", "127.0.0.1:0", "--out", str(out), "--token", "t0k"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "listening on http://127.0.0.1:PORT, ..." once it listens
        m = re.search(r"listening on (http://[0-9.:]+)", line)
        assert m, line
        base = m.group(1)
        engine = toolgate.Engine(GATE, audit=toolgate.Audit(collector=base, token="t0k"))
        with engine.start_run("bot", run_id="collected-run") as run:
            run.before_tool("deleteUser", {"id": 1})
        engine.shutdown()
        req = urllib.request.Request(base + "/v1/runs/collected-run", headers={"Authorization": "Bearer t0k"})
        events = json.loads(urllib.request.urlopen(req, timeout=5).read())["events"]
        assert [e["kind"] for e in events] == ["run.started", "tool.decision", "run.ended"]
        assert subprocess.run([str(toolgate_bin), "verify", str(out)], capture_output=True).returncode == 0
    finally:
        proc.terminate()
        proc.wait(timeout=10)

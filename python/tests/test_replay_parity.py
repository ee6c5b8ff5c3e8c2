"""The shipped policies and traces give the same decisions through Python (sync and async)
as through `toolgate replay`."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from conftest import POLICIES, TRACES
from pyreplay import PyReplayer, read_jsonl


def cases() -> List[Tuple[str, Path, List[Dict[str, Any]], Optional[str]]]:
    out = []
    for tests in sorted(POLICIES.glob("*.tests.json")):
        doc = json.loads(tests.read_text())
        policy = (tests.parent / doc["policy"]).resolve()
        for case in doc["cases"]:
            out.append((f"{tests.stem}: {case['name'][:60]}", policy, case["trace"], doc.get("orgTimezone")))
    support = read_jsonl((TRACES / "support.jsonl").read_text())
    out.append(("examples/traces/support.jsonl", POLICIES / "customer-support.json", support, None))
    return out


CASES = cases()


def cli_rows(bin: Path, policy: Path, trace: List[Dict[str, Any]], tz: Optional[str], tmp: Path) -> List[Dict[str, Any]]:
    path = tmp / "trace.jsonl"
    path.write_text("".join(json.dumps(l) + "\n" for l in trace))
    cmd = [str(bin), "replay", "--policy", str(policy), "--trace", str(path), "--format", "jsonl"]
    if tz:
        cmd += ["--org-timezone", tz]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return read_jsonl(out)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("name,policy,trace,tz", CASES, ids=[c[0] for c in CASES])
def test_same_decisions_as_toolgate_replay(
    toolgate_bin: Path, tmp_path: Path, name: str, policy: Path, trace: List[Dict[str, Any]], tz: Optional[str], use_async: bool
) -> None:
    expected = cli_rows(toolgate_bin, policy, trace, tz, tmp_path)
    assert expected, "the CLI printed no decision"
    got = asyncio.run(PyReplayer(str(policy), org_timezone=tz).replay(trace, use_async))
    assert got == expected


def test_there_are_cases_of_every_shipped_policy() -> None:
    names = {c[1].name for c in CASES}
    assert {p.name for p in POLICIES.glob("*.json") if not p.name.endswith(".tests.json")} <= names

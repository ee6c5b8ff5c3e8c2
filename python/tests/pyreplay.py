"""A trace replayer (design §5) driven through the Python API, sync or async: the same steps
as `toolgate replay`, so the two can be compared line by line."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional, Set, Tuple

import toolgate


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class PyReplayer:
    def __init__(self, policies: Any, org_timezone: Optional[str] = None, **engine_kw: Any) -> None:
        self.clock = toolgate.ManualClock(datetime(1970, 1, 1, tzinfo=timezone.utc))
        self.engine = toolgate.Engine(policies, org_timezone=org_timezone, clock=self.clock, **engine_kw)
        self.signals: Dict[str, Dict[str, Any]] = {}
        self.runs: Dict[str, toolgate.Run] = {}
        self.reviews_by_call: Dict[str, str] = {}
        self.tools_by_call: Dict[Tuple[str, str], str] = {}
        self.llm_refused: Set[Tuple[str, str]] = set()
        self.subjects: List[Dict[str, Any]] = []
        self.engine.register_subjects("*", self._subjects)
        self.rows: List[Dict[str, Any]] = []
        self.line = 0

    def _subjects(self, tool_name: str, args: Any) -> List[Dict[str, Any]]:
        out = []
        for s in self.subjects:
            d = {"subjectType": s["subjectType"], "id": s["value"]}
            for k in ("role", "idSystem"):
                if s.get(k) is not None:
                    d[k] = s[k]
            out.append(d)
        return out

    def _register(self, key: str) -> None:
        table = self.signals

        async def provider(args: Dict[str, Any]) -> Any:
            b = table[key]
            if b.get("delayMs"):
                await asyncio.sleep(b["delayMs"] / 1000.0)
            if b.get("error") is not None:
                raise RuntimeError(b["error"])
            return b["value"]

        self.engine.register_signal(key, provider)

    def _run(self, run_id: Optional[str]) -> Tuple[str, toolgate.Run]:
        if run_id is None:
            assert len(self.runs) == 1
            return next(iter(self.runs.items()))
        return run_id, self.runs[run_id]

    def _row(self, run_id: str, call_id: str, tool: str, d: toolgate.Decision) -> None:
        row = {
            "line": self.line,
            "runId": run_id,
            "callId": call_id,
            "phase": d.phase,
            "tool": tool,
            "effect": d.effect,
            "code": d.code,
            "ruleId": d.rule_id,
            "reason": d.reason,
            "abortRun": d.abort_run,
        }
        if d.shadow_effect is not None:
            row["shadowEffect"] = d.shadow_effect
        self.rows.append(row)
        if d.review_id is not None and d.effect == "hitl":
            self.reviews_by_call[call_id] = d.review_id

    async def step(self, line: Dict[str, Any], use_async: bool) -> None:
        self.line += 1
        if "at" in line:
            self.clock.set(_at(line["at"]))
        t = line["type"]
        if t == "run.start":
            self.runs[line["runId"]] = self.engine.start_run(
                line["agentId"], run_id=line["runId"], enduser=line.get("enduser")
            )
        elif t == "signal":
            fresh = line["key"] not in self.signals
            self.signals[line["key"]] = line
            if fresh:
                self._register(line["key"])
        elif t == "tool.call":
            run_id, run = self._run(line.get("runId"))
            tool = line["tool"]
            self.subjects = line.get("subjects") or []
            args = line.get("args", {})
            tags = tool.get("tags", [])
            if use_async:
                d = await run.abefore_tool(tool["name"], args, tags, line["id"])
            else:
                d = run.before_tool(tool["name"], args, tags, line["id"])
            self.tools_by_call[(run_id, line["id"])] = tool["name"]
            self._row(run_id, line["id"], tool["name"], d)
        elif t == "tool.result":
            run_id, run = self._run(line.get("runId"))
            kw = dict(output=line.get("output"), duration_ms=line.get("durationMs"), error=line.get("error"))
            if use_async:
                after = await run.aafter_tool(line["id"], **kw)
            else:
                after = run.after_tool(line["id"], **kw)
            if after.to_dict()["evaluated"]:  # after-phase rules were in play (as the CLI prints)
                self._row(run_id, line["id"], self.tools_by_call.get((run_id, line["id"]), ""), after)
        elif t == "metric":
            self._run(line.get("runId"))[1].record_metric(line["key"], line["value"])
        elif t == "llm.call":
            run_id, run = self._run(line.get("runId"))
            msgs = line.get("messages", [])
            if use_async:
                d = await run.abefore_llm(line["model"], msgs, call_id=line["id"])
            else:
                d = run.before_llm(line["model"], msgs, call_id=line["id"])
            if d.allowed:
                self.llm_refused.discard((run_id, line["id"]))
            else:
                self.llm_refused.add((run_id, line["id"]))
            self._row(run_id, line["id"], line["model"], d)
        elif t == "llm":
            run_id, run = self._run(line.get("runId"))
            # The usage of a model call that was not allowed: the model was not called.
            if line.get("id") is None or (run_id, line["id"]) not in self.llm_refused:
                run.record_llm(line.get("tokensIn", 0), line.get("tokensOut", 0), cost_usd=line.get("costUsd"),
                               model=line.get("model"), duration_ms=line.get("durationMs"), call_id=line.get("id"))
        elif t == "review":
            rid = self.reviews_by_call[line["fingerprintOf"]]
            if line["decision"] == "approved":
                self.engine.reviews.approve(rid)
            else:
                self.engine.reviews.deny(rid)
        elif t == "run.end":
            run_id, run = self._run(line.get("runId"))
            status = line.get("status") or "success"
            if use_async:
                await run.aend(status, line.get("finalResponse"))
            else:
                run.end(status, line.get("finalResponse"))
            del self.runs[run_id]
        else:
            raise AssertionError(f"unknown line type {t}")

    async def replay(self, lines: List[Dict[str, Any]], use_async: bool) -> List[Dict[str, Any]]:
        for line in lines:
            await self.step(line, use_async)
        for run in self.runs.values():
            if use_async:
                await run.aend("incomplete")
            else:
                run.end("incomplete")
        self.runs.clear()
        return self.rows


def read_jsonl(text: str) -> List[Dict[str, Any]]:
    return [json.loads(l) for l in text.splitlines() if l.strip()]

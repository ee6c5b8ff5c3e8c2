"""One engine, many threads and asyncio tasks: maxCalls exact under contention, async
decisions with a slow async signal not serialised, the GIL released while deciding."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Dict, List

import toolgate
from policies_for_tests import GATE, max_calls, policy, rule


def test_eight_threads_deciding_at_once_keep_max_calls_exact() -> None:
    cap = 500
    engine = toolgate.Engine(max_calls(cap))
    run = engine.start_run("bot")
    barrier = threading.Barrier(8)
    results: List[List[bool]] = [[] for _ in range(8)]

    def worker(i: int) -> None:
        barrier.wait()
        for _ in range(200):
            results[i].append(run.before_tool("search", {"q": i}).allowed)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    allowed = sum(sum(r) for r in results)
    assert allowed == cap
    assert sum(len(r) for r in results) == 1600


def test_threads_with_a_plain_signal() -> None:
    engine = toolgate.Engine(GATE, signal_timeout_ms=5000)
    engine.register_signal("crm.vip", lambda args: args["user"] % 2 == 0)
    run = engine.start_run("bot")
    out: Dict[int, str] = {}

    def worker(i: int) -> None:
        for j in range(25):
            n = i * 100 + j
            out[n] = run.before_tool("close_account", {"user": n}).effect

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 200
    assert all(e == ("block" if n % 2 == 0 else "allow") for n, e in out.items())


async def test_200_async_decisions_with_a_slow_async_signal_are_not_serialised() -> None:
    n = 200
    engine = toolgate.Engine(GATE, signal_timeout_ms=30_000)
    inside = 0
    most = 0
    everyone_in = asyncio.Event()

    async def slow_vip(args: Dict[str, Any]) -> bool:
        # Each call waits until all 200 are inside at once: if decisions were serialised (or
        # the loop blocked), the first would wait for the others forever (till the timeout:
        # missing data, and the decision would be allow, not block).
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        if inside == n:
            everyone_in.set()
        await everyone_in.wait()
        inside -= 1
        return True

    engine.register_signal("crm.vip", slow_vip)
    run = engine.start_run("bot")
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while not everyone_in.is_set():
            ticks += 1
            await asyncio.sleep(0)

    tick = asyncio.ensure_future(ticker())
    decisions = await asyncio.gather(*(run.abefore_tool("close_account", {"user": i}) for i in range(n)))
    await tick
    assert most == n
    assert [d.effect for d in decisions] == ["block"] * n
    assert all(d.to_dict()["signals"][0]["value"] is True for d in decisions)
    assert ticks > 0  # the event loop kept running while decisions were in flight


def test_gil_is_released_while_a_sync_decision_waits() -> None:
    # A sync decision waits for a plain signal that waits for another Python thread: this only
    # finishes if the deciding thread released the GIL.
    engine = toolgate.Engine(GATE, signal_timeout_ms=10_000)
    go = threading.Event()
    engine.register_signal("crm.vip", lambda args: go.wait(10))
    run = engine.start_run("bot")
    t = threading.Thread(target=go.set)
    result: List[str] = []
    worker = threading.Thread(target=lambda: result.append(run.before_tool("close_account", {"user": 1}).effect))
    worker.start()
    t.start()
    worker.join()
    t.join()
    assert result == ["block"]


async def test_sync_api_inside_a_running_loop_with_an_async_signal_does_not_deadlock() -> None:
    engine = toolgate.Engine(GATE, signal_timeout_ms=5000)

    async def vip(args: Dict[str, Any]) -> bool:
        await asyncio.sleep(0)
        return True

    engine.register_signal("crm.vip", vip)
    # Called from a coroutine: the caller's loop is blocked, so the coroutine runs on the
    # package's background loop.
    assert engine.start_run("bot").before_tool("close_account", {"user": 1}).effect == "block"


_READ_WHILE_DECIDING = r"""
import json, os, stat, sys, threading, time
import toolgate

reviews = sys.argv[1]
os.mkfifo(reviews)
engine = toolgate.Engine(
    {"policy": {"name": "p"}, "rules": [{"id": "h", "name": "h", "priority": 1, "enabled": True,
      "selector": {"phase": "tool.before", "tool": {"name": "publish"}},
      "condition": {"kind": "toolName", "op": "glob", "value": "*"},
      "effect": {"type": "hitl", "reason": "needs approval"}}]},
    reviews=reviews,
)
out = {}
decider = threading.Thread(
    target=lambda: out.update(code=engine.start_run("bot").before_tool("publish", {}).code))
decider.start()
# The decision reads the review file (a FIFO: each read waits for a writer): this thread must
# run meanwhile to write it, for as long as the decision reads it (until the store's own write
# replaces the FIFO with a file).
while decider.is_alive() and stat.S_ISFIFO(os.stat(reviews).st_mode):
    try:
        fd = os.open(reviews, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # no reader yet
        time.sleep(0.01)
        continue
    try:
        os.write(fd, b"[]")
    except BrokenPipeError:  # the reader closed its end between this open and this write
        pass
    finally:
        os.close(fd)
decider.join()
print(json.dumps(out))
"""


def test_a_hitl_decision_reading_the_review_file_lets_other_threads_run(tmp_path: Any) -> None:
    # The review file is read without holding the GIL: another thread runs while it is read.
    # (Held, the reader waited for a writer that could never run: the process hung. Measured
    # with a real file: 100k reviews froze every other thread for 51-79 s per decision.)
    import json
    import subprocess
    import sys

    child = subprocess.run(
        [sys.executable, "-c", _READ_WHILE_DECIDING, str(tmp_path / "reviews.json")],
        capture_output=True, text=True, timeout=120,
    )
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout)["code"] == "BLOCKED_HITL_REQUESTED", child.stdout

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

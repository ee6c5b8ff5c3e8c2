"""state="redis://…": counters and reviews shared by engines (as by processes), on the real
Redis (TOOLGATE_TEST_REDIS_URL); every id is unique, nothing is flushed."""

from __future__ import annotations

import threading
from typing import List

import toolgate
from policies_for_tests import GATE, max_calls


def test_max_calls_per_agent_is_shared_by_two_engines(redis_url: str, uid: str) -> None:
    a = toolgate.Engine(max_calls(30, per="agent"), state=redis_url)
    b = toolgate.Engine(max_calls(30, per="agent"), state=redis_url)
    runs = [a.start_run(uid, run_id=f"{uid}-a"), b.start_run(uid, run_id=f"{uid}-b")]
    allowed: List[int] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        n = sum(runs[i % 2].before_tool("search", {"q": i}).allowed for _ in range(10))
        with lock:
            allowed.append(n)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(allowed) == 30


def test_reviews_live_on_redis_with_state(redis_url: str, uid: str) -> None:
    a = toolgate.Engine(GATE, state=redis_url)
    b = toolgate.Engine(GATE, state=redis_url)
    d = a.start_run(uid, run_id=f"{uid}-1").before_tool("refund", {"amount": 999, "n": uid})
    assert d.code == "BLOCKED_HITL_REQUESTED"
    assert any(r["id"] == d.review_id for r in b.reviews.list())
    b.reviews.approve(d.review_id)
    again = a.start_run(uid, run_id=f"{uid}-2").before_tool("refund", {"amount": 999, "n": uid})
    assert again.code == "ALLOWED_HITL_APPROVED"


def test_unreachable_redis_follows_the_failure_mode(uid: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = "redis://127.0.0.1:1/0"
    closed = toolgate.Engine(max_calls(5), state=url, reviews=tmp_path / "r.json", failure_mode="closed")
    d = closed.start_run(uid).before_tool("search", {})
    assert d.code == "BLOCKED_FAILURE" and d.error
    opened = toolgate.Engine(max_calls(5), state=url, reviews=tmp_path / "r.json", failure_mode="open")
    assert opened.start_run(uid).before_tool("search", {}).allowed

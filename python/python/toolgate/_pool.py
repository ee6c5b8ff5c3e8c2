"""The threads that run plain-function callbacks (signal providers, custom conditions,
subject extractors). Kept apart from ``_loop`` so a plain callback does not import asyncio."""

from __future__ import annotations

import _thread
import os
import queue
import threading
from typing import Any, Callable, Tuple

# Plain-function callbacks run on these threads, started by ``_thread`` (daemon, never joined:
# a hung callback does not hold up the interpreter's exit) and written in Python only. A
# callback still running when the interpreter finalizes is stopped by CPython as its thread
# next takes the GIL; with no native frame of the package on that thread, that is clean (on a
# thread of the engine's runtime it aborted the process).
MAX_CALLBACK_THREADS = 128
CALLBACK_IDLE_SECS = 30.0
_jobs: "queue.SimpleQueue[Tuple[Any, Any, Any]]" = queue.SimpleQueue()
_pool_lock = threading.Lock()
_threads = 0
_idle = 0


def submit(job: Any, fn: Callable[..., Any], args: Tuple[Any, ...]) -> None:
    """Runs ``fn(*args)`` on a callback thread and hands the outcome to ``job`` (its
    ``started()``, then ``finish(ok, value)``). Jobs past ``MAX_CALLBACK_THREADS`` running
    at once wait for a thread."""
    global _threads, _idle
    with _pool_lock:
        if _idle > 0:
            _idle -= 1
            spawn = False
        else:
            spawn = _threads < MAX_CALLBACK_THREADS
            if spawn:
                _threads += 1
    _jobs.put((job, fn, args))
    if spawn:
        try:
            _thread.start_new_thread(_worker, ())
        except BaseException:
            with _pool_lock:
                _threads -= 1
            raise


def _worker() -> None:
    global _threads, _idle
    while True:
        try:
            job, fn, args = _jobs.get(timeout=CALLBACK_IDLE_SECS)
        except queue.Empty:
            with _pool_lock:
                if _idle > 0:  # not promised to a queued job: this thread may leave
                    _idle -= 1
                    _threads -= 1
                    return
            continue
        try:
            job.started()
            try:
                ok, value = True, fn(*args)
            except BaseException as e:  # the job reports it as the callback's failure
                ok, value = False, e
            job.finish(ok, value)
        except BaseException:  # interrupted (the engine's timeout) before it reported
            pass
        finally:
            job.abandon()  # does nothing once the outcome was reported
            value = job = fn = args = None
        with _pool_lock:
            _idle += 1


def _after_fork_in_child() -> None:
    # A lock held by a parent thread at the fork would never be released in the child, and
    # the parent's callback threads do not exist here.
    global _pool_lock, _jobs, _threads, _idle
    _pool_lock = threading.Lock()
    _jobs = queue.SimpleQueue()
    _threads = 0
    _idle = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

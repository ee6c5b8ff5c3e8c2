"""The background event loop that runs ``async def`` callbacks for synchronous decisions, and
the threads that run plain-function callbacks."""

from __future__ import annotations

import _thread
import asyncio
import os
import queue
import threading
from typing import Any, Awaitable, Callable, Coroutine, Dict, Optional, Tuple

_lock = threading.Lock()
_loop: Optional[asyncio.AbstractEventLoop] = None
_pid = os.getpid()


def background_loop() -> asyncio.AbstractEventLoop:
    """The package's own event loop, running in a daemon thread (started on first use, and
    again in a forked child, where the parent's thread does not exist)."""
    global _loop, _pid
    with _lock:
        if _pid != os.getpid():
            _loop, _pid = None, os.getpid()  # the parent's loop has no thread here
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            threading.Thread(target=run, name="toolgate-callbacks", daemon=True).start()
            ready.wait()
            _loop = loop
        return _loop


def cancellable(aw: Awaitable[Any]) -> Tuple[Coroutine[Any, Any, Any], Callable[[], None]]:
    """``aw`` as a coroutine to run as a task, and a function that cancels that task from any
    thread: the engine calls it when it stops waiting (the signal timeout), so a callback's
    hanging coroutine is cancelled instead of staying pending on its loop."""
    lock = threading.Lock()
    state: Dict[str, Any] = {"task": None, "cancelled": False}

    async def run() -> Any:
        with lock:
            if state["cancelled"]:
                close = getattr(aw, "close", None)
                if callable(close):
                    close()  # never awaited: no "coroutine was never awaited" warning
                raise asyncio.CancelledError()
            state["task"] = asyncio.current_task()
        return await aw

    def cancel() -> None:
        with lock:
            state["cancelled"] = True
            task = state["task"]
        if task is not None and not task.done():
            try:
                task.get_loop().call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop is closed: nothing is left to cancel
                pass

    return run(), cancel


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
    global _lock, _pool_lock, _jobs, _threads, _idle
    _lock = threading.Lock()
    _pool_lock = threading.Lock()
    _jobs = queue.SimpleQueue()
    _threads = 0
    _idle = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

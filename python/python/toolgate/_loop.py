"""The background event loop that runs ``async def`` callbacks for synchronous decisions."""

from __future__ import annotations

import asyncio
import os
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


def _after_fork_in_child() -> None:
    # A lock held by a parent thread at the fork would never be released in the child.
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

"""The background event loop that runs ``async def`` callbacks for synchronous decisions."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable, Callable, Coroutine, Dict, Optional, Tuple

_lock = threading.Lock()
_loop: Optional[asyncio.AbstractEventLoop] = None


def background_loop() -> asyncio.AbstractEventLoop:
    """The package's own event loop, running in a daemon thread (started on first use)."""
    global _loop
    with _lock:
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

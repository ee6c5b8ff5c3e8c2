"""The background event loop that runs ``async def`` callbacks for synchronous decisions."""

from __future__ import annotations

import asyncio
import threading
from typing import Optional

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

"""A private event loop in a daemon thread: sync calls into async code that lives on that loop.

The saver's connections (a Kafka producer, a pool) belong to the loop that opened them. A saver
opened with `with` lives on this loop; one opened with `async with` lives on the caller's, and
sync calls from other threads are sent there.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str = "helix-es-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


async def on_loop(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """Await `coro` on `loop`, from whichever loop is running now."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:  # pragma: no cover - only called from coroutines
        running = None
    if running is loop:
        return await coro
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


def from_sync(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on `loop` and wait for it, from a thread that is not running that loop."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        coro.close()
        raise RuntimeError(
            "a sync HelixSaver method was called on the event loop the saver was opened on; "
            "use the async method (await saver.aget_tuple(...), graph.ainvoke) there"
        )
    return asyncio.run_coroutine_threadsafe(coro, loop).result()

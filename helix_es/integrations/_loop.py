"""Calls into async code that lives on one event loop, from another loop or from a thread.

The saver's connections (a Kafka producer, a pool) belong to the loop that opened them. A saver
opened with `with` lives on helix-es's own loop (`helix_es.sync`); one opened with `async with`
lives on the caller's, and calls from other loops and threads are sent there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


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

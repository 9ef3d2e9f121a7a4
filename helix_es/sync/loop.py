"""The one event loop thread sync callers use, and hand-overs of coroutines between loops and threads.

A `LoopThread` is an asyncio loop running in a daemon thread of its own; other threads hand it
coroutines (`submit`, `wait`). Sync memories (`helix_es.sync.open_memory`), the LangGraph store's
sync methods and a saver opened with `with` all live on one of them: the process's, which
`default_loop()` returns.

Why a process-wide default, behind that one accessor: the backends a memory runs on are shared per
event loop, by the loop's runtime (`helix_es.client.runtime`), so every sync caller of a process must
be on the same loop to share them (an embedded log folds each append into the views of its one
backend). Each `LoopThread` holds the runtime of its loop (its default, for whatever runs on it) and
closes it when it stops. It is made on first use, and made again in a forked child (the parent's
thread does not exist there) or after it stopped at interpreter exit; `_ProcessLoop` holds it, and
nothing else keeps loop state.

`on_loop` and `from_sync` hand a coroutine to any loop, a `LoopThread`'s or a caller's own (a saver
opened with `async with` lives on its opener's loop).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

from helix_es.client.runtime import Runtime, install_default
from helix_es.model.errors import HelixError

__all__ = ["LoopThread", "MemoryClosed", "current_loop", "default_loop", "from_sync", "on_loop", "run", "submit"]

T = TypeVar("T")


class MemoryClosed(HelixError, RuntimeError):
    """The sync memory was closed, opened before this process forked, or used after helix-es's loop stopped
    at interpreter exit; open another."""


class LoopThread:
    """An event loop running in a daemon thread; coroutines are handed to it from other threads. It owns
    the loop's `runtime`: every memory opened on the loop shares it, and `stop` closes it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.runtime = Runtime()
        install_default(self.loop, self.runtime)
        self.pid = os.getpid()
        self.memories: weakref.WeakSet[Any] = weakref.WeakSet()  # the sync memories open on it
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), name="helix-es-sync", daemon=True)
        self.thread.start()
        started.wait()

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(started.set)
        self.loop.run_forever()

    @property
    def live(self) -> bool:
        """Running, in this process: a forked child's copy, or one stopped at exit, is not."""
        return self.pid == os.getpid() and self.thread.is_alive()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def wait(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the loop and block this thread for its result (or its exception, as it was)."""
        if threading.get_ident() == self.thread.ident:
            coro.close()
            raise RuntimeError(
                "a helix_es.sync memory was called from helix-es's own event loop (from async code it runs, "
                "such as a middleware): that would wait on itself. Await an async memory there instead."
            )
        future = self.submit(coro)
        try:
            while True:
                try:
                    return future.result(timeout=1.0)
                except TimeoutError:
                    if future.done():  # the call's own TimeoutError (ConsistencyTimeout is one)
                        raise
                    if not self.thread.is_alive():  # stopped at interpreter exit: it would never answer
                        raise MemoryClosed("helix-es's event loop has stopped (the interpreter is exiting)") from None
        except BaseException:
            future.cancel()  # KeyboardInterrupt while waiting: the work stops too
            raise

    def stop(self, timeout: float) -> None:
        """Close the runtime (within `timeout` seconds), then stop the loop and its thread."""
        if self.live:
            closing = self.submit(self.runtime.aclose())
            try:
                closing.result(timeout)
            except BaseException:  # a store that is gone must not hold up the stop
                closing.cancel()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout)


class _ProcessLoop:
    """The process's one `LoopThread`, made on first use; forgotten in a forked child."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: LoopThread | None = None
        os.register_at_fork(after_in_child=self._forget)

    def get(self) -> LoopThread:
        with self._lock:
            if self._running is None or not self._running.live:
                self._running = LoopThread()
            return self._running

    def peek(self) -> LoopThread | None:
        running = self._running
        return running if running is not None and running.live else None

    def _forget(self) -> None:
        self._lock = threading.Lock()  # another thread may have held it at the fork
        self._running = None  # the parent's loop thread does not exist here


_PROCESS = _ProcessLoop()


def default_loop() -> LoopThread:
    """The process's loop thread for sync callers (started now if none runs in this process)."""
    return _PROCESS.get()


def current_loop() -> LoopThread | None:
    """The process's loop thread if one runs in this process, without starting one."""
    return _PROCESS.peek()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on helix-es's loop and wait for its result: the sync side of an adapter (a LangGraph
    store's `batch`) whose async objects were opened on that loop (`submit`)."""
    return default_loop().wait(coro)


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Start `coro` on helix-es's loop; await the future with `asyncio.wrap_future` or take its `result()`."""
    return default_loop().submit(coro)


def _running() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def on_loop(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """Await `coro` on `loop`, from whichever loop is running now."""
    if _running() is loop:
        return await coro
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


def from_sync(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T], refusal: str) -> T:
    """Run `coro` on `loop` and wait for it, from a thread that is not running that loop; called on that
    loop itself, raise `RuntimeError(refusal)` instead of waiting on itself."""
    if _running() is loop:
        coro.close()
        raise RuntimeError(refusal)
    return asyncio.run_coroutine_threadsafe(coro, loop).result()

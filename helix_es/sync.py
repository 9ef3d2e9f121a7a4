"""`open_memory` for code without an event loop: plain threads, scripts, WSGI apps, and sync callbacks
called from inside someone else's running loop.

    from helix_es import Message
    from helix_es.sync import open_memory

    with open_memory({"memory": {"type": "conversation"}}, session_id="s1") as mem:
        mem.add(Message("user", "hi"))
        mem.get()

Every async memory lives on one event loop that helix-es runs in a daemon thread of its own,
started by the first `open_memory` and shared by every sync memory of the process. A call is
handed to that loop with `asyncio.run_coroutine_threadsafe` and the calling thread waits for
its result, so:

- many threads may call one memory at once: their calls run as concurrent tasks on the loop,
  exactly as concurrent coroutines would on an async memory;
- a call made from inside a running event loop (a sync callback, a sync library called from
  `async def`) blocks that caller's thread while the helix loop does the work: it never
  deadlocks, since the work is never queued on the loop that waits;
- an exception reaches the caller as itself (`InvalidMessage`, `ConsistencyTimeout`, ...).

Why one loop for every memory, not one per memory: the backends a memory runs on (the log, the
view stores and their connection pools) are shared per event loop (`helix_es.client.backend`).
An embedded log folds each append into the views of its one backend, so two memories of one
log on two loops would each see only their own writes in a `memory` store; one loop gives sync
memories the sharing async memories have. It also costs one thread however many memories and
sessions are open, and the loop interleaves their I/O as any event loop does. The same holds
between sync and async code: an async memory opened on another loop of the process, over the
same embedded log, has a backend of its own, and while both are open neither one's `memory`
store sees the other's writes. Async code beside sync memories reaches the same memory through
`SyncMemory.submit` (awaited with `asyncio.wrap_future`), as the LangChain adapter does.

Closing a memory (leaving `with`, or `close()`) waits for its calls in flight, then releases its
backend; a call after that raises `MemoryClosed`. A memory dropped without closing is released
when it is garbage collected, and memories still open when the interpreter exits are closed
then (for at most `EXIT_TIMEOUT` seconds); the loop's thread is a daemon and never holds up exit.
After `os.fork()` the child starts a loop of its own; memories opened in the parent raise
`MemoryClosed` there.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any, TypeVar

from helix_es.client.open import open_memory as _open_async
from helix_es.client.protocol import Memory
from helix_es.config import Config, load_config
from helix_es.model.errors import HelixError
from helix_es.model.events import Position
from helix_es.model.message import Message

__all__ = ["EXIT_TIMEOUT", "MemoryClosed", "SyncMemory", "open_memory", "run", "submit"]

T = TypeVar("T")

EXIT_TIMEOUT = 5.0  # seconds the interpreter's exit waits, in all, for the memories still open to close


class MemoryClosed(HelixError, RuntimeError):
    """The sync memory was closed, opened before this process forked, or used after helix-es's loop stopped
    at interpreter exit; open another."""


class _Loop:
    """An event loop running in a daemon thread; coroutines are handed to it from other threads."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()
        self.memories: weakref.WeakSet[SyncMemory] = weakref.WeakSet()
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), name="helix-es-sync", daemon=True)
        self.thread.start()
        started.wait()

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(started.set)
        self.loop.run_forever()

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
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout)


_lock = threading.Lock()
_current: _Loop | None = None


def _the_loop() -> _Loop:
    global _current
    with _lock:
        if _current is None or _current.pid != os.getpid() or not _current.thread.is_alive():
            _current = _Loop()
        return _current


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on helix-es's loop and wait for its result: the sync side of an adapter (a LangGraph
    store's `batch`) whose async objects were opened on that loop (`submit`)."""
    return _the_loop().wait(coro)


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Start `coro` on helix-es's loop; await the future with `asyncio.wrap_future` or take its `result()`."""
    return _the_loop().submit(coro)


def _forget_after_fork() -> None:
    global _lock, _current
    _lock = threading.Lock()  # another thread may have held it at the fork
    _current = None  # the parent's loop thread does not exist here


os.register_at_fork(after_in_child=_forget_after_fork)


@atexit.register
def _close_at_exit() -> None:
    running = _current
    if running is None or running.pid != os.getpid() or not running.thread.is_alive():
        return
    open_ones = list(running.memories)
    if open_ones:
        closing = running.submit(_close_all([m._stack for m in open_ones]))
        try:
            closing.result(EXIT_TIMEOUT)
        except BaseException:  # an exit must not fail or hang on a broker that is gone
            closing.cancel()
    running.stop(1.0)


async def _close_all(stacks: list[AsyncExitStack]) -> None:
    await asyncio.gather(*(stack.aclose() for stack in stacks), return_exceptions=True)


async def _opened(
    config: Mapping[str, Any] | str | os.PathLike[str] | Config, session_id: str | None, agent: str | None
) -> tuple[Memory, AsyncExitStack]:
    stack = AsyncExitStack()
    try:
        memory = await stack.enter_async_context(_open_async(config, session_id=session_id, agent=agent))
    except BaseException:
        await stack.aclose()
        raise
    return memory, stack


def _release_later(running: _Loop, stack: AsyncExitStack) -> None:
    """A memory garbage collected while open: its backend is released on the loop, without waiting
    (the collection may run on any thread, the loop's own included)."""
    if running.pid == os.getpid() and running.thread.is_alive() and not running.loop.is_closed():
        closing = stack.aclose()
        try:
            running.submit(closing)
        except RuntimeError:  # the loop stopped meanwhile (interpreter exit)
            closing.close()


def open_memory(
    config: Mapping[str, Any] | str | os.PathLike[str] | Config,
    *,
    session_id: str | None = None,
    agent: str | None = None,
) -> SyncMemory:
    """Open one session's memory as `config` describes (a dict, YAML text, a path or a Config), for
    sync code: `helix_es.open_memory`'s twin. Use it with `with`, or call `close()` when done."""
    cfg = config if isinstance(config, Config) else load_config(config, agent=agent)  # bad config: raised here
    running = _the_loop()
    memory, stack = running.wait(_opened(cfg, session_id, agent))
    return SyncMemory(running, memory, stack, session_id=session_id or cfg.memory.session_id or "")


class SyncMemory:
    """One session's memory for sync code; safe to call from many threads at once."""

    def __init__(self, running: _Loop, memory: Memory, stack: AsyncExitStack, *, session_id: str) -> None:
        self._loop = running
        self._memory = memory
        self._stack = stack
        self.session_id = session_id
        self.namespace: str = getattr(memory, "namespace", "")
        self._state = threading.Condition()
        self._in_flight = 0
        self._closed = False
        running.memories.add(self)
        self._finalizer = weakref.finalize(self, _release_later, running, stack)
        self._finalizer.atexit = False  # at exit, _close_at_exit closes what is still open, with a bound

    # -- the Memory interface, sync ---------------------------------------------------------------

    def add(self, message: Message, *, idempotency_key: str | None = None) -> Position:
        """Append `message`. A write retried with the same `idempotency_key` in the session shows once."""
        return self.run(lambda m: m.add(message, idempotency_key=idempotency_key))

    def get(self) -> list[Message]:
        return self.run(lambda m: m.get())

    def search(self, query: str, limit: int = 10) -> list[Message]:
        return self.run(lambda m: m.search(query, limit))

    def clear(self, *, idempotency_key: str | None = None) -> Position:
        return self.run(lambda m: m.clear(idempotency_key=idempotency_key))

    # -- for async callers on another loop --------------------------------------------------------

    def submit(self, call: Callable[[Memory], Awaitable[T]]) -> concurrent.futures.Future[T]:
        """Run `call(memory)` on helix-es's loop, with the async memory this one wraps; the result is a
        `concurrent.futures.Future`. Async code on another loop awaits `asyncio.wrap_future(...)` of it,
        so one memory serves a program's sync and async sides alike (its read-your-writes included)."""
        self._enter()
        try:
            future = self._loop.submit(self._run(call))
        except BaseException:
            self._leave()
            raise
        future.add_done_callback(lambda _: self._leave())
        return future

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Wait for the calls in flight, then release the backend. Closing again does nothing."""
        with self._state:
            if self._closed:
                return
            self._closed = True
            while self._in_flight:
                self._state.wait()
        self._finalizer.detach()
        self._loop.memories.discard(self)
        if self._loop.pid != os.getpid():
            return  # opened before a fork: the loop holding it is in the parent
        self._loop.wait(self._stack.aclose())

    def __enter__(self) -> SyncMemory:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<helix_es.sync memory {self.namespace}/{self.session_id} ({state})>"

    # -- plumbing ---------------------------------------------------------------------------------

    def run(self, call: Callable[[Memory], Awaitable[T]]) -> T:
        """Run `call(memory)` on helix-es's loop, with the async memory this one wraps, and wait for its
        result: several steps in one hand-over (an adapter's batch of adds, in order)."""
        self._enter()
        try:
            return self._loop.wait(self._run(call))
        finally:
            self._leave()

    async def _run(self, call: Callable[[Memory], Awaitable[T]]) -> T:
        return await call(self._memory)

    def _enter(self) -> None:
        with self._state:
            if self._closed:
                raise MemoryClosed(f"{self!r} is closed; open another with helix_es.sync.open_memory")
            if self._loop.pid != os.getpid():
                raise MemoryClosed(f"{self!r} was opened before this process forked; open another here")
            if not self._loop.thread.is_alive():
                raise MemoryClosed(f"{self!r}: helix-es's event loop has stopped (the interpreter is exiting)")
            self._in_flight += 1

    def _leave(self) -> None:
        with self._state:
            self._in_flight -= 1
            if not self._in_flight:
                self._state.notify_all()

"""Sync memories: `open_memory` and `SyncMemory`, on the process's loop thread (`helix_es.sync.loop`)."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar, cast

from helix_es.client.middleware import add_many
from helix_es.client.open import open_memory as _open_async
from helix_es.client.protocol import Memory
from helix_es.client.runtime import Runtime
from helix_es.config import Config, load_config
from helix_es.model.events import Position
from helix_es.model.facts import Fact
from helix_es.model.message import Message
from helix_es.model.recall import RecallHit
from helix_es.sync.loop import LoopThread, MemoryClosed, current_loop, default_loop

__all__ = ["EXIT_TIMEOUT", "SyncMemory", "open_memory"]

T = TypeVar("T")

EXIT_TIMEOUT = 5.0  # seconds the interpreter's exit waits, in all, for the memories still open to close


@atexit.register
def _close_at_exit() -> None:
    running = current_loop()
    if running is None:
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
    config: Mapping[str, Any] | str | os.PathLike[str] | Config,
    session_id: str | None,
    agent: str | None,
    runtime: Runtime,
) -> tuple[Memory, AsyncExitStack]:
    stack = AsyncExitStack()
    try:
        memory = await stack.enter_async_context(
            _open_async(config, session_id=session_id, agent=agent, runtime=runtime)
        )
    except BaseException:
        await stack.aclose()
        raise
    return memory, stack


def _release_later(running: LoopThread, stack: AsyncExitStack) -> None:
    """A memory garbage collected while open: its backend is released on the loop, without waiting
    (the collection may run on any thread, the loop's own included)."""
    if running.live and not running.loop.is_closed():
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
    running = default_loop()
    memory, stack = running.wait(_opened(cfg, session_id, agent, running.runtime))
    return SyncMemory(running, memory, stack, session_id=session_id or cfg.memory.session_id or "")


class SyncMemory:
    """One session's memory for sync code; safe to call from many threads at once."""

    def __init__(self, running: LoopThread, memory: Memory, stack: AsyncExitStack, *, session_id: str) -> None:
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

    def add_many(
        self, messages: Iterable[Message], *, idempotency_keys: Sequence[str | None] | None = None
    ) -> list[Position]:
        """Append `messages` in order, together; their positions. A bad one: nothing is written."""
        batch = list(messages) if isinstance(messages, Iterator) else messages  # a generator runs in this thread
        return self.run(lambda m: add_many(m, batch, idempotency_keys=idempotency_keys))

    def get(self) -> list[Message]:
        return self.run(lambda m: m.get())

    def search(self, query: str, limit: int = 10) -> list[Message]:
        return self.run(lambda m: m.search(query, limit))

    def recall(self, query: str, limit: int | None = None, **filters: Any) -> list[RecallHit]:
        """`Memory.recall` (sessions, where, after, before, explain, mode), waiting for the answer."""
        return self.run(lambda m: cast(Any, m).recall(query, limit, **filters))

    def clear(self, *, idempotency_key: str | None = None) -> Position:
        return self.run(lambda m: m.clear(idempotency_key=idempotency_key))

    # -- knowledge (a facts view) -------------------------------------------------------------------

    def facts(
        self,
        subject: str | None = None,
        predicate: str | None = None,
        as_of: datetime | None = None,
        known_as_of: datetime | None = None,
        history: bool = False,
    ) -> list[Fact]:
        """`Memory.facts`: the facts holding at `as_of` as the memory knew them at `known_as_of`."""
        return cast(list[Fact], self.run(lambda m: cast(Any, m).facts(subject, predicate, as_of, known_as_of, history)))

    def assert_fact(self, subject: str, predicate: str, value: str, valid_from: datetime | None = None) -> Position:
        return cast(Position, self.run(lambda m: cast(Any, m).assert_fact(subject, predicate, value, valid_from)))

    def retract_fact(self, fact_id: str, reason: str | None = None) -> Position:
        return cast(Position, self.run(lambda m: cast(Any, m).retract_fact(fact_id, reason)))

    def merge_facts(self, fact_ids: Sequence[str]) -> Position:
        return cast(Position, self.run(lambda m: cast(Any, m).merge_facts(fact_ids)))

    def unmerge_facts(self, position: Position) -> Position:
        return cast(Position, self.run(lambda m: cast(Any, m).unmerge_facts(position)))

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

"""One memory per session for an agent serving many users, and an atomic holder for the current one.

`SessionMemoryManager` opens a session's memory on first use (once, however many requests
race for it) and closes them all at the end. A session's memory closed with a write its views
had not yet shown hands that write to the session's next memory, whose reads wait for it too.
`MemoryHolder` is the seed's `Agent.SetMemory`: a swap is atomic, and an agent that reads the
holder once per request uses one memory for the whole request even while another request swaps
it.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from types import TracebackType
from typing import Any

from helix_es.client.open import open_memory
from helix_es.client.protocol import Memory
from helix_es.client.runtime import Runtime
from helix_es.config import Config, load_config
from helix_es.model import names
from helix_es.model.errors import ConfigError, HelixError, InvalidInput
from helix_es.model.events import Position

# `session_id -> Memory` (async), or `session_id -> async context manager of a Memory` (open_memory).
MemoryFactory = Callable[[str], Awaitable[Memory] | AbstractAsyncContextManager[Memory]]
Headers = Mapping[str, str] | Mapping[bytes, bytes] | Iterable[tuple[str | bytes, str | bytes]]


class MissingSessionHeader(InvalidInput):
    """The request has no session id header; `field` is the header's name."""


class SessionsClosed(HelixError, RuntimeError):
    """The manager was closed; it opens no more memories."""


class NoMemory(HelixError, LookupError):
    """`MemoryHolder.get()` before any memory was set."""


class _Session:
    __slots__ = ("opening", "stack")

    def __init__(self, opening: asyncio.Task[Memory], stack: AsyncExitStack) -> None:
        self.opening = opening
        self.stack = stack


class SessionMemoryManager:
    """Memories by session id, each created once on first use and isolated from the others.

    Bound to the event loop it is used on. `close()` (or leaving `async with`) closes every
    memory it opened; a memory closed under a request still using it fails that request.
    """

    # Closed sessions whose last write the views had not shown, carried to their next memory; past
    # this many the oldest is dropped, so a projector down for good cannot grow it without end.
    carry_limit: int = 100_000

    def __init__(self, factory: MemoryFactory, *, session_id_header: str | None = None) -> None:
        if not callable(factory):
            raise InvalidInput("factory", f"must be callable (session_id -> Memory), got {type(factory).__name__}")
        if session_id_header is not None and (not isinstance(session_id_header, str) or not session_id_header):
            raise InvalidInput("session_id_header", f"must be a header name, got {session_id_header!r}")
        self.factory = factory
        self.session_id_header = session_id_header
        self._sessions: dict[str, _Session] = {}
        self._carried: dict[str, Position] = {}  # a closed memory's write its views had not shown
        self._closed = False

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any] | str | os.PathLike[str] | Config,
        *,
        agent: str | None = None,
        session_id_header: str | None = None,
        runtime: Runtime | None = None,
    ) -> SessionMemoryManager:
        """Sessions of the memory `config` describes, `open_memory(config, session_id=..., runtime=...)`
        each; the header comes from `memory.session_id_header` unless given here."""
        cfg = config if isinstance(config, Config) else load_config(config, agent=agent)
        header = session_id_header or cfg.memory.session_id_header
        return cls(
            lambda session_id: open_memory(cfg, session_id=session_id, runtime=runtime), session_id_header=header
        )

    # -- sessions --------------------------------------------------------------------------

    async def get(self, session_id: str) -> Memory:
        """The session's memory, opened on first use; concurrent first uses share one opening."""
        names.check_session_id(session_id)
        self._check_open()
        entry = self._sessions.get(session_id)
        if entry is None:
            # No await between the lookup and the insert: in one event loop this is atomic.
            stack = AsyncExitStack()
            entry = _Session(asyncio.get_running_loop().create_task(self._open(session_id, stack)), stack)
            self._sessions[session_id] = entry
        try:
            # Shielded: a caller that gives up must not cancel the opening other callers wait for.
            memory = await asyncio.shield(entry.opening)
        except BaseException:
            if entry.opening.done() and self._sessions.get(session_id) is entry:
                del self._sessions[session_id]  # a failed opening is retried by the next caller
            raise
        self._check_open()
        return memory

    async def _open(self, session_id: str, stack: AsyncExitStack) -> Memory:
        try:
            made: Any = self.factory(session_id)
            if inspect.isawaitable(made):
                made = await made
            if isinstance(made, AbstractAsyncContextManager):  # any object with __aenter__/__aexit__
                memory: Memory = await stack.enter_async_context(made)
            else:
                closer = getattr(made, "aclose", None)
                if callable(closer):
                    stack.push_async_callback(closer)
                memory = made
        except BaseException:
            await stack.aclose()
            raise
        carried = self._carried.pop(session_id, None)
        if carried is not None:
            expect(memory, carried)
        return memory

    def _check_open(self) -> None:
        if self._closed:
            raise SessionsClosed("this SessionMemoryManager is closed; make a new one")

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def __len__(self) -> int:
        return len(self._sessions)

    def session_ids(self) -> list[str]:
        return list(self._sessions)

    async def close_session(self, session_id: str) -> bool:
        """Close one session's memory (a later `get` opens a new one); False if it was not open."""
        entry = self._sessions.pop(session_id, None)
        if entry is None:
            return False
        opened = entry.opening.done() and not entry.opening.cancelled() and entry.opening.exception() is None
        pending = getattr(entry.opening.result(), "pending", None) if opened else None  # under middleware too
        position = pending() if callable(pending) else None
        if position is not None:
            self._carried[session_id] = position
            while len(self._carried) > self.carry_limit:
                del self._carried[next(iter(self._carried))]
        await _finish(entry)
        return True

    async def close(self) -> None:
        """Close every memory, in reverse order of opening; errors are raised after all are closed."""
        self._closed = True
        self._carried.clear()
        errors: list[Exception] = []
        while self._sessions:
            _, entry = self._sessions.popitem()
            try:
                await _finish(entry)
            except Exception as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ExceptionGroup("closing session memories failed", errors)

    async def __aenter__(self) -> SessionMemoryManager:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- headers ---------------------------------------------------------------------------

    def session_id_from_headers(self, headers: Headers) -> str:
        """The session id in the configured header (case-insensitive), checked like any session id."""
        header = self.session_id_header
        if not header:
            raise ConfigError("memory.session_id_header", "is not set: name the header that carries the session id")
        want = header.lower()
        items = headers.items() if isinstance(headers, Mapping) else headers
        found: list[str] = []
        for key, value in items:
            name = key.decode("latin-1") if isinstance(key, bytes) else key
            if name.lower() != want:
                continue
            if isinstance(value, bytes):
                try:
                    value = value.decode()
                except UnicodeDecodeError:
                    raise InvalidInput(header, "is not UTF-8 text") from None
            found.append(value.strip())
        if not found:
            raise MissingSessionHeader(header, "missing from the request headers; it names the session to use")
        if len(set(found)) > 1:
            # Two different ids in one request is ambiguous: refuse rather than pick one.
            raise InvalidInput(header, f"appears {len(found)} times with different values")
        return names.check_session_id(found[0], header)

    async def for_headers(self, headers: Headers) -> Memory:
        """The memory of the session named by the request's `session_id_header`."""
        return await self.get(self.session_id_from_headers(headers))


def expect(memory: Memory, position: Position) -> None:
    """`memory`'s next reads wait until its views have applied `position` too, as they wait for its
    own writes (a write of the session's earlier memory, or another server's: its consistency token)."""
    wrote = getattr(memory, "wrote", None)  # the writer under middleware and composites
    if callable(wrote):
        wrote(position)


async def _finish(entry: _Session) -> None:
    if not entry.opening.done():
        try:
            await asyncio.shield(entry.opening)
        except Exception:
            return  # it never opened; `_open` already closed what it had entered
    elif entry.opening.cancelled() or entry.opening.exception() is not None:
        return
    await entry.stack.aclose()


class MemoryHolder:
    """The current memory, swapped atomically (the seed's `atomic.Pointer` in `Agent.SetMemory`).

    Safe across threads and tasks. Read it once per request and use what you got: the
    holder is deliberately not a Memory itself, since forwarding each call would let one
    request's `add` and `get` reach two different memories across a swap.
    """

    def __init__(self, memory: Memory | None = None) -> None:
        self._lock = threading.Lock()  # held for a pointer swap only, never across an await
        self._memory = memory

    def get(self) -> Memory:
        with self._lock:
            memory = self._memory
        if memory is None:
            raise NoMemory("no memory is set in this MemoryHolder; call set(memory) first")
        return memory

    def peek(self) -> Memory | None:
        """The current memory, or None; never raises."""
        with self._lock:
            return self._memory

    def set(self, memory: Memory | None) -> Memory | None:
        """Make `memory` current; returns the one it replaced."""
        with self._lock:
            old, self._memory = self._memory, memory
        return old

    def compare_and_set(self, expected: Memory | None, memory: Memory | None) -> bool:
        """Make `memory` current only if `expected` still is (identity); True if it swapped."""
        with self._lock:
            if self._memory is not expected:
                return False
            self._memory = memory
            return True

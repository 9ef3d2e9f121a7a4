"""Read-your-writes: the one wait every client's reads share (`poll`: `ViewMemory`, and through
`Written` the clients of namespace-wide views, LangGraph items and checkpoints).

A client remembers the offsets it wrote on each partition; before a read it waits until the view
has applied them. Views only move forward, so an offset the view was once seen to cover needs no
look again until the client writes more, or readers move to another target (a rebuild: the
alias's `generation` moves), and a read then costs its one round trip.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar, cast

from helix_es.client.backend import Backend
from helix_es.model.errors import ConsistencyTimeout
from helix_es.model.events import Position

# A read-your-writes read polls the view until it shows the write: every FIRST_POLL_CAP seconds at
# most for the first FIRST_POLLS_FOR seconds, every POLL_CAP after.
FIRST_POLL = 0.0005
FIRST_POLL_CAP = 0.002
FIRST_POLLS_FOR = 0.03
POLL_CAP = 0.01

T = TypeVar("T")


def pauses(timeout: float) -> Iterator[float]:
    """The sleeps between a read's looks at the view, until `timeout` seconds have passed since the first.
    A projector's write lands a few ms after the log's ack: look often then, seldom later."""
    started = time.monotonic()
    pause = FIRST_POLL
    while (now := time.monotonic()) - started < timeout:
        yield pause
        pause = min(pause * 2, FIRST_POLL_CAP if now - started < FIRST_POLLS_FOR else POLL_CAP)


async def poll(look: Callable[[], Awaitable[T | None]], timeout: float) -> T | None:
    """`look()` until it gives something other than None, pausing as `pauses(timeout)` says; None when it
    still gave nothing `timeout` seconds after its first answer (the caller raises its ConsistencyTimeout)."""
    found = await look()
    if found is None:
        for pause in pauses(timeout):
            await asyncio.sleep(pause)
            found = await look()
            if found is not None:
                break
    return found


class Behind(Protocol):
    """A view that tells which of a client's writes it has not applied yet."""

    @property
    def name(self) -> str: ...

    async def behind(self, wants: Iterable[Position]) -> Position | None:
        """The first of `wants` this view has not applied (None: it has applied them all)."""
        ...


class Written:
    """The offsets one client wrote, per partition and per scope (a LangGraph thread), and the wait
    for a view to apply them."""

    def __init__(self, namespace: str, *, consistency: str = "read-your-writes", read_timeout: float = 5.0) -> None:
        self.namespace = namespace
        self.eventual = consistency == "eventual"
        self.read_timeout = read_timeout
        self._partitions: dict[tuple[str, int], int] = {}  # (topic, partition) -> the last offset written
        self._scopes: dict[str, Position] = {}  # a scope's last write
        self._covered: dict[tuple[str, int], int] = {}  # the offset the view was last seen to have applied
        self._generation = 0

    def wrote(self, position: Position, scope: str | None = None) -> None:
        where = (position.topic, position.partition)
        self._partitions[where] = max(position.offset, self._partitions.get(where, -1))
        if scope is not None:
            self._scopes[scope] = position

    async def wait(self, view: Behind, *, scope: str | None = None, generation: int = 0) -> None:
        """Wait until `view` has applied this client's writes to `scope` (None: all of them);
        `generation` is the alias's (another target must show them again)."""
        if self.eventual:
            return
        if generation != self._generation:
            self._generation, self._covered = generation, {}
        if scope is None:
            wants = [Position(t, p, o) for (t, p), o in self._partitions.items()]
        else:
            wants = [self._scopes[scope]] if scope in self._scopes else []
        wants = [w for w in wants if self._covered.get((w.topic, w.partition), -1) < w.offset]
        if not wants:
            return
        behind: Position | None = None

        async def applied() -> bool | None:
            nonlocal wants, behind
            if behind is not None:  # asked first next time: the one most likely still behind
                wants = [behind, *(w for w in wants if w != behind)]
            behind = await view.behind(wants)
            return True if behind is None else None

        if await poll(applied, self.read_timeout) is None:
            assert behind is not None
            raise ConsistencyTimeout(
                f"view {view.name} of {self.namespace} has not applied offset {behind.offset} of "
                f"{behind.topic}[{behind.partition}] this client wrote; waited {self.read_timeout}s. "
                "Is a projector running for it (helix-es project --config FILE)? Or set consistency: eventual."
            )
        for w in wants:
            where = (w.topic, w.partition)
            self._covered[where] = max(w.offset, self._covered.get(where, -1))

    async def caught_up(self, backend: Backend, view: Behind, *, scope: str | None = None) -> None:
        """Before a read of `view` through `backend`: follow its alias, then `wait` (not on an inline
        backend: each append was folded before it returned, or `current` caught the view up)."""
        await backend.current(cast(Any, view), self.namespace)  # a view's store, or its projection
        if backend.inline:
            return
        await self.wait(view, scope=scope, generation=getattr(view, "generation", 0))

"""TTLs of the LangGraph checkpointer and store, recorded as forgetting on the log.

Neither deletes rows: a sweep appends `MemoryForgotten` (policy `ttl`) and the views fold it, so
audit says why a thread or item left and a rebuild forgets the same. The checkpointer's TTL takes
the keys of LangGraph's own deployment config (`checkpointer.ttl`): a thread whose newest
checkpoint is older than `default_ttl` minutes is forgotten whole (strategy `delete`). Each
event names the newest checkpoint the sweep saw, so a thread that saved again before the event
landed keeps everything (`helix_es.views.checkpoints.DropThread.spares`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Literal, TypedDict

from helix_es.framework_stores.items import check_ttl
from helix_es.model.errors import InvalidInput
from helix_es.model.events import MemoryForgotten
from helix_es.views.checkpoints import VIEW_NAME, Saved

log = logging.getLogger(__name__)

DEFAULT_SWEEP_MINUTES = 5


class ThreadTTL(TypedDict, total=False):
    """A checkpointer's TTL, as LangGraph's deployment config spells it."""

    strategy: Literal["delete"]  # the thread goes whole
    default_ttl: float | None  # minutes since a thread's newest checkpoint
    sweep_interval_minutes: float | None  # a background sweep's rhythm (none: sweep when asked)


def check_thread_ttl(ttl: object) -> ThreadTTL:
    """A checkpointer's `ttl` checked: known keys, minutes > 0, the strategies helix-es records."""
    if ttl is None:
        return ThreadTTL()
    if not isinstance(ttl, Mapping):
        raise InvalidInput(
            "ttl", f"must be a mapping (default_ttl, sweep_interval_minutes, strategy) or None, got {ttl!r}"
        )
    unknown = sorted(set(ttl) - set(ThreadTTL.__annotations__))
    if unknown:
        raise InvalidInput(f"ttl.{unknown[0]}", f"unknown key; known: {', '.join(sorted(ThreadTTL.__annotations__))}")
    check_ttl(ttl.get("default_ttl"), "ttl.default_ttl")
    check_ttl(ttl.get("sweep_interval_minutes"), "ttl.sweep_interval_minutes")
    if ttl.get("strategy", "delete") != "delete":
        raise InvalidInput("ttl.strategy", f"must be 'delete' (the thread is forgotten whole), got {ttl['strategy']!r}")
    return ThreadTTL(**ttl)  # type: ignore[typeddict-item]


def expired(ts: str, minutes: float, now: datetime) -> bool:
    """Whether a thread whose newest checkpoint was saved at `ts` (the checkpoint's own ISO time) has
    gone `minutes` without another."""
    saved = datetime.fromisoformat(ts)
    if saved.tzinfo is None:
        saved = saved.replace(tzinfo=UTC)
    return saved + timedelta(minutes=minutes) <= now


def thread_forgotten(newest: Saved, minutes: float) -> MemoryForgotten:
    """The event that forgets `newest`'s thread, unless it saved a newer checkpoint since."""
    return MemoryForgotten(
        (VIEW_NAME,), "ttl", f"no checkpoint for {minutes:g} min", session=True, ids=(newest.checkpoint_id,)
    )


class Sweeper:
    """`sweep` every few minutes in the background, until stopped (a failed sweep is logged: the next
    looks again)."""

    def __init__(self, sweep: Callable[[], Awaitable[int]], what: str) -> None:
        self._sweep = sweep
        self._what = what
        self._task: asyncio.Task[None] | None = None

    def start(self, loop: asyncio.AbstractEventLoop, minutes: object) -> asyncio.Task[None]:
        check_ttl(minutes, "sweep_interval_minutes")
        if self._task is None or self._task.done():
            every = float(minutes or DEFAULT_SWEEP_MINUTES) * 60  # type: ignore[arg-type]
            self._task = loop.create_task(self._every(every), name=f"helix {self._what} ttl sweeper")
        return self._task

    async def _every(self, seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await self._sweep()
            except Exception as exc:  # a store hiccup: the next sweep looks again
                log.warning("TTL sweep of %s failed: %s", self._what, exc)

    async def stop(self) -> bool:
        """Stop it; whether one was running."""
        task, self._task = self._task, None
        if task is None or task.done():
            return False
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return True

"""The one driver: how records reach a projection, for the embedded mode, the runner, rebuild and audit.

A batch is one topic-partition's records in offset order. `live` says whether the batch reaches
the end of the log: a projection asks a model (a summary, a paid embedding) only then, and the
events it derives from the answer go to `append`, from here only. History that is replayed holds
what was derived from it already, so a replay is never live until its last batch, if at all.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from helix_es.model.events import Event, Record
from helix_es.projection.protocol import Projection
from helix_es.stores.ports import Applied

T = TypeVar("T")


@contextmanager
def rare_collections() -> Iterator[None]:
    """Fewer garbage collections while folding much: a replay keeps many objects alive, and Python's
    default (a collection every 700 allocations, walking more of them each time) costs a quarter of it."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], 100_000), max(before[1], 50), max(before[2], 100))
    try:
        yield
    finally:
        gc.set_threshold(*before)


Append = Callable[[Event], Awaitable[object]]
Retry = Callable[[str, Callable[[], Awaitable[T]]], Awaitable[T]]


async def once(what: str, call: Callable[[], Awaitable[T]]) -> T:
    """The default retry policy: none."""
    return await call()


def _call(append: Append, event: Event) -> Callable[[], Awaitable[Applied]]:
    async def call() -> Applied:
        await append(event)
        return Applied(0)

    return call


@dataclass
class Driver:
    """Applies batches to `projection` and hands what it derived to `append` (None: dropped).

    `retry(what, call)` wraps each store write and each append (the runner retries outages there).
    """

    projection: Projection
    append: Append | None = None
    retry: Retry[Applied] = once

    async def apply(self, records: Sequence[Record], *, live: bool, where: str = "") -> Applied:
        if not records:
            return Applied(0)
        projection = self.projection
        applied = await self.retry(f"writing {where}", lambda: projection.apply(records, live=live))
        append = self.append
        if append is not None:
            for event in applied.derived:
                await self.retry(f"appending what {where} derived", _call(append, event))
        return applied

    async def replay(
        self,
        records: AsyncIterable[Record] | Iterable[Record],
        *,
        batch: int = 500,
        live_tail: bool = False,
        from_checkpoint: bool = False,
    ) -> int:
        """Apply a stream of records in batches of one topic-partition, at most `batch` each.

        Only the last batch is live, and only with `live_tail`. With `from_checkpoint`, records at or
        below each partition's checkpoint are skipped (the guards would skip them too, at a cost).
        """
        applied = 0
        held: list[Record] = []  # a full batch, applied once we know whether it is the last
        current: list[Record] = []
        checkpoints: dict[tuple[str, int], int] = {}

        async def flush(chunk: list[Record], live: bool) -> None:
            nonlocal applied
            if chunk:
                applied += (await self.apply(chunk, live=live)).events

        async def take(record: Record) -> None:
            nonlocal held, current
            p = record.position
            if from_checkpoint:
                tp = (p.topic, p.partition)
                if tp not in checkpoints:
                    found = await self.projection.checkpoint(p.topic, p.partition)
                    checkpoints[tp] = -1 if found is None else found
                if p.offset <= checkpoints[tp]:
                    return
            head = current[0].position if current else None
            if head is not None and (len(current) >= batch or (head.topic, head.partition) != (p.topic, p.partition)):
                await flush(held, False)
                held, current = current, []
            current.append(record)

        if isinstance(records, AsyncIterable):
            async for record in records:
                await take(record)
        else:
            for record in records:
                await take(record)
        await flush(held, False if current else live_tail)
        await flush(current, live_tail)
        return applied

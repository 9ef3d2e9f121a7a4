"""The log's ports: the event log, the one source of truth (adapters: embedded file, Kafka), and the
live source a projector folds from (adapter: Kafka, `helix_es.log.live`)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, NamedTuple, Protocol

from helix_es.log.check import OnBad
from helix_es.model.events import Event, Position, Record

MAX_EVENT_BYTES = 900_000  # below Kafka's default 1 MiB message limit, with room for headers

OnEnd = Callable[[int, int], None]  # (partition, the offset after the last record the read covered)


class EventLog(Protocol):
    """Append events, read them back in order. Appends return the event's `Position`."""

    topic_prefix: str

    async def append(self, event: Event) -> Position:
        """Write one event durably; raise before writing anything if it is invalid."""
        ...

    async def append_many(self, events: Sequence[Event]) -> list[Position]:
        """Write events of one namespace durably, in order, together; their positions, in order. Raise
        before writing anything if any of them is invalid."""
        ...

    def read(
        self,
        namespace: str,
        *,
        session_id: str | None = None,
        on_bad: OnBad | None = None,
        start: Mapping[int, int] | None = None,
        on_end: OnEnd | None = None,
    ) -> AsyncIterator[Record]:
        """Every event of a namespace (optionally one session) from the start, in log order.

        `start` names, per partition, the first offset to read (a partition it does not name is read
        from its beginning). Once a read has gone through a partition, `on_end` is told the offset
        after what it covered there, records of other sessions and records it skipped included: a
        reader that keeps those offsets and starts there next reads only what came since.

        A record that does not decode raises, unless `on_bad` is given: then every record is judged
        by `helix_es.log.check.Checker`, and one it refuses goes to `on_bad` instead (with a session,
        any that names it by key or envelope) and the read goes on."""
        ...

    async def namespaces(self) -> list[str]:
        """Namespaces that have a log."""
        ...

    async def ends(self, namespace: str) -> dict[int, int]:
        """Each partition of the namespace's log, with the offset its next record will take (none
        without a log): a write's position is below its partition's end once it is on the log."""
        ...

    def partition(self, session_id: str, partitions: int) -> int:
        """The partition, of `partitions`, that the session's events go to."""
        ...

    async def close(self) -> None: ...


class Unclaimed:
    """Writes whose caller stopped waiting (a timeout cancels the wait, not the write under way).

    An append passes its write through `wait`; a retry of the same event (same id) first `take`s
    the write still under way, or done, and waits for it rather than writing the event twice."""

    def __init__(self, keep: int = 10_000) -> None:
        self.keep = keep
        self._writes: dict[uuid.UUID, asyncio.Future[Any]] = {}

    def take(self, event_id: uuid.UUID) -> asyncio.Future[Any] | None:
        """The event's earlier write, unless it failed (then it must be written again)."""
        write = self._writes.pop(event_id, None)
        if write is not None and write.done() and (write.cancelled() or write.exception() is not None):
            return None
        return write

    async def wait(self, event_id: uuid.UUID, write: asyncio.Future[Any]) -> Any:
        try:
            return await asyncio.shield(write)
        except asyncio.CancelledError:
            if len(self._writes) >= self.keep:
                self._writes.pop(next(iter(self._writes)))
            self._writes[event_id] = write
            write.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved: no warning if it fails
            raise

    def remember(self, event_id: uuid.UUID, write: asyncio.Future[Any]) -> None:
        """Remember a write of a batch that raised as a whole: a retry of its event waits for it (or, done,
        takes its result) rather than writing the event twice."""
        if len(self._writes) >= self.keep:
            self._writes.pop(next(iter(self._writes)))
        self._writes[event_id] = write
        write.add_done_callback(lambda f: f.cancelled() or f.exception())


class Partition(NamedTuple):
    """One partition of a namespace's log: its topic and number."""

    topic: str
    partition: int


class RawRecord(Protocol):
    """A record as the log holds it, not decoded yet: its reader decides what a bad one means."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...  # None: a tombstone, which no helix-es writer makes

    @property
    def timestamp(self) -> int: ...  # milliseconds since the epoch, as the log stamped it


Batches = Sequence[tuple[Partition, Sequence[RawRecord]]]  # one partition's records each, in offset order


class LiveSource(Protocol):
    """A view's partitions as they are written: which of them this process folds, and their new records.

    A projector (`projectors.runner`) reads `wanted` when `changed` is set, `assign`s those partitions
    with where each is read from, then `poll`s batches, folds them, and `settle`s with where each
    partition is read from next. Nothing is committed to the log: the view's checkpoints are the truth.
    """

    changed: asyncio.Event  # the partitions wanted changed since `wanted` was last read

    @property
    def assigned(self) -> AbstractSet[Partition]:
        """The partitions assigned now (the last `assign`)."""
        ...

    async def start(self) -> None: ...

    async def stop(self, *, leave: bool) -> None:
        """Stop reading; `leave`: hand this process's share to the others at once (a clean stop), else
        keep it for a restart under the same identity (an outage)."""
        ...

    def wanted(self) -> set[Partition]:
        """The partitions this process should fold now; clears `changed`."""
        ...

    async def assign(
        self, partitions: Iterable[Partition], positions: Mapping[Partition, int], fresh: AbstractSet[Partition]
    ) -> None:
        """Fold `partitions` from `positions` (every one of them); the `fresh` ones were never folded. An
        offset below where a partition's log begins reads from its beginning (here and in `seek`)."""
        ...

    async def poll(self, max_records: int) -> Batches:
        """Records come since the last poll, `max_records` at most in all; waits a little for some."""
        ...

    async def seek(self, partition: Partition, offset: int) -> None:
        """Read `partition` from `offset` next."""
        ...

    async def settle(self, positions: Mapping[Partition, int]) -> None:
        """After the batches of `poll` are folded, with where each partition is read from next."""
        ...

    def highwater(self, partition: Partition) -> int | None:
        """The end of `partition` as of the last poll, if known: a batch that reaches it is live."""
        ...

"""The store ports: every interface a store technology implements, and the data they pass.

A technology (`helix_es.stores.memory`, `.redis`, `.postgres`, `.file`) is one package holding
every adapter of it; `helix_es.stores.registry` maps a store kind to them.

Session views (`ViewStore`): every store keeps, per view and session, the state and the offset of the last event it
applied (the session guard), and per view and topic-partition a checkpoint. `apply`
writes states, guards and the checkpoint in one atomic step, and refuses (`StaleWrite`)
if a session's guard moved since it was loaded, so two projectors never interleave.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from helix_es.model.errors import HelixError
from helix_es.model.events import Event, Position, Record, Serialized
from helix_es.views.base import State, View
from helix_es.views.checkpoints import Saved, WriteRow
from helix_es.views.items import StoredItem
from helix_es.views.rows import Row, RowChange, Scan, Table


@dataclass(frozen=True, slots=True)
class Applied:
    """What one `apply` did: events folded, and derived events the driver must append to the log."""

    events: int
    derived: tuple[Event, ...] = ()


@dataclass(frozen=True, slots=True)
class SessionKey:
    namespace: str
    session_id: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A session's view state and the offset of the last event folded into it (None: none yet)."""

    state: State
    applied: int | None


EMPTY = Snapshot((), None)


@dataclass(frozen=True, slots=True)
class Change:
    key: SessionKey
    before: Snapshot
    after: State
    applied: int


class StaleWrite(HelixError):
    """A session's guard moved between load and apply: another projector wrote it. Reload, retry."""


class RetiredLayout(HelixError):
    """A view's data is in a layout this version no longer reads: rebuild the view into a new target.

    `namespace` is the one refused, or None when the whole view is (a PostgreSQL table shared by
    every namespace); `layout` says what was found, as the store names it."""

    def __init__(self, view: str, namespace: str | None, layout: str) -> None:
        self.view, self.namespace = view, namespace
        base = view.partition("@")[0]  # a rebuild target's view: what `--view` takes
        what = "its data" if namespace is None else f"namespace {namespace!r}"
        super().__init__(
            f"view {view!r} keeps {what} in {layout}, which this version no longer reads: rebuild the view into "
            f"rows with `helix-es rebuild --config <your config> --view {base}` (readers switch when it is done; "
            "add --drop-old to delete the old data after the switch)"
        )


class CheckpointLost(HelixError):
    """A partition checkpoint this store had seen is gone (a Redis FLUSHALL, or a restart without
    persistence): nothing was written. The view's data went with it, so refold the partition from
    the start of the log (the projector does)."""


class ViewStore(Protocol):
    kind: str  # memory | redis | postgres: part of the projector's consumer group

    async def load(self, view: View, keys: Sequence[SessionKey]) -> dict[SessionKey, Snapshot]:
        """Current snapshots of several sessions, in one round trip where the store allows."""
        ...

    async def apply(self, view: View, topic: str, partition: int, changes: Sequence[Change], checkpoint: int) -> None:
        """Write the changes and the partition checkpoint atomically, or raise `StaleWrite`."""
        ...

    async def checkpoint(self, view: View, topic: str, partition: int) -> int | None:
        """The last offset of this topic-partition the view applied (None: nothing yet)."""
        ...

    async def read(self, view: View, key: SessionKey, *, guard: bool = True) -> Snapshot:
        """One session's snapshot, state and guard read together. With `guard=False` only the
        state is read (`applied` is then None): enough once a reader has seen its writes land."""
        ...

    async def drop(self, view: View, namespaces: Collection[str], topics: Collection[str]) -> None:
        """Delete every session of `view` in `namespaces` (states and guards) and the view's
        checkpoints of `topics`: a rebuild target readers left. Other namespaces' data stays."""
        ...

    async def sessions(self, view: View, namespace: str) -> list[str]:
        """The sessions of `namespace` the view holds (has applied an event of), sorted."""
        ...

    async def forget_checkpoints(self, view: View, partitions: Collection[tuple[str, int]]) -> None:
        """Delete these (topic, partition) checkpoints of `view` (a rebuild's scratch ones)."""
        ...

    async def close(self) -> None: ...


# --- aliases: which target of a view readers use ---


class AliasStore(Protocol):
    kind: str
    cheap: bool  # reading the alias costs no round trip: readers may check it on every read

    async def get(self, alias: str) -> str | None: ...

    async def switch(self, alias: str, target: str, *, expect: str, base: str) -> str | None:
        """Point `alias` at `target` if it resolves to `expect` now (no alias resolves to `base`).

        Atomic; returns None on success, else what it resolves to (someone else switched it).
        """
        ...

    async def targets(self, alias: str) -> set[str]: ...

    async def add_target(self, alias: str, target: str) -> None: ...

    async def forget_target(self, alias: str, target: str) -> None: ...

    async def announce(self, alias: str, target: str, ttl: float) -> None:
        """A projector service projects `target` (for `ttl` seconds, unless announced again; 0 withdraws)."""
        ...

    async def served(self, alias: str) -> set[str]:
        """The targets some projector service announced it projects, and still does."""
        ...

    async def close(self) -> None: ...


# --- data keys (crypto-shredding) ---


@dataclass(frozen=True)
class KeyRow:
    """One data key of a session, as its store keeps it: wrapped, or erased (a tombstone)."""

    namespace: str
    session_id: str
    key_id: str
    wrapped_key: bytes | None = field(repr=False)  # None once erased
    wrapped_by: str | None  # id of the master key that wrapped it
    created_at: datetime
    erased_at: datetime | None = None

    @property
    def erased(self) -> bool:
        return self.erased_at is not None


@runtime_checkable
class KeyStore(Protocol):
    """Where wrapped data keys live; `erase` must really delete the wrapped key."""

    kind: str

    async def rows(self, namespace: str, session_id: str) -> list[KeyRow]:
        """Every key row of the session, erased ones included, oldest first."""
        ...

    async def insert(self, row: KeyRow) -> None:
        """Keep `row`, unless the session already has a live key (a racing writer made it): then nothing."""
        ...

    async def erase(self, namespace: str, session_id: str, at: datetime) -> list[str]:
        """Delete every live wrapped key of the session, keeping tombstones; the ids erased by this call."""
        ...

    async def close(self) -> None: ...


# --- idempotency keys: which write a retry repeats ---


@dataclass(frozen=True, slots=True)
class Claim:
    """A keyed event of a session, at `offset` of its partition (a session keeps to one partition)."""

    key: SessionKey
    idempotency_key: str
    offset: int


class IdempotencyStore(Protocol):
    """Per view and session, the idempotency keys seen and the offset of each one's first event.

    A projection claims a batch's keys before it folds the batch: an event whose key was first seen
    at another offset is a retry. Claiming again at the same offset (a re-delivered batch, a crash
    between claim and fold) finds the event itself, so claims need not be atomic with the fold.
    Each session keeps at least its newest `REMEMBERED_KEYS` keys.
    """

    kind: str

    async def claim(self, view: str, claims: Sequence[Claim], *, ttl: float | None = None) -> list[int]:
        """For each claim in order, the offset of its key's first event (its own when the key is new).
        `ttl`: seconds the session's keys live after this claim (a view whose sessions expire)."""
        ...

    async def drop(self, view: str, namespaces: Collection[str]) -> None:
        """Forget `view`'s keys of every session in `namespaces` (a rebuild target readers left)."""
        ...

    async def close(self) -> None: ...


# --- LangGraph store items (helix_es.views.items) ---


class ItemStore(Protocol):
    """A namespace-wide view of LangGraph store items kept by one technology; a `Projection` by shape.

    Reads take `now` (expired items are never returned) and the helix namespace; items are named by
    their LangGraph namespace path and key.
    """

    name: str
    kind: str

    async def checkpoint(self, topic: str, partition: int) -> int | None: ...

    async def behind(self, wants: Iterable[Position]) -> Position | None:
        """The first of `wants` this view has not applied yet (None: it has applied them all)."""
        ...

    async def get_item(self, namespace: str, path: tuple[str, ...], key: str, now: datetime) -> StoredItem | None: ...

    async def find_items(
        self,
        namespace: str,
        prefix: tuple[str, ...],
        where: Mapping[str, Any] | None,
        limit: int,
        offset: int,
        now: datetime,
        query: str | None = None,
    ) -> list[StoredItem]:
        """Live items under `prefix` whose value passes `where`, in `helix_es.views.items.order`; with a
        `query` and an index, ranked by similarity (`helix_es.views.items.rank`)."""
        ...

    async def item_namespaces(
        self,
        namespace: str,
        conditions: Sequence[tuple[str, tuple[str, ...]]],
        max_depth: int | None,
        limit: int,
        offset: int,
        now: datetime,
    ) -> list[tuple[str, ...]]: ...

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None: ...

    async def close(self) -> None: ...


# --- rows of a namespace-wide view (helix_es.views.rows) ---


class RowStore(Protocol):
    """One view's tables kept by one technology: it applies row changes, knowing no event type.

    `apply` writes one partition's changes, in order, and its checkpoint in one atomic step (on a
    Redis Cluster: one step per namespace, then the checkpoint; every change is idempotent, so a
    step applied again changes nothing). It refuses with `StaleWrite` when the stored checkpoint is
    no longer `after` (another projector moved it: reload and fold again), and with
    `CheckpointLost` when one this store had seen is gone.
    """

    name: str  # the view's (or its rebuild target's) name: its marks and checkpoints
    kind: str
    tables: Mapping[str, Table]

    async def apply(
        self, topic: str, partition: int, changes: Sequence[RowChange], checkpoint: int, *, after: int | None
    ) -> None: ...

    async def checkpoint(self, topic: str, partition: int) -> int | None: ...

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        """Move the checkpoint past records that were dead-lettered (never backwards)."""
        ...

    async def scan(self, scan: Scan, want: Position | None = None) -> list[Row] | None:
        """The rows `scan` asks for; None while the partition of `want` is behind `want.offset`
        (the checkpoint is read in the same round trip as the rows)."""
        ...

    async def mark(self, namespace: str, mark: str) -> int | None: ...

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        """Delete the rows and marks of `namespaces` and the view's checkpoints of `topics`."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class BulkLoad(Protocol):
    """A store that can load a rebuild's target without its search indexes, built once at the end."""

    def defer_indexes(self) -> None:
        """Before first use: leave the search indexes for `build_indexes` (every process of the load)."""
        ...

    async def start_load(self) -> None:
        """The rebuild's own process, before any process folds into the target: a load begins (defers too)."""
        ...

    async def build_indexes(self) -> None:
        """The indexes deferred, over every row now in the target, before readers are switched to it."""
        ...


# --- a store kind: what one technology offers ---


# LangGraph checkpoint views (`helix_es.views.checkpoints`): rows as the events carry them, still
# serialized, so a store never needs the saver's serializer. `apply` folds one topic-partition's
# records and moves the partition checkpoint in one atomic step; records at or below the
# checkpoint (a re-delivery) change nothing.
class CheckpointStore(Protocol):
    name: str
    kind: str  # memory | redis | postgres

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied: ...

    async def checkpoint(self, topic: str, partition: int) -> int | None: ...

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        """Move the checkpoint past records that were dead-lettered (never backwards)."""
        ...

    async def get(self, namespace: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None) -> Saved | None:
        """The checkpoint `checkpoint_id` of the thread's `checkpoint_ns` (None: its latest)."""
        ...

    async def listing(
        self,
        namespace: str,
        thread_id: str | None,
        checkpoint_ns: str | None,
        before: str | None,
        limit: int | None,
    ) -> list[Saved]:
        """Checkpoints newest first (per thread, threads in order); None for a thread or ns: all of them."""
        ...

    async def latest(self, namespace: str) -> list[Saved]:
        """Each thread's newest checkpoint (by id, over its checkpoint namespaces), threads in order:
        what a TTL sweep reads."""
        ...

    async def blobs(
        self, namespace: str, thread_id: str, checkpoint_ns: str, versions: Sequence[tuple[str, str]]
    ) -> dict[str, Serialized]:
        """The values of (channel, version) pairs that have one (an "empty" blob is left out)."""
        ...

    async def writes(self, namespace: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> list[WriteRow]:
        """A checkpoint's pending writes, in the order they were first written."""
        ...

    async def runs(self, namespace: str, run_ids: Collection[str]) -> list[str]:
        """The threads that hold a checkpoint of one of these runs."""
        ...

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        """Delete every thread of `namespaces` and the view's checkpoints of `topics` (a rebuild target)."""
        ...

    async def close(self) -> None: ...

"""The checkpoint view: a LangGraph thread's checkpoints, blobs and pending writes, folded from its events.

Pure and serializer-free: values stay as the saver's serializer wrote them (`Serialized`), and
the fold reads only the fields the events carry in the clear (ids, run_id, write indexes), so a
projector needs no LangGraph and no serializer.

The state is a thread's rows, not one value: every store keeps one row per checkpoint, per
channel blob and per pending write, and each event adds or deletes rows. A put is then one
insert, whatever the thread's length; rewriting a thread's whole state on every put would cost
its history's size per step. `apply` is the in-place step the stores mirror; `fold` is the pure
one (a copy first), the reference for tests and rebuilds.

Forgetting: a `MemoryForgotten` naming this view with `session` set drops its thread (the event's
session), as `CheckpointsDeleted(scope="thread")` does. Its `ids`, when it has some, name the
newest checkpoint the forgetting saw (a TTL sweep's): a thread holding a newer one was used after
the sweep looked and keeps every row (`DropThread.spares`); `offsets` mean nothing here.
A retried one (`Record.duplicate_of`, `record_op`) is applied as nothing: it would drop what the
thread saved since the first.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from helix_es.model.errors import ConfigError
from helix_es.model.events import (
    CheckpointSaved,
    CheckpointsDeleted,
    Event,
    MemoryCleared,
    MemoryForgotten,
    Record,
    Serialized,
    SessionErased,
    WritesSaved,
)
from helix_es.views.base import IndexView

VIEW_NAME = "checkpoints"
EMPTY = "empty"  # a blob's type when the channel has no value at that version


@dataclass(frozen=True)
class Checkpoints(IndexView):
    """The view's options: the `checkpoints:` mapping of a config, a memory of type `langgraph-checkpoints`."""

    kind: ClassVar[str] = "langgraph-checkpoints"
    adapter: ClassVar[str | None] = "checkpoints"

    # Seal every value with the thread's data key (HELIX_KEY_STORE): `helix-es forget` can shred a thread.
    encryption: bool = False

    @property
    def name(self) -> str:
        return VIEW_NAME  # its consumer group, keys, rows and checkpoints, as before it was a view type

    @classmethod
    def from_config(cls, options: Mapping[str, Any], where: str) -> Checkpoints:
        encryption = options.get("encryption", False)
        if not isinstance(encryption, bool):
            raise ConfigError(f"{where}.encryption", f"must be true or false, got {encryption!r}")
        return cls(encryption=encryption)


@dataclass(frozen=True, slots=True)
class Saved:
    """One checkpoint row: what `CheckpointSaved` carries, without its blobs."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    checkpoint: Serialized
    metadata: Serialized
    run_id: str | None


@dataclass(frozen=True, slots=True)
class WriteRow:
    """One pending write row of a checkpoint."""

    task_id: str
    idx: int
    channel: str
    value: Serialized
    task_path: str


BlobKey = tuple[str, str, str]  # (checkpoint_ns, channel, version)
WritesKey = tuple[str, str]  # (checkpoint_ns, checkpoint_id)


@dataclass
class Thread:
    """A thread's rows. `writes` keep their first insertion order (a replaced write keeps its place)."""

    checkpoints: dict[str, dict[str, Saved]] = field(default_factory=dict)  # ns -> id -> row
    blobs: dict[BlobKey, Serialized] = field(default_factory=dict)
    writes: dict[WritesKey, dict[tuple[str, int], WriteRow]] = field(default_factory=dict)

    def copy(self) -> Thread:
        return Thread(
            {ns: dict(rows) for ns, rows in self.checkpoints.items()},
            dict(self.blobs),
            {k: dict(w) for k, w in self.writes.items()},
        )


def keeps(existing: bool, idx: int) -> bool:
    """Whether a pending write at an (task_id, idx) already held stays: LangGraph's special
    channels (negative idx) replace, the others never overwrite (as `InMemorySaver.put_writes`)."""
    return existing and idx >= 0


# --- the view's ops: what an event means to a thread's rows, the one vocabulary every store applies ---

Ref = tuple[str, str]  # a checkpoint's (checkpoint_ns, checkpoint_id)


@dataclass(frozen=True, slots=True)
class PutCheckpoint:
    """Upsert one checkpoint row and its blobs (one per key: the last an event names)."""

    row: Saved
    blobs: tuple[tuple[BlobKey, Serialized], ...]

    @property
    def ref(self) -> Ref:
        return (self.row.checkpoint_ns, self.row.checkpoint_id)


@dataclass(frozen=True, slots=True)
class PutWrites:
    """Pending writes of one checkpoint, one per (task_id, idx) as `keeps` leaves them within the op:
    a row with `replaces` overwrites a held one, the others are inserted only where none is held."""

    ref: Ref
    rows: tuple[WriteRow, ...]

    @staticmethod
    def replaces(row: WriteRow) -> bool:
        return row.idx < 0


@dataclass(frozen=True, slots=True)
class DeleteCheckpoints:
    """Delete checkpoint rows with their writes (which: `doomed`), and the blobs listed."""

    scope: str  # "checkpoints" (those listed), "runs" (those of `run_ids`), "keep_latest"
    listed: tuple[Ref, ...] = ()
    run_ids: tuple[str, ...] = ()
    blobs: tuple[BlobKey, ...] = ()

    def doomed(self, held: Mapping[Ref, str | None]) -> list[Ref]:
        """Of the checkpoints `held` (each with its run id), those the op deletes."""
        if self.scope == "checkpoints":
            return [ref for ref in self.listed if ref in held]
        if self.scope == "runs":
            runs = set(self.run_ids)
            return [ref for ref, run in held.items() if run is not None and run in runs]
        latest: dict[str, str] = {}
        for cns, cid in held:
            latest[cns] = max(latest.get(cns, cid), cid)
        return [(cns, cid) for cns, cid in held if cid != latest[cns]]


@dataclass(frozen=True, slots=True)
class DropThread:
    """Every row of the thread goes: a deleted thread, a cleared, erased or forgotten session.

    `seen`: the newest checkpoint id the forgetting saw (None: drop whatever the thread holds)."""

    seen: str | None = None

    def spares(self, held: Collection[Ref]) -> bool:
        """Whether the thread stays: it holds a checkpoint newer than the one the forgetting saw
        (ids are time-ordered, as `newest_first` reads them)."""
        return self.seen is not None and any(cid > self.seen for _, cid in held)


CheckpointOp = PutCheckpoint | PutWrites | DeleteCheckpoints | DropThread


def op_of(event: Event) -> CheckpointOp | None:
    """What `event` does to its thread's rows (None: nothing; it is not this view's)."""
    p = event.payload
    if isinstance(p, CheckpointSaved):
        row = Saved(
            event.session_id,
            p.checkpoint_ns,
            p.checkpoint_id,
            p.parent_checkpoint_id,
            p.checkpoint,
            p.metadata,
            p.run_id,
        )
        blobs = {(p.checkpoint_ns, b.channel, b.version): b.value for b in p.blobs}
        return PutCheckpoint(row, tuple(blobs.items()))
    if isinstance(p, WritesSaved):
        rows: dict[int, WriteRow] = {}
        for w in p.writes:
            if not keeps(w.idx in rows, w.idx):
                rows[w.idx] = WriteRow(p.task_id, w.idx, w.channel, w.value, p.task_path)
        return PutWrites((p.checkpoint_ns, p.checkpoint_id), tuple(rows.values()))
    if isinstance(p, CheckpointsDeleted) and p.scope != "thread":
        return DeleteCheckpoints(p.scope, tuple(p.checkpoints), tuple(p.run_ids), tuple(p.blobs))
    if isinstance(p, CheckpointsDeleted | MemoryCleared | SessionErased):
        return DropThread()
    if isinstance(p, MemoryForgotten) and p.session and p.names(VIEW_NAME):
        return DropThread(max(p.ids) if p.ids else None)  # the view's name is always VIEW_NAME
    return None


def record_op(record: Record) -> CheckpointOp | None:
    """`op_of` a logged record: a retried forgetting (`duplicate_of`) is nothing, so it cannot drop
    what the thread saved after the forgetting it repeats."""
    if record.duplicate_of is not None and isinstance(record.event.payload, MemoryForgotten):
        return None
    return op_of(record.event)


def held(thread: Thread) -> dict[Ref, str | None]:
    """A thread's checkpoints, each with its run id: what `DeleteCheckpoints.doomed` reads."""
    return {(ns, cid): s.run_id for ns, rows in thread.checkpoints.items() for cid, s in rows.items()}


def apply(thread: Thread, event: Event) -> Thread:
    """Fold `event` into `thread` in place (and return it): `apply_op` of its op."""
    op = op_of(event)
    return thread if op is None else apply_op(thread, op)


def apply_op(thread: Thread, op: CheckpointOp) -> Thread:
    """The in-place step every store mirrors."""
    if isinstance(op, PutCheckpoint):
        thread.checkpoints.setdefault(op.row.checkpoint_ns, {})[op.row.checkpoint_id] = op.row
        thread.blobs.update(op.blobs)
    elif isinstance(op, PutWrites):
        rows = thread.writes.setdefault(op.ref, {})
        for w in op.rows:
            if not keeps((w.task_id, w.idx) in rows, w.idx):
                rows[(w.task_id, w.idx)] = w
    elif isinstance(op, DeleteCheckpoints):
        for ns, cid in op.doomed(held(thread)):
            del thread.checkpoints[ns][cid]
            thread.writes.pop((ns, cid), None)
        for gone in op.blobs:
            thread.blobs.pop(gone, None)
    elif not op.spares(held(thread)):
        thread.checkpoints.clear()
        thread.blobs.clear()
        thread.writes.clear()
    return thread


def fold(thread: Thread, event: Event) -> Thread:
    """The pure fold: a new state, `thread` unchanged."""
    return apply(thread.copy(), event)


def newest_first(rows: dict[str, Saved]) -> list[Saved]:
    """Checkpoint ids are time-ordered (uuid6): the latest sorts last."""
    return [rows[cid] for cid in sorted(rows, reverse=True)]

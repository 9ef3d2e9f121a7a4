"""The checkpoint view: a LangGraph thread's checkpoints, blobs and pending writes, folded from its events.

Pure and serializer-free: values stay as the saver's serializer wrote them (`Serialized`), and
the fold reads only the fields the events carry in the clear (ids, run_id, write indexes), so a
projector needs no LangGraph and no serializer.

The state is a thread's rows, not one value: every store keeps one row per checkpoint, per
channel blob and per pending write, and each event adds or deletes rows. A put is then one
insert, whatever the thread's length; rewriting a thread's whole state on every put would cost
its history's size per step. `apply` is the in-place step the stores mirror; `fold` is the pure
one (a copy first), the reference for tests and rebuilds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from helix_es.model.errors import ConfigError
from helix_es.model.events import (
    ChannelBlob,
    CheckpointSaved,
    CheckpointsDeleted,
    Event,
    MemoryCleared,
    PendingWrite,
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


def saved_row(thread_id: str, payload: CheckpointSaved) -> Saved:
    return Saved(
        thread_id,
        payload.checkpoint_ns,
        payload.checkpoint_id,
        payload.parent_checkpoint_id,
        payload.checkpoint,
        payload.metadata,
        payload.run_id,
    )


def keeps(existing: bool, idx: int) -> bool:
    """Whether a pending write at an (task_id, idx) already held stays: LangGraph's special
    channels (negative idx) replace, the others never overwrite (as `InMemorySaver.put_writes`)."""
    return existing and idx >= 0


def one_per_row(writes: Sequence[PendingWrite]) -> list[PendingWrite]:
    """One event's writes as the rows they leave, one per idx (its task is the event's), as `apply`
    folds them: for stores that write an event's rows in one statement, which may hit a row once."""
    rows: dict[int, PendingWrite] = {}
    for w in writes:
        if not keeps(w.idx in rows, w.idx):
            rows[w.idx] = w
    return list(rows.values())


def last_blobs(blobs: Sequence[ChannelBlob]) -> list[ChannelBlob]:
    """One event's blobs, one per (channel, version): the last, as `apply` keeps."""
    return list({(b.channel, b.version): b for b in blobs}.values())


def doomed(thread: Thread, payload: CheckpointsDeleted) -> list[tuple[str, str]]:
    """The (checkpoint_ns, checkpoint_id) rows a deletion removes (scope "thread": all of them)."""
    if payload.scope == "checkpoints":
        return [(ns, cid) for ns, cid in payload.checkpoints if cid in thread.checkpoints.get(ns, ())]
    if payload.scope == "runs":
        runs = set(payload.run_ids)
        return [(ns, cid) for ns, rows in thread.checkpoints.items() for cid, s in rows.items() if s.run_id in runs]
    if payload.scope == "keep_latest":
        return [(ns, cid) for ns, rows in thread.checkpoints.items() for cid in sorted(rows)[:-1]]
    return [(ns, cid) for ns, rows in thread.checkpoints.items() for cid in rows]


def apply(thread: Thread, event: Event) -> Thread:
    """Fold `event` into `thread` in place (and return it). Events of other kinds leave it as it is,
    but a cleared or forgotten session drops every row, like a deleted thread."""
    p = event.payload
    if isinstance(p, CheckpointSaved):
        thread.checkpoints.setdefault(p.checkpoint_ns, {})[p.checkpoint_id] = saved_row(event.session_id, p)
        for blob in p.blobs:
            thread.blobs[(p.checkpoint_ns, blob.channel, blob.version)] = blob.value
    elif isinstance(p, WritesSaved):
        rows = thread.writes.setdefault((p.checkpoint_ns, p.checkpoint_id), {})
        for w in p.writes:
            key = (p.task_id, w.idx)
            if not keeps(key in rows, w.idx):
                rows[key] = WriteRow(p.task_id, w.idx, w.channel, w.value, p.task_path)
    elif isinstance(p, CheckpointsDeleted):
        if p.scope == "thread":
            return _clear(thread)
        for ns, cid in doomed(thread, p):
            del thread.checkpoints[ns][cid]
            thread.writes.pop((ns, cid), None)
        for gone in p.blobs:
            thread.blobs.pop(gone, None)
    elif isinstance(p, (MemoryCleared, SessionErased)):
        return _clear(thread)
    return thread


def _clear(thread: Thread) -> Thread:
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

"""Every view of a config against a clean fold of its log: what the fault tests and the crash stress loop assert.

Per session view: each session's state and guard, and every partition's checkpoint; per long-term
view: the namespace's messages and checkpoints; per vector view (PostgreSQL): the messages indexed,
by position, and checkpoints; per LangGraph checkpoint view: each thread's checkpoints, the writes
and blobs of every checkpoint and blob the log names; per LangGraph store items view: every item,
expired or not. Retries (idempotency keys seen before) are marked as the projections mark them.
The clean folds are the views' own pure folds. A difference raises `Mismatch` naming the view, the
session and the first differing row, so that a failure under stress says enough to replay it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import asyncpg

from helix_es.config import MemoryConfig, load_config
from helix_es.model.events import CheckpointSaved, CheckpointsDeleted, WritesSaved
from helix_es.projection.factory import location, open_checkpoints, open_items, open_projection, open_store
from helix_es.projection.fold import project
from helix_es.projection.idempotency import mark_duplicates
from helix_es.projection.long_term import LongTermRows
from helix_es.stores.memory.idempotency import MemoryIdempotency
from helix_es.stores.memory.vector import MemoryVectorStore
from helix_es.stores.memory.views import MemoryStore
from helix_es.stores.ports import SessionKey
from helix_es.views.base import View
from helix_es.views.checkpoints import EMPTY, BlobKey, Checkpoints, Saved, Thread, WriteRow, apply
from helix_es.views.items import Items, StoredItem, fold_batch, ops
from helix_es.views.vector import Vector


class Mismatch(AssertionError):
    """A view is not the clean fold of the log."""


def by_partition(records: Sequence[Any]) -> dict[int, list[Any]]:
    parts: dict[int, list[Any]] = defaultdict(list)
    for r in records:
        parts[r.position.partition].append(r)
    return parts


def first_difference(got: Sequence[Any], want: Sequence[Any]) -> str:
    for i, (a, b) in enumerate(zip(got, want, strict=False)):
        if a != b:
            return f"row {i}: stored {a!r}\n      clean fold {b!r}"
    i = min(len(got), len(want))
    if len(got) == len(want):
        return "no row differs"
    which, extra = ("stored only", got[i]) if len(got) > i else ("clean fold only", want[i])
    return f"row {i} ({which}; stored {len(got)} rows, clean fold {len(want)}): {extra!r}"


async def compare_views(
    cfg: dict[str, Any], ns: str, records: Sequence[Any], last: dict[int, int], topic: str, *, what: str = ""
) -> None:
    """Raise `Mismatch` unless every view of `cfg` (one agent each) is the clean fold of `records`, the log
    of namespace `ns` (`topic`), whose partitions end at `last` (poison records included). `what` follows
    the view's name in messages."""
    memories = [load_config(cfg, agent=agent).memory for agent in range(len(cfg["agents"]))]
    await compare_memories(memories, ns, records, last, topic, what=what)


async def compare_memories(
    memories: Sequence[MemoryConfig],
    ns: str,
    records: Sequence[Any],
    last: dict[int, int],
    topic: str,
    *,
    what: str = "",
) -> None:
    """`compare_views` for memories (session views, long-term, vector, LangGraph checkpoints and items)."""
    assert records, "the log is empty"
    parts = by_partition(records)
    keys = sorted({SessionKey(ns, r.event.session_id) for r in records}, key=lambda k: k.session_id)
    for memory in memories:
        view = memory.view
        label = f"{view.name} ({memory.store}){what}"
        marks = MemoryIdempotency()
        marked = [list(await mark_duplicates(marks, view.name, batch)) for batch in parts.values()]
        if isinstance(view, Vector):
            checkpoints = await _compare_vectors(memory, ns, list(parts.values()), label, topic)
        elif isinstance(view, Checkpoints):
            checkpoints = await _compare_checkpoints(memory, ns, marked, label, topic)
        elif isinstance(view, Items):
            checkpoints = await _compare_items(memory, ns, marked, label, topic)
        elif isinstance(view, View):
            clean = MemoryStore()
            for batch in marked:
                for i in range(0, len(batch), 5000):
                    await project(view, clean, batch[i : i + 5000])
            expected = await clean.load(view, keys)
            store = open_store(memory)
            try:
                stored = await store.load(view, keys)
                checkpoints = {p: await store.checkpoint(view, topic, p) for p in parts}
            finally:
                await store.close()
            for k in keys:
                if stored[k].state != expected[k].state:
                    differs = first_difference(stored[k].state, expected[k].state)
                    raise Mismatch(f"{label}, session {k.session_id}: {differs}")
                if stored[k].applied != expected[k].applied:
                    raise Mismatch(
                        f"{label}, session {k.session_id}: guard {stored[k].applied}, clean fold {expected[k].applied}"
                    )
        else:
            clean_lt = LongTermRows.in_process()
            for batch in marked:
                await clean_lt.apply(batch, live=False)
            projection = open_projection(memory)
            try:
                got = await projection.get(keys[0], None) or []
                checkpoints = {p: await projection.checkpoint(topic, p) for p in parts}
            finally:
                await projection.close()
            want = await clean_lt.get(keys[0], None) or []
            if got != want:
                raise Mismatch(f"{label} (namespace-wide): {first_difference(got, want)}")
        if checkpoints != {p: last[p] for p in parts}:
            raise Mismatch(f"{label}: checkpoints {checkpoints}, the log ends at {last}")


def _unmarked(record: Any) -> bool:
    return getattr(record, "duplicate_of", None) is None


async def _compare_checkpoints(
    memory: MemoryConfig, ns: str, parts: list[list[Any]], label: str, topic: str
) -> dict[int, int | None]:
    """Each thread's checkpoint rows, the pending writes of every checkpoint the log names and every blob
    it names, as the store's reads (the saver's) return them, against the view's own fold of the log."""
    threads: dict[str, Thread] = {}
    named: dict[str, set[tuple[str, str]]] = defaultdict(set)  # thread -> (checkpoint_ns, checkpoint_id)
    blobs: dict[str, set[BlobKey]] = defaultdict(set)
    for batch in parts:
        for r in filter(_unmarked, batch):
            e = r.event
            apply(threads.setdefault(e.session_id, Thread()), e)
            p = e.payload
            if isinstance(p, CheckpointSaved | WritesSaved):
                named[e.session_id].add((p.checkpoint_ns, p.checkpoint_id))
            if isinstance(p, CheckpointSaved):
                blobs[e.session_id].update((p.checkpoint_ns, b.channel, b.version) for b in p.blobs)
            if isinstance(p, CheckpointsDeleted):
                named[e.session_id].update(p.checkpoints)
                blobs[e.session_id].update(p.blobs)
    store = open_checkpoints(memory)
    try:
        for tid in sorted(threads):
            thread = threads[tid]
            got_rows = sorted(await store.listing(ns, tid, None, None, None), key=_saved_key)
            want_rows = sorted((s for rows in thread.checkpoints.values() for s in rows.values()), key=_saved_key)
            if got_rows != want_rows:
                raise Mismatch(f"{label}, thread {tid}, checkpoints: {first_difference(got_rows, want_rows)}")
            for cns, cid in sorted(named[tid]):
                got_writes = sorted(await store.writes(ns, tid, cns, cid), key=_write_key)
                want_writes = sorted(thread.writes.get((cns, cid), {}).values(), key=_write_key)
                if got_writes != want_writes:
                    differs = first_difference(got_writes, want_writes)
                    raise Mismatch(f"{label}, thread {tid}, writes of {cns!r}/{cid}: {differs}")
            for cns, channel, version in sorted(blobs[tid]):
                got_blob = await store.blobs(ns, tid, cns, [(channel, version)])
                value = thread.blobs.get((cns, channel, version))
                want_blob = {channel: value} if value is not None and value.type != EMPTY else {}
                if got_blob != want_blob:
                    where = f"{label}, thread {tid}, blob {cns!r}/{channel}/{version}"
                    raise Mismatch(f"{where}: stored {got_blob}, clean fold {want_blob}")
        every = {s.thread_id for s in await store.listing(ns, None, None, None, None)}
        if every != {tid for tid, t in threads.items() if any(t.checkpoints.values())}:
            raise Mismatch(f"{label}: the threads listed are {sorted(every)}")
        return {b[0].position.partition: await store.checkpoint(topic, b[0].position.partition) for b in parts}
    finally:
        await store.close()


def _saved_key(s: Saved) -> tuple[str, str]:
    return s.checkpoint_ns, s.checkpoint_id


def _write_key(w: WriteRow) -> tuple[str, int]:
    return w.task_id, w.idx


LONG_AGO = datetime(1970, 1, 2, tzinfo=UTC)  # a read's "now" at which no item of the log has expired yet


async def _compare_items(
    memory: MemoryConfig, ns: str, parts: list[list[Any]], label: str, topic: str
) -> dict[int, int | None]:
    """Every item (expired ones too: they stay until replaced or deleted) against the view's own batch fold."""
    want: list[StoredItem] = []
    for batch in parts:
        _, _, batch_ops = ops([r for r in batch if _unmarked(r)])
        folded, _ = fold_batch({}, batch_ops, {})
        want += folded.values()
    want.sort(key=_item_key)
    store = open_items(memory)
    try:
        got = sorted(await store.find_items(ns, (), None, 1 << 30, 0, LONG_AGO), key=_item_key)
        if got != want:
            raise Mismatch(f"{label} (namespace-wide, items by path and key): {first_difference(got, want)}")
        return {b[0].position.partition: await store.checkpoint(topic, b[0].position.partition) for b in parts}
    finally:
        await store.close()


def _item_key(item: StoredItem) -> tuple[tuple[str, ...], str]:
    return item.namespace, item.key


async def _compare_vectors(memory: Any, ns: str, parts: list[list[Any]], label: str, topic: str) -> dict[int, Any]:
    """The positions a PostgreSQL vector view indexed against a clean fold into the memory store; its checkpoints."""
    clean = open_projection(replace(memory, store="memory", postgres_dsn=None))
    try:
        for batch in parts:
            await clean.apply(batch, live=False)
        store = clean.store  # type: ignore[attr-defined]
        assert isinstance(store, MemoryVectorStore)
        want = sorted((p.topic, p.partition, p.offset) for p in store._held.get((memory.view.name, ns), set()))
    finally:
        await clean.close()
    conn = await asyncpg.connect(location(memory))
    try:
        rows = await conn.fetch(
            'SELECT topic, partition, "offset" FROM helix_vectors WHERE view = $1 AND namespace = $2',
            memory.view.name,
            ns,
        )
    finally:
        await conn.close()
    got = sorted((r["topic"], r["partition"], r["offset"]) for r in rows)
    if got != want:
        raise Mismatch(f"{label} (namespace-wide, rows by position): {first_difference(got, want)}")
    projection = open_projection(memory)
    try:
        return {p: await projection.checkpoint(topic, p) for p in {b[0].position.partition for b in parts}}
    finally:
        await projection.close()

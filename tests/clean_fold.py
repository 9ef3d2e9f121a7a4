"""Every view of a config against a clean fold of its log: what the fault tests and the crash stress loop assert.

Per session view: each session's state and guard, and every partition's checkpoint; per long-term
view: the namespace's messages and checkpoints; per vector view (PostgreSQL): the messages indexed,
by position, and checkpoints. Retries (idempotency keys seen before) are marked as
the projections mark them. A difference raises `Mismatch` naming the view, the session and the first
differing row, so that a failure under stress says enough to replay it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import asyncpg

from helix_es.config import load_config
from helix_es.projection.factory import location, open_projection, open_store
from helix_es.projection.fold import project
from helix_es.projection.idempotency import mark_duplicates
from helix_es.stores.memory.idempotency import MemoryIdempotency
from helix_es.stores.memory.long_term import MemoryLongTerm
from helix_es.stores.memory.vector import MemoryVectorStore
from helix_es.stores.memory.views import MemoryStore
from helix_es.stores.ports import SessionKey
from helix_es.views.base import View
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
    assert records, "the log is empty"
    parts = by_partition(records)
    keys = sorted({SessionKey(ns, r.event.session_id) for r in records}, key=lambda k: k.session_id)
    for agent in range(len(cfg["agents"])):
        memory = load_config(cfg, agent=agent).memory
        view = memory.view
        label = f"{view.name} ({memory.store}){what}"
        marks = MemoryIdempotency()
        marked = [list(await mark_duplicates(marks, view.name, batch)) for batch in parts.values()]
        if isinstance(view, Vector):
            checkpoints = await _compare_vectors(memory, ns, list(parts.values()), label, topic)
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
            clean_lt = MemoryLongTerm()
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

"""Forgetting (`MemoryForgotten`, schema v10) in the namespace-wide message views: the long-term rows
on every row store, the vector view on each vector store, and a long-term view's recall index.

A view folds a forgetting only if it names the view; `session` takes the session's items written
before it, `offsets` the session's messages added there. Re-delivery, retries and a rebuild change
nothing more.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import asyncpg
import pytest

from helix_es import Message, load_config
from helix_es.model import names
from helix_es.model.events import Event, MemoryForgotten, MessageAdded, Payload, Position, Record
from helix_es.model.recall import Recall, RecallHit
from helix_es.projection.factory import open_wide
from helix_es.projection.long_term import LongTermRows
from helix_es.projection.vector import VectorProjection
from helix_es.providers.embed import HashEmbedder
from helix_es.stores.memory.rows import MemoryRows
from helix_es.stores.memory.vector import MemoryVectorStore
from helix_es.stores.ports import CheckpointLost, SessionKey
from helix_es.stores.postgres.rows import PostgresRows
from helix_es.stores.postgres.vector import PostgresVectorStore
from helix_es.stores.redis.rows import RedisRows
from helix_es.views.long_term import LongTerm, target_table
from helix_es.views.long_term_rows import tables
from tests.conftest import unique

T0 = datetime(2025, 1, 1, tzinfo=UTC)
TABLE = "forget_long_term"  # apart from the other tests' long-term tables
NAME = LongTerm(table=TABLE).name  # what forgettings of this view name: long-term-forget_long_term
TARGET = f"{NAME}@v2"  # a rebuild target folds what names its base
VECTOR = "vector-forget-test"


def rec(ns: str, sid: str, offset: int, payload: Payload, *, partition: int = 0, retry_of: int | None = None) -> Record:
    at = T0 + timedelta(seconds=offset)
    return Record(Event(ns, sid, payload, timestamp=at), Position(names.topic(ns), partition, offset), retry_of)


def said(ns: str, sid: str, offset: int, text: str, *, partition: int = 0) -> Record:
    return rec(ns, sid, offset, MessageAdded(Message("user", text)), partition=partition)


def forgot(
    ns: str,
    sid: str,
    offset: int,
    views: Sequence[str],
    *,
    session: bool = False,
    offsets: tuple[int, ...] = (),
    retry_of: int | None = None,
) -> Record:
    payload = MemoryForgotten(tuple(views), "max_age", "max_age=720h", session=session, offsets=offsets)
    return rec(ns, sid, offset, payload, retry_of=retry_of)


def contents(messages: Sequence[Message] | None) -> list[str]:
    assert messages is not None
    return [m.content for m in messages]


def texts(hits: Sequence[RecallHit] | None) -> list[str]:
    assert hits is not None
    return [h.message.content for h in hits]


def offsets_history(ns: str, views: Sequence[str]) -> list[Record]:
    """alice's first and second messages are forgotten by offset; what comes after stays."""
    return [
        said(ns, "alice", 0, "alice one in oslo"),
        said(ns, "bob", 1, "bob one in oslo"),
        said(ns, "alice", 2, "alice two in oslo"),
        said(ns, "carol", 3, "carol on p1 in oslo", partition=1),
        forgot(ns, "alice", 4, views, offsets=(0,)),
        said(ns, "alice", 5, "alice three in oslo"),
        # 0 again (gone already), 2, and 7: after the event, so not one it forgets
        forgot(ns, "alice", 6, views, offsets=(0, 2, 7)),
        said(ns, "alice", 7, "alice four in oslo"),
    ]


OFFSETS_KEPT = ["bob one in oslo", "carol on p1 in oslo", "alice three in oslo", "alice four in oslo"]


def session_history(ns: str, views: Sequence[str]) -> list[Record]:
    """alice's session is forgotten whole; her later add, and bob, stay."""
    return [
        said(ns, "alice", 0, "alice one in oslo"),
        said(ns, "bob", 1, "bob one in oslo"),
        said(ns, "alice", 2, "alice two in oslo"),
        forgot(ns, "alice", 3, views, session=True),
        said(ns, "alice", 4, "alice back in oslo"),
        said(ns, "bob", 5, "bob two in oslo"),
    ]


SESSION_KEPT = ["bob one in oslo", "alice back in oslo", "bob two in oslo"]


def by_partition(records: Sequence[Record]) -> list[list[Record]]:
    return [[r for r in records if r.position.partition == p] for p in sorted({r.position.partition for r in records})]


def moved(record: Record, offset: int) -> Record:
    """`record` at `offset` of partition 0 (histories joined one after the other)."""
    return Record(record.event, Position(record.position.topic, 0, offset), record.duplicate_of)


def renamed(records: Sequence[Record], ns: str) -> list[Record]:
    """The same history in another namespace (a fresh view of it)."""
    return [
        Record(
            Event(ns, r.event.session_id, r.event.payload, timestamp=r.event.timestamp),
            Position(names.topic(ns), r.position.partition, r.position.offset),
            r.duplicate_of,
        )
        for r in records
    ]


# --- the long-term view, on every row store ----------------------------------------------------------


def long_term_rows(request: pytest.FixtureRequest, kind: str, name: str, table: str) -> LongTermRows:
    if kind == "redis":
        return LongTermRows(RedisRows(request.getfixturevalue("redis_url"), name, tables(table)), table)
    if kind == "postgres":
        return LongTermRows(PostgresRows(request.getfixturevalue("postgres_dsn"), name, tables(table)), table)
    return LongTermRows.in_process(name, table)


@pytest.fixture(params=["memory", "redis", "postgres"])
def kind(request: pytest.FixtureRequest) -> str:
    return cast(str, request.param)


@pytest.fixture
async def long_term(request: pytest.FixtureRequest, kind: str) -> AsyncIterator[LongTermRows]:
    view = long_term_rows(request, kind, NAME, TABLE)
    yield view
    await view.close()


async def lose_checkpoint(view: LongTermRows, topic: str, partition: int) -> None:
    """As a restored backup would: the next delivery is applied again."""
    store = view.store
    if isinstance(store, MemoryRows):
        store._checkpoints.pop((topic, partition))
    elif isinstance(store, RedisRows):
        await store.redis.hdel(names.checkpoint_key(view.name), f"{topic}:{partition}")
    else:
        assert isinstance(store, PostgresRows)
        conn = await asyncpg.connect(store.dsn)
        try:
            sql = "DELETE FROM helix_checkpoints WHERE view = $1 AND topic = $2 AND partition = $3"
            await conn.execute(sql, view.name, topic, partition)
        finally:
            await conn.close()


async def redeliver(view: LongTermRows, batch: Sequence[Record]) -> None:
    """`batch` again past a lost checkpoint (Redis, which loses checkpoints with their data, refuses once)."""
    await lose_checkpoint(view, batch[0].position.topic, batch[0].position.partition)
    if isinstance(view.store, RedisRows):
        with pytest.raises(CheckpointLost):
            await view.apply(batch)
    assert (await view.apply(batch)).events == len(batch)


def stored(rows: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What a rebuild must reproduce: each row's place, session and message."""
    return [(r["topic"], r["partition"], r["offset"], r["session_id"], r["message"]) for r in rows]


async def test_forgotten_offsets_leave_get_search_and_recall(long_term: LongTermRows) -> None:
    ns = unique("lt-forget")
    history = offsets_history(ns, (NAME,))
    p0, p1 = by_partition(history)
    await long_term.apply(p1)
    await long_term.apply(p0[:2])  # alice one, bob one
    await long_term.apply(p0[2:4])  # alice two, and the forgetting of alice one
    await long_term.apply(p0[4:])  # alice three, the forgetting of alice two, alice four
    key = SessionKey(ns, "any")
    assert contents(await long_term.get(key, p0[-1].position)) == OFFSETS_KEPT
    assert contents(await long_term.search(key, "alice", 10, None)) == ["alice three in oslo", "alice four in oslo"]
    assert texts(await long_term.recall(key, Recall("oslo", 10), None)) == OFFSETS_KEPT
    assert texts(await long_term.recall(key, Recall("alice one", 10), None)) == []

    ns2 = unique("lt-forget")  # every forgetting in the batch of the messages it names
    for batch in by_partition(renamed(history, ns2)):
        await long_term.apply(batch)
    assert contents(await long_term.get(SessionKey(ns2, "any"), None)) == OFFSETS_KEPT


async def test_a_forgotten_session_leaves_but_its_later_adds_stay(long_term: LongTermRows) -> None:
    ns = unique("lt-forget")
    history = session_history(ns, (NAME,))
    await long_term.apply(history[:3])
    await long_term.apply(history[3:])
    key = SessionKey(ns, "any")
    assert contents(await long_term.get(key, history[-1].position)) == SESSION_KEPT
    assert contents(await long_term.search(key, "alice", 10, None)) == ["alice back in oslo"]
    assert [r["session_id"] for r in await long_term.rows(ns)] == ["bob", "alice", "bob"]

    ns2 = unique("lt-forget")  # one batch
    await long_term.apply(renamed(history, ns2))
    assert contents(await long_term.get(SessionKey(ns2, "any"), None)) == SESSION_KEPT


async def test_a_forgetting_of_another_view_or_a_retried_one_changes_nothing(long_term: LongTermRows) -> None:
    ns = unique("lt-forget")
    history = [
        said(ns, "alice", 0, "alice one"),
        said(ns, "alice", 1, "alice two"),
        forgot(ns, "alice", 2, ("long-term",), session=True),  # the default table's view, not this one
        forgot(ns, "alice", 3, (VECTOR, "long-term-other"), offsets=(0, 1)),
        forgot(ns, "alice", 4, (NAME,), session=True, retry_of=2),  # a retry: applied as nothing
        forgot(ns, "alice", 5, (NAME,)),  # names no message (items of other views only)
    ]
    await long_term.apply(history)
    assert contents(await long_term.get(SessionKey(ns, "any"), history[-1].position)) == ["alice one", "alice two"]


async def test_a_redelivered_batch_forgets_nothing_more(long_term: LongTermRows) -> None:
    ns = unique("lt-forget")
    history = [
        *offsets_history(ns, (NAME,)),
        forgot(ns, "bob", 8, (NAME,), session=True),
        said(ns, "bob", 9, "bob after"),
    ]
    p0, p1 = by_partition(history)
    await long_term.apply(p1)
    await long_term.apply(p0[:5])
    await long_term.apply(p0[5:])
    key = SessionKey(ns, "any")
    want = ["carol on p1 in oslo", "alice three in oslo", "alice four in oslo", "bob after"]
    assert contents(await long_term.get(key, p0[-1].position)) == want
    before = await long_term.rows(ns)
    assert (await long_term.apply(p0)).events == 0  # at or below the checkpoint: skipped
    await redeliver(long_term, p0[2:])  # past a lost checkpoint: the forgettings apply again
    await redeliver(long_term, p0)
    assert contents(await long_term.get(key, None)) == want
    assert stored(await long_term.rows(ns)) == stored(before)


async def test_a_rebuild_from_the_same_records_forgets_the_same(request: pytest.FixtureRequest, kind: str) -> None:
    ns = unique("lt-forget")
    # alice's session forgotten after her offsets were: then her later add, and bob's
    history = [
        *offsets_history(ns, (NAME,)),
        *(moved(r, 8 + i) for i, r in enumerate(session_history(ns, (NAME,))[3:])),
    ]
    live = long_term_rows(request, kind, NAME, TABLE)
    rebuilt = long_term_rows(request, kind, TARGET, target_table(TABLE, NAME, TARGET))
    try:
        for batch in by_partition(history):
            for i in range(0, len(batch), 2):  # live: small batches
                await live.apply(batch[i : i + 2])
            await rebuilt.apply(batch)  # the rebuild: each partition at once, into a fresh target
        key = SessionKey(ns, "any")
        want = contents(await live.get(key, None))
        assert "alice one in oslo" not in want and "alice three in oslo" not in want  # alice's session left
        assert "alice back in oslo" in want and "bob two in oslo" in want
        assert contents(await rebuilt.get(key, None)) == want
        assert stored(await rebuilt.rows(ns)) == stored(await live.rows(ns))
    finally:
        await live.close()
        await rebuilt.close()


# --- the vector view, on each vector store ----------------------------------------------------------


@pytest.fixture(params=["memory", "postgres"])
def vector_kind(request: pytest.FixtureRequest) -> str:
    return cast(str, request.param)


def vector_store(request: pytest.FixtureRequest, kind: str) -> Any:
    if kind == "postgres":
        return PostgresVectorStore(request.getfixturevalue("postgres_dsn"))
    return MemoryVectorStore()


def vectors(request: pytest.FixtureRequest, kind: str, name: str = VECTOR) -> VectorProjection:
    return VectorProjection(name, HashEmbedder(64), vector_store(request, kind), top_k=20, search="hybrid")


async def found(view: VectorProjection, ns: str) -> list[str]:
    """Every entry of the namespace, by recall and by search (the store holds no more)."""
    key = SessionKey(ns, "any")
    hits = sorted(texts(await view.recall(key, Recall("oslo", 50), None)))
    assert sorted(contents(await view.search(key, "oslo", 50, None))) == hits
    assert await view.store.count(view.name, ns) == len(hits)
    return hits


async def test_the_vector_view_forgets_offsets_and_sessions(request: pytest.FixtureRequest, vector_kind: str) -> None:
    view = vectors(request, vector_kind)
    try:
        ns = unique("vec-forget")
        p0, p1 = by_partition(offsets_history(ns, (VECTOR,)))
        await view.apply(p1)
        await view.apply(p0[:2])
        await view.apply(p0[2:4])
        await view.apply(p0[4:])
        assert await found(view, ns) == sorted(OFFSETS_KEPT)
        ns2 = unique("vec-forget")  # each forgetting in the batch of what it names: never indexed
        for batch in by_partition(offsets_history(ns2, (VECTOR,))):
            await view.apply(batch)
        assert await found(view, ns2) == sorted(OFFSETS_KEPT)

        ns3 = unique("vec-forget")
        history = session_history(ns3, (VECTOR,))
        await view.apply(history[:3])
        await view.apply(history[3:])
        assert await found(view, ns3) == sorted(SESSION_KEPT)
        ns4 = unique("vec-forget")
        await view.apply(session_history(ns4, (VECTOR,)))
        assert await found(view, ns4) == sorted(SESSION_KEPT)
    finally:
        await view.close()


async def test_the_vector_view_ignores_other_views_and_retries(
    request: pytest.FixtureRequest, vector_kind: str
) -> None:
    view = vectors(request, vector_kind)
    try:
        ns = unique("vec-forget")
        await view.apply(
            [
                said(ns, "alice", 0, "alice one in oslo"),
                said(ns, "alice", 1, "alice two in oslo"),
                forgot(ns, "alice", 2, (NAME, "vector-other"), session=True),
                forgot(ns, "alice", 3, ("long-term",), offsets=(0, 1)),
                forgot(ns, "alice", 4, (VECTOR,), session=True, retry_of=2),
            ]
        )
        assert await found(view, ns) == ["alice one in oslo", "alice two in oslo"]
    finally:
        await view.close()


async def test_the_vector_view_redelivered_and_rebuilt_forgets_the_same(
    request: pytest.FixtureRequest, vector_kind: str
) -> None:
    ns = unique("vec-forget")
    history = [*offsets_history(ns, (VECTOR,)), forgot(ns, "bob", 8, (VECTOR,), session=True)]
    history.append(said(ns, "bob", 9, "bob after in oslo"))
    want = sorted(["carol on p1 in oslo", "alice three in oslo", "alice four in oslo", "bob after in oslo"])
    p0, p1 = by_partition(history)
    shared = vector_store(request, vector_kind)
    live = VectorProjection(VECTOR, HashEmbedder(64), shared, top_k=20, search="hybrid")
    rebuilt = vectors(request, vector_kind, f"{VECTOR}@v2")
    try:
        await live.apply(p1)
        await live.apply(p0[:5])
        await live.apply(p0[5:])
        assert await found(live, ns) == want
        assert (await live.apply(p0)).events == 0
        # Other processes on the same store, its checkpoint lost: each applies its batch again.
        for batch in (p0[3:], p0):
            again = VectorProjection(VECTOR, HashEmbedder(64), shared, top_k=20, search="hybrid")
            await lose_vector_checkpoint(again, p0[0].position)
            assert (await again.apply(batch)).events == len(batch)
        assert await found(live, ns) == want
        for batch in (p0, p1):  # the rebuild: each partition at once, into a fresh target
            await rebuilt.apply(batch)
        assert await found(rebuilt, ns) == want
    finally:
        await live.close()
        await rebuilt.close()


async def lose_vector_checkpoint(view: VectorProjection, at: Position) -> None:
    store = view.store
    if isinstance(store, MemoryVectorStore):
        store._checkpoints.pop((view.name, at.topic, at.partition))
        return
    assert isinstance(store, PostgresVectorStore)
    conn = await asyncpg.connect(store.dsn)
    try:
        sql = "DELETE FROM helix_checkpoints WHERE view = $1 AND topic = $2 AND partition = $3"
        await conn.execute(sql, view.name, at.topic, at.partition)
    finally:
        await conn.close()


# --- a long-term view's recall index ------------------------------------------------------------------


async def test_a_long_term_views_recall_index_forgets_with_it(request: pytest.FixtureRequest, vector_kind: str) -> None:
    memory: dict[str, Any] = {"type": "long-term", "store": vector_kind, "search": "hybrid"}
    if vector_kind == "postgres":
        memory |= {"dsn": request.getfixturevalue("postgres_dsn"), "table": TABLE}
    cfg = load_config({"memory": memory}).memory
    rows_part, index_part = cfg.parts  # the rows and the index beside them, each a view of its own name
    rows, index = cast(LongTermRows, open_wide(rows_part)), cast(VectorProjection, open_wide(index_part))
    views = tuple(part.view.name for part in cfg.parts)  # what a forgetting of the long-term view names
    assert rows.name == rows_part.view.name and index.name == index_part.view.name != rows.name
    ns = unique("lt-index-forget")
    history = [
        said(ns, "alice", 0, "alice flies to oslo"),
        said(ns, "bob", 1, "bob flies to oslo"),
        said(ns, "alice", 2, "alice has a hotel in oslo"),
        said(ns, "carol", 3, "carol on p1 in oslo", partition=1),
        forgot(ns, "alice", 4, views, offsets=(0,)),
        forgot(ns, "bob", 5, views, session=True),
        said(ns, "bob", 6, "bob is back in oslo"),
        # The index folds what names it: a forgetting of the rows alone leaves it (one of the long-term
        # view names its parts, as the policy worker does).
        forgot(ns, "bob", 7, (rows.name,), session=True),
    ]
    key = SessionKey(ns, "any")
    try:
        for view in (rows, index):
            for batch in by_partition(history):
                await view.apply(batch)
        assert contents(await rows.get(key, None)) == ["alice has a hotel in oslo", "carol on p1 in oslo"]
        assert texts(await rows.recall(key, Recall("flies", 10), None)) == []
        assert await found(index, ns) == ["alice has a hotel in oslo", "bob is back in oslo", "carol on p1 in oslo"]
        keyword = await index.recall(key, Recall("alice", 10, mode="keyword"), None)
        assert texts(keyword) == ["alice has a hotel in oslo"]
    finally:
        await rows.close()
        await index.close()

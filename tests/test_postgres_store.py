"""PostgresStore against a real server: row layout, guards, transactions. The shared suite covers behaviour."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import asyncpg
import pytest

from helix_es.model.errors import InvalidMessage
from helix_es.model.events import Event, MemoryCleared, MessageAdded, Position, Record
from helix_es.model.message import Message, ToolCall
from helix_es.projection.fold import project
from helix_es.stores.list_edit import ListEdit, list_edit
from helix_es.stores.ports import EMPTY, Change, SessionKey, Snapshot, StaleWrite
from helix_es.stores.postgres.views import PostgresStore
from helix_es.views.base import State
from helix_es.views.conversation import Conversation
from helix_es.views.sliding_window import SlidingWindow
from tests.conftest import copy_always, unique

CONVERSATION = Conversation()
WINDOW = SlidingWindow(3)


@pytest.fixture(params=["insert", "copy"])
async def store(postgres_dsn: str, request: pytest.FixtureRequest) -> AsyncIterator[PostgresStore]:
    """Both ways appended rows are written: INSERT for small batches, COPY for big ones."""
    if request.param == "copy":
        copy_always(request.getfixturevalue("monkeypatch"))
    s = PostgresStore(postgres_dsn)
    await s.ensure_schema()
    yield s
    await s.close()


@pytest.fixture
def key() -> SessionKey:
    return SessionKey(unique("ns"), unique("s"))


@pytest.fixture
def topic() -> str:
    return unique("helix.memory.test")


async def rows(store: PostgresStore, key: SessionKey, view: str) -> list[tuple[int, str]]:
    """(seq, content) of the stored rows, to check the layout behind the snapshot."""
    conn = await asyncpg.connect(store.dsn)
    try:
        found = await conn.fetch(
            "SELECT seq, message->>'content' AS content FROM helix_view_messages"
            " WHERE view = $1 AND namespace = $2 AND session_id = $3 ORDER BY seq",
            view,
            key.namespace,
            key.session_id,
        )
    finally:
        await conn.close()
    return [(r["seq"], r["content"]) for r in found]


def texts(state: State) -> list[str]:
    return [m.content for m in state]


def user(*contents: str) -> State:
    return tuple(Message("user", c) for c in contents)


async def write(store: PostgresStore, key: SessionKey, before: Snapshot, after: State, applied: int) -> Snapshot:
    await store.apply(CONVERSATION, "t", 0, [Change(key, before, after, applied)], applied)
    return await store.read(CONVERSATION, key)


async def test_load_of_unknown_sessions_is_empty(store: PostgresStore, key: SessionKey) -> None:
    assert store.kind == "postgres"  # names the projector's consumer group
    other = SessionKey(key.namespace, unique("s"))
    assert await store.load(CONVERSATION, [key, other]) == {key: EMPTY, other: EMPTY}
    assert await store.load(CONVERSATION, []) == {}
    assert await store.read(CONVERSATION, key) == EMPTY


async def test_conversation_round_trip_keeps_every_field_and_order(store: PostgresStore, key: SessionKey) -> None:
    state = (
        Message("system", "You are terse."),
        Message("user", "Weather in Oslo?", name="ada", metadata={"lang": "en", "a": ""}),
        Message("assistant", "", tool_calls=(ToolCall("call-1", "weather", '{"city": "Oslo"}'),)),
        Message("tool", '{"temp": -3}', tool_call_id="call-1"),
        *(Message("assistant", f"reply {i} ☃ 🌧") for i in range(12)),  # seq 10 sorts after 9, not after 1
    )
    snap = await write(store, key, EMPTY, state, 7)
    assert snap == Snapshot(state, 7)
    longer = (*state, Message("user", "and tomorrow?"))
    assert list_edit(state, longer).drop == 0  # append only
    assert await write(store, key, snap, longer, 9) == Snapshot(longer, 9)
    assert [seq for seq, _ in await rows(store, key, CONVERSATION.name)] == list(range(len(longer)))
    assert await store.read(Conversation(), key) == Snapshot(longer, 9)
    assert await store.read(WINDOW, key) == EMPTY  # views do not share rows


async def test_load_reads_many_sessions_in_one_call(store: PostgresStore, key: SessionKey) -> None:
    keys = [SessionKey(key.namespace, f"s{i}") for i in range(5)]
    changes = [Change(k, EMPTY, user(*(f"{k.session_id}-{j}" for j in range(i))), 10 + i) for i, k in enumerate(keys)]
    await store.apply(CONVERSATION, "t", 0, changes[1:], 20)  # keys[0] stays unknown
    loaded = await store.load(CONVERSATION, [*keys, keys[2]])
    assert loaded == {keys[0]: EMPTY, **{c.key: Snapshot(c.after, c.applied) for c in changes[1:]}}


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> Callable[[ListEdit], None]:
    """Make the store apply a given edit, to exercise each edit shape whatever `list_edit` picks."""

    def force(edit: ListEdit) -> None:
        monkeypatch.setattr("helix_es.stores.postgres.views.list_edit", lambda before, after: edit)

    return force


async def test_sliding_window_edit(store: PostgresStore, key: SessionKey) -> None:
    before = (Message("system", "rules"), *user("u1", "u2", "u3"))
    after = (Message("system", "rules"), *user("u2", "u3", "u4"))
    edit = list_edit(before, after)
    assert (edit.keep, edit.drop, texts(edit.append)) == (1, 1, ["u4"])
    snap = await write(store, key, EMPTY, before, 3)
    assert await write(store, key, snap, after, 4) == Snapshot(after, 4)
    # The pinned row keeps seq 0, the dropped row is gone, the new one goes after the rest.
    assert await rows(store, key, CONVERSATION.name) == [(0, "rules"), (2, "u2"), (3, "u3"), (4, "u4")]


async def test_keep_one_drop_the_rest(store: PostgresStore, key: SessionKey) -> None:
    before = (Message("system", "rules"), *user("u1", "u2"))
    after = (Message("system", "rules"), *user("v1", "v2"))
    assert (list_edit(before, after).keep, list_edit(before, after).drop) == (1, 2)
    snap = await write(store, key, EMPTY, before, 1)
    assert await write(store, key, snap, after, 2) == Snapshot(after, 2)
    assert await rows(store, key, CONVERSATION.name) == [(0, "rules"), (1, "v1"), (2, "v2")]


@pytest.mark.parametrize("drop", [-1, 3])  # list_edit says 3; -1 is the protocol's "replace everything"
async def test_full_rewrite_replaces_every_row(
    store: PostgresStore, key: SessionKey, forced: Callable[[ListEdit], None], drop: int
) -> None:
    before, after = user("a", "b", "c"), user("x", "y")
    snap = await write(store, key, EMPTY, before, 1)
    forced(ListEdit(0, drop, after))
    assert await write(store, key, snap, after, 2) == Snapshot(after, 2)
    assert await rows(store, key, CONVERSATION.name) == [(0, "x"), (1, "y")]  # seq starts over


async def test_clear_empties_the_rows_and_keeps_the_guard(store: PostgresStore, key: SessionKey) -> None:
    snap = await write(store, key, EMPTY, user("a", "b"), 1)
    cleared = await write(store, key, snap, (), 2)
    assert cleared == Snapshot((), 2)
    assert await rows(store, key, CONVERSATION.name) == []
    assert await write(store, key, cleared, user("c"), 3) == Snapshot(user("c"), 3)
    assert await rows(store, key, CONVERSATION.name) == [(0, "c")]


async def test_stale_guard_refuses_the_whole_batch(store: PostgresStore, key: SessionKey, topic: str) -> None:
    fresh = SessionKey(key.namespace, unique("fresh"))
    loaded = await store.read(CONVERSATION, key)
    await store.apply(CONVERSATION, topic, 0, [Change(key, loaded, user("winner"), 5)], 5)
    stale_batch = [Change(fresh, EMPTY, user("new"), 6), Change(key, loaded, user("loser"), 6)]
    with pytest.raises(StaleWrite, match="guard moved"):
        await store.apply(CONVERSATION, topic, 0, stale_batch, 6)
    # Nothing of the refused batch landed: not the fresh session, not the stale one, not the checkpoint.
    assert await store.load(CONVERSATION, [key, fresh]) == {key: Snapshot(user("winner"), 5), fresh: EMPTY}
    assert await store.checkpoint(CONVERSATION, topic, 0) == 5


async def test_stale_when_guard_exists_or_vanished(store: PostgresStore, key: SessionKey) -> None:
    snap = await write(store, key, EMPTY, user("a"), 5)
    with pytest.raises(StaleWrite):  # expected no guard, found one
        await write(store, key, EMPTY, user("b"), 6)
    missing = SessionKey(key.namespace, unique("missing"))
    with pytest.raises(StaleWrite):  # expected a guard, found none
        await store.apply(CONVERSATION, "t", 0, [Change(missing, snap, user("a", "b"), 6)], 6)
    assert await store.load(CONVERSATION, [key, missing]) == {key: snap, missing: EMPTY}


@pytest.mark.parametrize("seeded", [False, True], ids=["new-session", "guarded-session"])
async def test_concurrent_writers_from_one_load_exactly_one_wins(
    store: PostgresStore, key: SessionKey, seeded: bool
) -> None:
    start = await write(store, key, EMPTY, user("seed"), 1) if seeded else EMPTY
    stores = [store, *(PostgresStore(store.dsn) for _ in range(3))]
    try:
        results = await asyncio.gather(
            *(
                s.apply(CONVERSATION, "t", 0, [Change(key, start, (*start.state, *user(f"w{i}")), 10 + i)], 10 + i)
                for i, s in enumerate(stores)
            ),
            return_exceptions=True,
        )
    finally:
        for s in stores[1:]:
            await s.close()
    winners = [i for i, r in enumerate(results) if r is None]
    assert len(winners) == 1, results
    assert all(isinstance(r, StaleWrite) for r in results if r is not None), results
    i = winners[0]
    assert await store.read(CONVERSATION, key) == Snapshot((*start.state, *user(f"w{i}")), 10 + i)


async def test_checkpoint_upserts_per_view_topic_partition(store: PostgresStore, key: SessionKey, topic: str) -> None:
    assert await store.checkpoint(CONVERSATION, topic, 0) is None
    await store.apply(CONVERSATION, topic, 0, [], 10)  # a batch of re-deliveries still moves it
    await store.apply(CONVERSATION, topic, 1, [Change(key, EMPTY, user("a"), 3)], 3)
    await store.apply(CONVERSATION, topic, 0, [], 12)
    assert await store.checkpoint(CONVERSATION, topic, 0) == 12
    assert await store.checkpoint(CONVERSATION, topic, 1) == 3
    assert await store.checkpoint(WINDOW, topic, 0) is None


async def test_a_batch_may_change_a_session_once(store: PostgresStore, key: SessionKey) -> None:
    with pytest.raises(ValueError, match="once"):
        await store.apply(CONVERSATION, "t", 0, [Change(key, EMPTY, user("a"), 1)] * 2, 1)


async def test_concurrent_first_use_creates_the_schema_once(postgres_dsn: str) -> None:
    """Eight stores in new processes' shoes (nothing made yet) use a database without the tables at
    the same time: none fails (CREATE TABLE IF NOT EXISTS alone races on the catalog), and each
    table exists once. A PostgreSQL schema of its own, first on the search_path, starts empty."""
    schema = unique("race").replace("-", "_")
    admin = await asyncpg.connect(postgres_dsn)
    try:
        await admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await admin.execute(f"CREATE SCHEMA {schema}")
        tables = ("helix_checkpoints", "helix_view_messages", "helix_view_sessions")

        async def made() -> list[str]:
            rows = await admin.fetch(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY c.relname",
                schema,
            )
            return [r["relname"] for r in rows]

        assert await made() == []
        dsn = postgres_dsn + ("&" if "?" in postgres_dsn else "?") + f"search_path={schema}"
        stores = [PostgresStore(dsn) for _ in range(8)]
        try:
            firsts = await asyncio.gather(
                *(s.checkpoint(WINDOW, unique("t"), 0) for s in stores[:4]),
                *(s.ensure_schema() for s in stores[4:]),
                return_exceptions=True,
            )
            assert [f for f in firsts if isinstance(f, BaseException)] == []
            assert firsts[:4] == [None] * 4  # no checkpoint yet, read from the new tables
            await asyncio.gather(*(s.ensure_schema() for s in stores))  # again: nothing to do, no error
            assert await made() == sorted(tables)  # each once, in the new schema
            key = SessionKey(unique("ns"), unique("s"))
            await stores[0].apply(CONVERSATION, "t", 0, [Change(key, EMPTY, user("a"), 1)], 1)
            assert texts((await stores[7].read(CONVERSATION, key)).state) == ["a"]
            assert await admin.fetchval(f"SELECT count(*) FROM {schema}.helix_view_messages") == 1
        finally:
            for s in stores:
                await s.close()
    finally:
        await admin.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await admin.close()


def test_nul_character_is_refused_before_it_reaches_any_store() -> None:
    # PostgreSQL text and jsonb cannot hold NUL; an event carrying one would wedge the projector.
    with pytest.raises(InvalidMessage, match="NUL"):
        Message("user", "a\x00b")


def records(topic: str, items: list[tuple[SessionKey, MessageAdded | MemoryCleared]], first: int) -> list[Record]:
    """One partition's records in offset order, from `first` on."""
    return [
        Record(Event(k.namespace, k.session_id, payload), Position(topic, 0, first + i))
        for i, (k, payload) in enumerate(items)
    ]


def said(role: str, content: str) -> MessageAdded:
    return MessageAdded(Message(role, content))  # type: ignore[arg-type]


async def test_project_sliding_window_and_redelivery(store: PostgresStore, key: SessionKey, topic: str) -> None:
    other = SessionKey(key.namespace, unique("other"))
    items = [(key, said("system", "rules")), *((key, said("user", f"u{i}")) for i in range(5))]
    items.insert(3, (other, said("user", "elsewhere")))  # sessions interleave on a partition
    batch = records(topic, items, 40)
    assert await project(WINDOW, store, batch) == 7
    loaded = await store.load(WINDOW, [key, other])
    assert {k: texts(s.state) for k, s in loaded.items()} == {key: ["rules", "u2", "u3", "u4"], other: ["elsewhere"]}
    assert (loaded[key].applied, loaded[other].applied) == (46, 43)
    assert await store.checkpoint(WINDOW, topic, 0) == 46

    assert await project(WINDOW, store, batch) == 0  # re-delivered: nothing changes
    assert await store.load(WINDOW, [key, other]) == loaded
    assert await store.checkpoint(WINDOW, topic, 0) == 46
    assert await rows(store, key, WINDOW.name) == [(0, "rules"), (1, "u2"), (2, "u3"), (3, "u4")]

    more = records(topic, [(key, said("user", "u5")), (key, MemoryCleared()), (key, said("user", "v1"))], 47)
    assert await project(WINDOW, store, [*batch[-2:], *more]) == 3  # overlaps the last batch
    assert await store.read(WINDOW, key) == Snapshot(user("v1"), 49)
    assert await store.checkpoint(WINDOW, topic, 0) == 49

    slide = records(topic, [(key, said("user", f"w{i}")) for i in range(4)], 50)
    for record in slide:  # one event per batch, as the embedded log folds them
        await project(WINDOW, store, [record])
    assert await store.read(WINDOW, key) == Snapshot(user("w1", "w2", "w3"), 53)
    assert await rows(store, key, WINDOW.name) == [(2, "w1"), (3, "w2"), (4, "w3")]

"""`MemoryForgotten` in the facts, LangGraph store items and LangGraph checkpoints views, on every
store each offers: the named items leave; a forgetting naming another view, a re-delivered batch
and a retried forgetting change nothing; a fact forgotten before it arrives (another partition)
stays forgotten; a rebuild (the same records folded again into a fresh store) gives the same view."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from helix_es.model.events import (
    Event,
    ExtractedFact,
    FactsExtracted,
    FactsMerged,
    ItemPut,
    MemoryForgotten,
    MessageAdded,
    Payload,
    Position,
    Record,
    SourceTurn,
)
from helix_es.model.facts import FactsAsk
from helix_es.model.message import Message
from helix_es.projection.facts import FactsRows
from helix_es.stores.memory.checkpoints import MemoryCheckpoints
from helix_es.stores.memory.items import MemoryItems
from helix_es.stores.memory.rows import MemoryRows
from helix_es.stores.ports import CheckpointStore, ItemStore, SessionKey
from helix_es.stores.postgres.checkpoints import PostgresCheckpoints
from helix_es.stores.postgres.items import PostgresItems
from helix_es.stores.postgres.rows import PostgresRows
from helix_es.stores.redis.checkpoints import RedisCheckpoints
from helix_es.stores.redis.items import RedisItems
from helix_es.stores.redis.rows import RedisRows
from helix_es.views.checkpoints import VIEW_NAME as CHECKPOINTS
from helix_es.views.checkpoints import Thread, fold
from helix_es.views.facts import Facts, fact_id, tables
from helix_es.views.items import VIEW_NAME as ITEMS
from helix_es.views.items import Items, item_id, parse_item_id, session_of
from tests.conftest import unique
from tests.contracts.checkpoint_store import expected_rows, rows_of, saved, writes

KINDS = ["memory", "redis", "postgres"]
T0 = datetime(2025, 1, 1, tzinfo=UTC)
FACTS = Facts().name  # "facts"
TABLE, REBUILT = "forget_facts_test", "forget_facts_rebuilt"


def day(n: float) -> datetime:
    return T0 + timedelta(days=n)


def forgotten(view: str, ids: Sequence[str] = (), *, session: bool = False) -> MemoryForgotten:
    return MemoryForgotten((view,), "max_age", "max_age=720h", session=session, ids=tuple(ids))


class Log:
    """Records of one namespace, on the partitions they are written to (offsets per partition)."""

    def __init__(self, namespace: str) -> None:
        self.namespace, self.topic = namespace, f"helix.memory.{namespace}"
        self.records: list[Record] = []

    def write(self, session: str, payload: Payload, at: datetime = T0, partition: int = 0) -> Record:
        offset = sum(r.position.partition == partition for r in self.records)
        record = Record(Event(self.namespace, session, payload, timestamp=at), Position(self.topic, partition, offset))
        self.records.append(record)
        return record

    def partition(self, partition: int) -> list[Record]:
        return [r for r in self.records if r.position.partition == partition]


# --- facts ---


def facts_rows(request: pytest.FixtureRequest, kind: str, name: str, table: str) -> FactsRows:
    if kind == "memory":
        store: Any = MemoryRows(name, tables(table))
    elif kind == "redis":
        store = RedisRows(request.getfixturevalue("redis_url"), name, tables(table))
    else:
        store = PostgresRows(request.getfixturevalue("postgres_dsn"), name, tables(table))
    return FactsRows(store, table, source=FACTS)  # a rebuild target keeps its view's name: `source`


@pytest.fixture(params=KINDS)
async def facts_view(request: pytest.FixtureRequest) -> AsyncIterator[Callable[[str, str], FactsRows]]:
    made: list[FactsRows] = []

    def new(name: str = FACTS, table: str = TABLE) -> FactsRows:
        made.append(facts_rows(request, request.param, name, table))
        return made[-1]

    yield new
    for rows in made:
        await rows.close()


def say(log: Log, text: str, at: datetime, partition: int = 0) -> Record:
    return log.write("s1", MessageAdded(Message(role="user", content=text, name="ana")), at, partition)


def extract(log: Log, turns: Sequence[Record], facts: Sequence[tuple[str, str, str]], at: datetime) -> Record:
    sources = tuple(SourceTurn(str(r.event.event_id), r.position, r.event.timestamp) for r in turns)
    extracted = tuple(ExtractedFact(s, p, v, None) for s, p, v in facts)
    return log.write("s1", FactsExtracted(FACTS, "rules/v1", "", extracted, sources), at, turns[0].position.partition)


async def known(view: FactsRows, namespace: str, history: bool = False) -> list[tuple[str, str, str]]:
    found = await view.facts(namespace, FactsAsk(history=history))
    assert found is not None
    return sorted((f.subject, f.predicate, f.value) for f in found)


async def ids_of(view: FactsRows, namespace: str) -> dict[str, str]:
    """value -> fact id, of every fact (history included)."""
    return {f.value: f.id for f in await view.facts(namespace, FactsAsk(history=True)) or []}


async def timeline_of(view: FactsRows, namespace: str) -> list[tuple[Any, ...]]:
    found = await view.facts(namespace, FactsAsk(history=True)) or []
    return sorted((f.id, f.subject, f.predicate, f.value, f.valid_from, f.valid_to, f.known_to) for f in found)


async def test_forgotten_facts_leave_with_their_history(facts_view: Callable[..., FactsRows], namespace: str) -> None:
    view, log = facts_view(), Log(namespace)
    t1 = say(log, "I live in Lisbon and like jazz", day(0))
    extract(log, [t1], [("ana", "lives_in", "Lisbon"), ("ana", "likes", "jazz")], day(0.1))
    t2 = say(log, "I moved to Porto", day(1))
    extract(log, [t2], [("ana", "lives_in", "Porto")], day(1.1))
    await view.apply(log.records)
    ids = await ids_of(view, namespace)
    assert set(ids) == {"Lisbon", "jazz", "Porto"}

    # Another view's forgetting, and a session forgetting of this one, change nothing.
    await view.apply([log.write("s1", forgotten("conversation", [ids["jazz"]]), day(2))])
    await view.apply([log.write("s1", forgotten(FACTS, session=True), day(2))])
    assert await known(view, namespace) == [("ana", "likes", "jazz"), ("ana", "lives_in", "Porto")]

    forget = log.write("s1", forgotten(FACTS, [ids["jazz"], ids["Lisbon"]]), day(3))
    await view.apply([forget])
    assert await known(view, namespace) == [("ana", "lives_in", "Porto")]
    assert await known(view, namespace, history=True) == [("ana", "lives_in", "Porto")]  # no history of them
    porto = (await view.facts(namespace, FactsAsk(history=True)) or [])[0]
    assert porto.valid_to is None and porto.known_to is None
    key = SessionKey(namespace, "s1")
    got = await view.get(key, None)
    assert got is not None and "jazz" not in got[0].content and "Porto" in got[0].content
    assert await view.search(key, "jazz", 5, None) == []

    # A re-delivered batch and a retried forgetting (naming Porto now) change nothing more.
    before = await timeline_of(view, namespace)
    await view.apply(log.partition(0))
    retry = log.write("s1", forgotten(FACTS, [ids["Porto"]]), day(4))
    await view.apply([replace(retry, duplicate_of=forget.position.offset)])
    assert await timeline_of(view, namespace) == before

    # A rebuild (every record, retry marked, into a fresh target) forgets the same.
    records = [replace(r, duplicate_of=forget.position.offset) if r is retry else r for r in log.records]
    rebuilt = facts_view(f"{FACTS}@{unique('r')}", REBUILT)
    await rebuilt.apply(records)
    assert await timeline_of(rebuilt, namespace) == before


async def test_a_forgetting_folded_before_its_fact_holds(facts_view: Callable[..., FactsRows], namespace: str) -> None:
    """Facts are namespace-wide: the forgetting may sit on another partition, and be folded first."""
    log = Log(namespace)
    t1 = say(log, "I have a cat named Rex", day(0))
    extract(log, [t1], [("ana", "has_pet", "cat Rex")], day(0.1))
    rex = fact_id(FACTS, [str(t1.event.event_id)], 0)  # the id the view gives it
    forget = log.write("p1-session", forgotten(FACTS, [rex]), day(5), partition=1)
    t2 = say(log, "Rex the cat, again", day(0.5))  # an old turn: re-extracted, another fact id, the same value
    extract(log, [t1, t2], [("ana", "has_pet", "cat Rex"), ("ana", "speaks", "Danish")], day(6))
    view = facts_view()
    await view.apply([forget])  # partition 1 first: no fact yet
    await view.apply(log.partition(0))
    assert await known(view, namespace, history=True) == [("ana", "speaks", "Danish")]

    # A turn after the forgetting saying it again is a new fact.
    t3 = say(log, "I got a new cat, also Rex", day(7))
    extract(log, [t3], [("ana", "has_pet", "cat Rex")], day(7.1))
    await view.apply(log.partition(0)[-2:])
    assert await known(view, namespace) == [("ana", "has_pet", "cat Rex"), ("ana", "speaks", "Danish")]

    # Re-delivered, or rebuilt with the partitions folded the other way round: the same facts.
    before = await timeline_of(view, namespace)
    await view.apply([forget])
    await view.apply(log.partition(0))
    assert await timeline_of(view, namespace) == before
    rebuilt = facts_view(f"{FACTS}@{unique('r')}", REBUILT)
    await rebuilt.apply(log.partition(0))
    await rebuilt.apply(log.partition(1))
    assert await timeline_of(rebuilt, namespace) == before


async def test_merged_facts_go_with_the_forgotten_survivor(
    facts_view: Callable[..., FactsRows], namespace: str
) -> None:
    view, log = facts_view(), Log(namespace)
    t1 = say(log, "Ana speaks Danish", day(0))
    t2 = say(log, "Ana's language: Dansk", day(1))
    extract(log, [t1], [("ana", "speaks", "Danish")], day(0.1))
    extract(log, [t2], [("ana", "speaks", "Dansk")], day(1.1))
    await view.apply(log.records)
    ids = await ids_of(view, namespace)
    await view.apply([log.write("s1", FactsMerged((ids["Danish"], ids["Dansk"])), day(2))])
    assert await known(view, namespace) == [("ana", "speaks", "Danish")]
    await view.apply([log.write("s1", forgotten(FACTS, [ids["Danish"]]), day(3))])
    assert await known(view, namespace, history=True) == []


# --- LangGraph store items ---

A, B = ("users", "u1"), ("users", "u2")


@pytest.fixture(params=KINDS)
async def items_store(request: pytest.FixtureRequest) -> AsyncIterator[Callable[[], ItemStore]]:
    made: list[Any] = []

    def new() -> ItemStore:
        if request.param == "memory":
            made.append(MemoryItems(Items()))
        elif request.param == "redis":
            made.append(RedisItems(request.getfixturevalue("redis_url"), Items(store="redis")))
        else:
            made.append(PostgresItems(request.getfixturevalue("postgres_dsn"), Items(store="postgres")))
        return made[-1]  # type: ignore[no-any-return]

    yield new
    for store in made:
        await store.close()


def item(path: tuple[str, ...], key: str, text: str) -> ItemPut:
    return ItemPut(path, key, json.dumps({"text": text}))


async def held(store: ItemStore, namespace: str) -> list[tuple[Any, ...]]:
    found = await store.find_items(namespace, (), None, 100, 0, day(1))
    return sorted((i.namespace, i.key, i.value, i.created_at, i.updated_at) for i in found)


def keys(rows: list[tuple[Any, ...]]) -> list[tuple[tuple[str, ...], str]]:
    return [(r[0], r[1]) for r in rows]


def test_item_ids_name_an_item() -> None:
    assert item_id(A, "k1") == json.dumps([["users", "u1"], "k1"])
    assert parse_item_id(item_id(("a", "ü/%"), "k")) == (("a", "ü/%"), "k")
    assert parse_item_id("not json") == parse_item_id('"ab"') == parse_item_id("[1, 2]") == ((), "")


async def test_forgotten_items_leave_the_items_view(items_store: Callable[[], ItemStore], namespace: str) -> None:
    store, log = items_store(), Log(namespace)
    a, b = session_of(A), session_of(B)
    for path, sid in ((A, a), (B, b)):
        for k in ("k1", "k2"):
            log.write(sid, item(path, k, f"{path[-1]} {k}"), T0)
    await store.apply(log.partition(0))
    everything = await held(store, namespace)
    assert len(everything) == 4

    # Another view's forgetting; an id of another path than the event's session's; `session`: nothing.
    log.write(a, forgotten("conversation", [item_id(A, "k1")]), T0 + timedelta(seconds=1))
    log.write(a, forgotten(ITEMS, [item_id(B, "k1"), "not an id"]), T0 + timedelta(seconds=2))
    log.write(a, forgotten(ITEMS, session=True), T0 + timedelta(seconds=3))
    await store.apply(log.partition(0)[-3:])
    assert await held(store, namespace) == everything

    forget = log.write(a, forgotten(ITEMS, [item_id(A, "k1"), item_id(A, "k2")]), T0 + timedelta(seconds=4))
    log.write(b, forgotten(ITEMS, [item_id(B, "k2")]), T0 + timedelta(seconds=5))
    await store.apply(log.partition(0)[-2:])
    assert keys(await held(store, namespace)) == [(B, "k1")]
    assert await store.get_item(namespace, A, "k1", day(1)) is None
    assert await store.item_namespaces(namespace, [], None, 10, 0, day(1)) == [B]

    # A later put brings the key back; a re-delivery and a retried forgetting change nothing more.
    log.write(a, item(A, "k1", "back"), T0 + timedelta(seconds=6))
    retry = log.write(a, forgotten(ITEMS, [item_id(A, "k1")]), T0 + timedelta(seconds=7))
    retried = replace(retry, duplicate_of=forget.position.offset)
    await store.apply([*log.partition(0)[-2:-1], retried])
    after = await held(store, namespace)
    assert keys(after) == [(A, "k1"), (B, "k1")]
    await store.apply(log.partition(0)[:-1])
    assert await held(store, namespace) == after

    # A rebuild: the same records, in one batch, into a fresh store (this namespace's data dropped first).
    records = [retried if r is retry else r for r in log.records]
    await store.drop([namespace], [log.topic])
    rebuilt = items_store()
    await rebuilt.apply(records)
    assert await held(rebuilt, namespace) == after
    reference = MemoryItems(Items())
    await reference.apply(records)
    assert await held(reference, namespace) == after


# --- LangGraph checkpoints ---


@pytest.fixture(params=KINDS)
async def checkpoint_store(request: pytest.FixtureRequest) -> AsyncIterator[Callable[[], CheckpointStore]]:
    made: list[Any] = []

    def new() -> CheckpointStore:
        name = unique("cpforget")
        if request.param == "memory":
            made.append(MemoryCheckpoints(name))
        elif request.param == "redis":
            made.append(RedisCheckpoints(request.getfixturevalue("redis_url"), name))
        else:
            made.append(PostgresCheckpoints(request.getfixturevalue("postgres_dsn"), name))
        return made[-1]  # type: ignore[no-any-return]

    yield new
    for store in made:
        await store.close()


def threads_of(records: Sequence[Record]) -> dict[str, Thread]:
    """The pure fold, retries skipped as the projections skip them."""
    out: dict[str, Thread] = {}
    for r in records:
        if r.duplicate_of is None:
            out[r.event.session_id] = fold(out.get(r.event.session_id, Thread()), r.event)
    return out


async def rows(store: CheckpointStore, namespace: str, ref: dict[str, Thread]) -> dict[str, Any]:
    """Every thread the store holds, as `rows_of` reads it (the blobs `ref` names)."""
    listed = await store.listing(namespace, None, None, None, None)
    threads = sorted({s.thread_id for s in listed})
    return {t: await rows_of(store, namespace, t, ref.get(t, Thread())) for t in threads}


async def test_a_forgotten_session_leaves_the_checkpoints_view(
    checkpoint_store: Callable[[], CheckpointStore], namespace: str
) -> None:
    store, log = checkpoint_store(), Log(namespace)
    log.write("a", saved("01", None, "r1", x="1"))
    log.write("a", writes("01", "t1", (0, "x", "w")))
    log.write("b", saved("01", None, "r1", x="2"))
    log.write("a", forgotten("conversation", session=True))  # another view's
    log.write("a", forgotten(CHECKPOINTS, ["01"]))  # ids mean nothing here
    await store.apply(log.records)
    before = await rows(store, namespace, threads_of(log.records))
    assert sorted(before) == ["a", "b"] and before["a"]["checkpoints"]

    forget = log.write("a", forgotten(CHECKPOINTS, session=True))
    await store.apply([forget])
    assert await store.listing(namespace, "a", None, None, None) == []
    assert await store.writes(namespace, "a", "", "01") == []
    assert await store.blobs(namespace, "a", "", [("x", '"1"')]) == {}
    assert [s.thread_id for s in await store.listing(namespace, None, None, None, None)] == ["b"]

    # The thread starts afresh; a retried forgetting and a re-delivery change nothing more.
    log.write("a", saved("02", None, "r2", x="3"))
    retry = log.write("a", forgotten(CHECKPOINTS, session=True))
    records = [replace(r, duplicate_of=forget.position.offset) if r is retry else r for r in log.records]
    ref = threads_of(records)
    await store.apply(records[-2:])
    after = await rows(store, namespace, ref)
    assert sorted(after) == ["a", "b"] and [c[1] for c in after["a"]["checkpoints"]] == ["02"]
    assert after == {t: expected_rows(ref[t]) for t in after}
    await store.apply(records)
    assert await rows(store, namespace, ref) == after

    # A rebuild into a fresh store: the same rows.
    rebuilt = checkpoint_store()
    await rebuilt.apply(records)
    assert await rows(rebuilt, namespace, ref) == after

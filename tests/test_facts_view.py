"""The facts view's fold and timeline on every row store: supersession, history, bi-temporal
answers, people outranking the model, retractions, merges, clears, erasure and pending turns."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from helix_es.model.events import (
    Event,
    ExtractedFact,
    FactAsserted,
    FactRetracted,
    FactsExtracted,
    FactsMerged,
    FactsUnmerged,
    MemoryCleared,
    MessageAdded,
    Payload,
    Position,
    Record,
    SessionErased,
    SourceTurn,
)
from helix_es.model.facts import FactsAsk
from helix_es.model.message import Message
from helix_es.projection.facts import FactsRows
from helix_es.stores.memory.rows import MemoryRows
from helix_es.stores.ports import SessionKey
from helix_es.stores.postgres.rows import PostgresRows
from helix_es.stores.redis.rows import RedisRows
from helix_es.views.facts import tables

TABLE = "facts_view_test"
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def day(n: int) -> datetime:
    return T0 + timedelta(days=n)


@pytest.fixture(params=["memory", "redis", "postgres"])
async def view(request: pytest.FixtureRequest) -> AsyncIterator[FactsRows]:
    kind = request.param
    if kind == "memory":
        store = MemoryRows("facts", tables(TABLE))
    elif kind == "redis":
        store = RedisRows(request.getfixturevalue("redis_url"), "facts", tables(TABLE))
    else:
        store = PostgresRows(request.getfixturevalue("postgres_dsn"), "facts", tables(TABLE))
    rows = FactsRows(store, TABLE, source="facts")
    yield rows
    await rows.close()


class Log:
    """Events of one namespace on one partition, folded into the view as they are written."""

    def __init__(self, view: FactsRows, namespace: str) -> None:
        self.view, self.namespace, self.offset = view, namespace, 0
        self.topic = f"helix.memory.{namespace}"  # checkpoints are per view and topic-partition
        self.records: list[Record] = []

    async def write(self, session: str, payload: Payload, at: datetime) -> Record:
        event = Event(self.namespace, session, payload, timestamp=at)
        record = Record(event, Position(self.topic, 0, self.offset))
        self.offset += 1
        self.records.append(record)
        await self.view.apply([record])
        return record

    async def say(self, session: str, text: str, at: datetime) -> Record:
        return await self.write(session, MessageAdded(Message(role="user", content=text, name="ana")), at)

    async def extract(
        self,
        session: str,
        turns: Sequence[Record],
        facts: Sequence[tuple[str, str, str, datetime | None]],
        at: datetime,
    ) -> Record:
        sources = tuple(SourceTurn(str(r.event.event_id), r.position, r.event.timestamp) for r in turns)
        extracted = tuple(ExtractedFact(s, p, v, vf) for s, p, v, vf in facts)
        return await self.write(session, FactsExtracted("facts", "rules/v1", "", extracted, sources), at)


def values(facts: Sequence[object]) -> list[tuple[str, str, str]]:
    return [(f.subject, f.predicate, f.value) for f in facts]  # type: ignore[attr-defined]


async def test_a_new_value_supersedes_and_history_keeps_the_old(view: FactsRows, namespace: str) -> None:
    log = Log(view, namespace)
    t1 = await log.say("s1", "I live in Lisbon", day(0))
    await log.extract("s1", [t1], [("ana", "lives_in", "Lisbon", None)], day(0) + timedelta(seconds=5))
    assert [r["content"] for r in await view.pending(namespace) or []] == []
    t2 = await log.say("s2", "I moved to Porto", day(200))
    assert [r["content"] for r in await view.pending(namespace) or []] == ["I moved to Porto"]
    await log.extract("s2", [t2], [("ana", "lives_in", "Porto", day(180))], day(200) + timedelta(seconds=5))

    now = await view.facts(namespace, FactsAsk())
    assert values(now or []) == [("ana", "lives_in", "Porto")]
    assert now and now[0].valid_from == day(180) and now[0].model == "rules/v1" and now[0].source == [t2.position]
    history = await view.facts(namespace, FactsAsk(subject="ANA", predicate="lives_in", history=True)) or []
    assert [(f.value, f.valid_from, f.valid_to) for f in history] == [
        ("Lisbon", day(0), day(180)),
        ("Porto", day(180), None),
    ]
    # valid time: where she lived on day 100; known time: what the memory knew on day 190
    assert values(await view.facts(namespace, FactsAsk(as_of=day(100))) or []) == [("ana", "lives_in", "Lisbon")]
    known = await view.facts(namespace, FactsAsk(known_as_of=day(190))) or []
    assert values(known) == [("ana", "lives_in", "Lisbon")] and known[0].valid_to is None
    assert await view.facts(namespace, FactsAsk(as_of=day(-1))) == []


async def test_multi_valued_accumulate_and_opposites_close(view: FactsRows, namespace: str) -> None:
    log = Log(view, namespace)
    t = [await log.say("s", text, day(i)) for i, text in enumerate(["jazz", "tea", "no jazz", "jazz again"])]
    await log.extract("s", t[:2], [("ana", "likes", "jazz", day(0)), ("ana", "likes", "tea", day(1))], day(2))
    await log.extract("s", t[2:3], [("ana", "dislikes", "jazz", day(2))], day(3))
    assert sorted(values(await view.facts(namespace, FactsAsk()) or [])) == [
        ("ana", "dislikes", "jazz"),
        ("ana", "likes", "tea"),
    ]
    await log.extract("s", t[3:], [("ana", "likes", "jazz", day(3))], day(4))
    history = await view.facts(namespace, FactsAsk(history=True)) or []
    assert sorted((f.predicate, f.value, f.valid_from, f.valid_to) for f in history) == [
        ("dislikes", "jazz", day(2), day(3)),
        ("likes", "jazz", day(0), day(2)),
        ("likes", "jazz", day(3), None),
        ("likes", "tea", day(1), None),
    ]


async def test_a_person_outranks_the_model(view: FactsRows, namespace: str) -> None:
    log = Log(view, namespace)
    t1 = await log.say("s", "I work at Acme", day(10))
    await log.write("s", FactAsserted("ana", "works_at", "Globex", day(5)), day(20))
    # the model, slow, extracts the earlier turn after the correction: it does not override it
    await log.extract("s", [t1], [("ana", "works_at", "Acme", None)], day(21))
    assert values(await view.facts(namespace, FactsAsk()) or []) == [("ana", "works_at", "Globex")]
    # a turn said after the correction may move the fact on
    t2 = await log.say("s", "I joined Initech", day(30))
    await log.extract("s", [t2], [("ana", "works_at", "Initech", None)], day(31))
    assert values(await view.facts(namespace, FactsAsk()) or []) == [("ana", "works_at", "Initech")]
    people = [f for f in await view.facts(namespace, FactsAsk(history=True)) or [] if f.model is None]
    assert values(people) == [("ana", "works_at", "Globex")] and people[0].valid_to == day(30)


async def test_a_retraction_holds_against_the_model_repeating_earlier_turns(view: FactsRows, namespace: str) -> None:
    log = Log(view, namespace)
    t1 = await log.say("s", "I have a cat named Rex", day(0))
    await log.extract("s", [t1], [("ana", "has_pet", "cat Rex", None)], day(1))
    (fact,) = await view.facts(namespace, FactsAsk()) or []
    retracted = await log.write("s", FactRetracted(fact.id, "ana", "has_pet", "cat Rex", "it was a joke"), day(2))
    assert await view.facts(namespace, FactsAsk()) == []
    gone = await view.facts(namespace, FactsAsk(history=True)) or []
    assert [(f.id, f.known_to) for f in gone] == [(fact.id, day(2))]
    # before the retraction, the memory knew it
    assert values(await view.facts(namespace, FactsAsk(known_as_of=day(1))) or []) == [("ana", "has_pet", "cat Rex")]
    await log.extract("s", [t1], [("ana", "has_pet", "cat Rex", None)], day(3))  # re-extracted from the old turn
    assert await view.facts(namespace, FactsAsk()) == []
    t2 = await log.say("s", "I adopted Rex for real", day(4))
    await log.extract("s", [t2], [("ana", "has_pet", "cat Rex", None)], day(5))
    assert values(await view.facts(namespace, FactsAsk()) or []) == [("ana", "has_pet", "cat Rex")]
    assert retracted.position.offset > t1.position.offset


async def test_merge_and_unmerge(view: FactsRows, namespace: str) -> None:
    log = Log(view, namespace)
    t1 = await log.say("s", "Python", day(0))
    t2 = await log.say("s", "python 3", day(1))
    await log.extract("s", [t1], [("ana", "speaks", "Portuguese", None)], day(1))
    await log.extract("s", [t2], [("ana", "speaks", "portuguese (native)", None)], day(2))
    a, b = await view.facts(namespace, FactsAsk()) or []
    merged = await log.write("s", FactsMerged((a.id, b.id)), day(3))
    (one,) = await view.facts(namespace, FactsAsk()) or []
    assert one.id == a.id and set(one.source) == {t1.position, t2.position}
    await log.write("s", FactsUnmerged(merged.position), day(4))
    assert {f.id for f in await view.facts(namespace, FactsAsk()) or []} == {a.id, b.id}


async def test_clear_ends_the_sessions_model_facts_and_erasure_removes_them(view: FactsRows, namespace: str) -> None:
    log = Log(view, namespace)
    t1 = await log.say("s1", "I live in Lisbon", day(0))
    await log.extract("s1", [t1], [("ana", "lives_in", "Lisbon", None)], day(1))
    t2 = await log.say("s2", "I like tea", day(2))
    await log.extract("s2", [t2], [("ana", "likes", "tea", None)], day(3))
    await log.say("s1", "still pending", day(4))
    await log.write("s1", MemoryCleared(), day(5))
    assert values(await view.facts(namespace, FactsAsk()) or []) == [("ana", "likes", "tea")]
    assert await view.pending(namespace) == []
    await log.write("s2", SessionErased("asked to"), day(6))
    assert await view.facts(namespace, FactsAsk()) == []
    assert [f.value for f in await view.facts(namespace, FactsAsk(history=True)) or []] == ["Lisbon"]


async def test_a_redelivered_batch_states_nothing_twice(view: FactsRows, namespace: str) -> None:
    log = Log(view, namespace)
    t1 = await log.say("s", "I speak Dutch", day(0))
    extracted = await log.extract("s", [t1], [("ana", "speaks", "Dutch", None)], day(1))
    again = Record(
        Event(namespace, "s", extracted.event.payload, uuid.uuid4(), day(2)), Position(log.topic, 0, log.offset)
    )
    await view.apply([again])  # the worker retried after a crash: the same sources, the same ids
    assert len(await view.facts(namespace, FactsAsk(history=True)) or []) == 1
    await view.apply(log.records)  # below the checkpoint: nothing
    assert len(await view.facts(namespace, FactsAsk(history=True)) or []) == 1


async def test_facts_of_another_view_are_not_this_ones(view: FactsRows, namespace: str) -> None:
    log = Log(view, namespace)
    t1 = await log.say("s", "I speak Dutch", day(0))
    sources = (SourceTurn(str(t1.event.event_id), t1.position, day(0)),)
    other = FactsExtracted("facts-other", "m", "", (ExtractedFact("ana", "speaks", "Dutch"),), sources)
    await log.write("s", other, day(1))
    assert await view.facts(namespace, FactsAsk()) == []
    assert len(await view.pending(namespace) or []) == 1


async def test_a_retried_write_folds_nothing_and_the_checkpoint_moves_past_it(view: FactsRows, namespace: str) -> None:
    """A read waits for its session's last write, a retry's position too: the view must get there."""
    log = Log(view, namespace)
    first = await log.say("s", "I speak Dutch", day(0))
    for payload in (first.event.payload, MemoryCleared()):  # a retried add, then a retried clear
        retry = Record(Event(namespace, "s", payload, timestamp=day(1)), Position(log.topic, 0, log.offset), 0)
        log.offset += 1
        await view.apply([retry])
        assert await view.applied(SessionKey(namespace, "s"), retry.position) == retry.position.offset
    assert [r["content"] for r in await view.pending(namespace) or []] == ["I speak Dutch"]  # not cleared

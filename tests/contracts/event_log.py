"""`EventLog`: the one source of truth. Appends return positions; reads give the events back, in log order."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator

import pytest

from helix_es import Event, EventTooLarge, Message, MessageAdded, Position, Record
from helix_es.log.port import EventLog
from helix_es.model import names
from tests.conftest import unique

NewLog = Callable[[], EventLog]


def event(namespace: str, session: str, i: int) -> Event:
    return Event(namespace, session, MessageAdded(Message("user", f"message {i}")))


async def read_all(log: EventLog, namespace: str, session_id: str | None = None) -> list[Record]:
    return [r async for r in log.read(namespace, session_id=session_id)]


class EventLogContract:
    """Subclasses override `new_log`: a factory of logs over one place (a directory, a cluster)."""

    @pytest.fixture
    def new_log(self) -> Iterator[NewLog]:
        raise NotImplementedError("an EventLogContract subclass provides the `new_log` fixture")
        yield  # pragma: no cover

    @pytest.fixture
    def log(self, new_log: NewLog) -> EventLog:
        return new_log()

    async def test_appends_return_increasing_offsets_and_read_back_in_order(self, log: EventLog) -> None:
        ns = unique("log")
        sent = [event(ns, "s", i) for i in range(5)]
        positions = [await log.append(e) for e in sent]
        assert [p.offset for p in positions] == list(range(5))  # a new namespace starts at 0
        topic = names.topic(ns, log.topic_prefix)
        assert {(p.topic, p.partition) for p in positions} == {(topic, positions[0].partition)}
        records = await read_all(log, ns)
        assert [r.event for r in records] == sent
        assert [r.position for r in records] == positions
        assert [r.event.payload.message.content for r in records] == [  # type: ignore[union-attr]
            f"message {i}" for i in range(5)
        ]

    async def test_a_new_log_over_the_same_place_reads_every_event(self, new_log: NewLog) -> None:
        ns = unique("log")
        writer = new_log()
        sent = [event(ns, "s", i) for i in range(3)]
        positions = [await writer.append(e) for e in sent]
        await writer.close()
        reader = new_log()  # as another process would open it
        records = await read_all(reader, ns)
        assert [(r.event, r.position) for r in records] == list(zip(sent, positions, strict=True))
        assert ns in await reader.namespaces()

    async def test_each_session_keeps_its_order_and_reads_alone(self, log: EventLog) -> None:
        ns = unique("log")
        sessions = ["alice", "bob", "carol", "dave"]
        sent: dict[str, list[tuple[Event, Position]]] = {s: [] for s in sessions}
        for i in range(3):
            for s in sessions:
                e = event(ns, s, i)
                sent[s].append((e, await log.append(e)))
        # Concurrent appends of several sessions: each gets a position of its own.
        batch = [event(ns, s, 3) for s in sessions]
        for e, p in zip(batch, await asyncio.gather(*(log.append(e) for e in batch)), strict=True):
            sent[e.session_id].append((e, p))
        everything = await read_all(log, ns)
        assert sorted(str(r.event.event_id) for r in everything) == sorted(
            str(e.event_id) for s in sessions for e, _ in sent[s]
        )  # each once
        by_partition: dict[tuple[str, int], list[int]] = {}
        for r in everything:
            by_partition.setdefault((r.position.topic, r.position.partition), []).append(r.position.offset)
        for offsets in by_partition.values():
            assert offsets == list(range(len(offsets)))  # in log order, no gaps: nothing else wrote there
        where = {r.event.event_id: r.position for r in everything}
        for s in sessions:
            assert [where[e.event_id] for e, _ in sent[s]] == [p for _, p in sent[s]]
            assert len({(p.topic, p.partition) for _, p in sent[s]}) == 1  # a session lives in one partition
            assert [p.offset for _, p in sent[s]] == sorted(p.offset for _, p in sent[s])
            mine = await read_all(log, ns, session_id=s)
            assert [r.event for r in mine] == [e for e, _ in sent[s]]
            assert [r.position for r in mine] == [p for _, p in sent[s]]
        assert await read_all(log, ns, session_id="nobody") == []

    async def test_a_read_from_kept_offsets_gives_only_what_came_since(self, log: EventLog) -> None:
        ns = unique("log")
        sessions = ["alice", "bob", "carol", "dave"]
        first = [await log.append(event(ns, s, i)) for i in range(3) for s in sessions]
        after: dict[int, int] = {}  # what a reader keeps
        everything = [r async for r in log.read(ns, on_end=after.__setitem__)]
        assert after == {p: max(r.position.offset for r in everything if r.position.partition == p) + 1 for p in after}
        assert set(after) >= {p.partition for p in first}
        assert [r async for r in log.read(ns, start=after)] == []
        later = [event(ns, s, 9) for s in sessions]
        positions = [await log.append(e) for e in later]
        since = [r async for r in log.read(ns, start=after)]
        assert sorted(str(r.event.event_id) for r in since) == sorted(str(e.event_id) for e in later)
        assert {r.position for r in since} == set(positions)
        # A partition it does not name is read from its beginning; one session's read starts there too.
        one = first[0].partition
        assert [r.position for r in await read_all(log, ns) if r.position.partition == one] == [
            r.position
            async for r in log.read(ns, start={p: o for p, o in after.items() if p != one})
            if r.position.partition == one
        ]
        mine = [r.event async for r in log.read(ns, session_id="alice", start=after)]
        assert mine == [later[0]]
        # A session's read covers the other sessions' records too: its next read starts past them.
        alice: dict[int, int] = {}
        ends: dict[int, int] = {}
        assert len([r async for r in log.read(ns, session_id="alice", on_end=alice.__setitem__)]) == 4
        total = len([r async for r in log.read(ns, on_end=ends.__setitem__)])
        assert alice == ends and sum(ends.values()) == total == 16  # offsets from 0 in every partition
        assert [r async for r in log.read(ns, session_id="alice", start=alice)] == []

    async def test_an_append_cancelled_and_retried_is_written_once(self, log: EventLog) -> None:
        """A timeout cancels the caller's wait, not the write under way: the same event again waits
        for that write (or writes it, if it never started) instead of writing it twice."""
        ns = unique("log")
        await log.append(event(ns, "warm-up", 0))  # connections and the topic exist: the cancels land on writes
        sent: list[Event] = []
        positions: dict[uuid.UUID, Position] = {}
        retried = 0
        for i, delay in enumerate([0, 0, 0, 0, 0.001, 0.001, 0.002, 0.005, 0.01, 0.02]):
            e = event(ns, "s", i)
            sent.append(e)
            task = asyncio.create_task(log.append(e))
            await asyncio.sleep(delay)
            task.cancel()
            try:
                positions[e.event_id] = await task  # it finished before the cancel
            except asyncio.CancelledError:
                retried += 1
                positions[e.event_id] = await log.append(e)  # the retry: the very same event
        assert retried >= 4  # the zero delays cancel every append mid-way
        records = await read_all(log, ns, session_id="s")
        assert [r.event for r in records] == sent
        assert [r.position for r in records] == [positions[e.event_id] for e in sent]

    async def test_an_event_too_large_writes_nothing(self, log: EventLog) -> None:
        ns = unique("log")
        with pytest.raises(EventTooLarge, match="limit") as err:
            await log.append(Event(ns, "s", MessageAdded(Message("user", "x" * 1_000_000))))
        assert isinstance(err.value, ValueError) and err.value.field == "event"
        assert ns not in await log.namespaces()
        assert await read_all(log, ns) == []
        assert (await log.append(event(ns, "s", 0))).offset == 0  # nothing took a place before it

    async def test_namespaces_lists_those_written(self, log: EventLog) -> None:
        written, never = unique("log"), unique("log")
        await log.append(event(written, "s", 0))
        found = await log.namespaces()
        assert written in found and never not in found
        assert found == sorted(found)

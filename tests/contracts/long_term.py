"""The long-term view (`LongTermRows` over a row store, a `Projection`): one namespace-wide view in event order."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest

from helix_es import Message
from helix_es.model import names
from helix_es.model.events import Event, MemoryCleared, MessageAdded, MessageRetracted, Position, Record
from helix_es.projection.protocol import Projection
from helix_es.stores.ports import CheckpointLost, SessionKey
from tests.conftest import unique

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def contents(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


def record(namespace: str, session_id: str, payload: Any, at: datetime, position: Position) -> Record:
    return Record(Event(namespace, session_id, payload, timestamp=at), position)


def said(namespace: str, topic: str, partition: int, offset: int, text: str, at: datetime, sid: str = "s") -> Record:
    return record(namespace, sid, MessageAdded(Message("user", text)), at, Position(topic, partition, offset))


def cleared(namespace: str, topic: str, partition: int, offset: int, at: datetime, sid: str = "s") -> Record:
    return record(namespace, sid, MemoryCleared(), at, Position(topic, partition, offset))


def took(namespace: str, topic: str, partition: int, offset: int, at: datetime, sid: str = "s") -> Record:
    return record(namespace, sid, MessageRetracted(), at, Position(topic, partition, offset))


class LongTermContract:
    """Subclasses override `store` (a fresh long-term store named "long-term") and the two hooks below."""

    # Redis loses its checkpoints with their data (FLUSHALL): after a lost one it refuses a batch once.
    refuses_after_a_lost_checkpoint = False

    @pytest.fixture
    async def store(self) -> AsyncIterator[Projection]:
        raise NotImplementedError("a LongTermContract subclass provides the `store` fixture")
        yield  # pragma: no cover

    async def stored_sessions(self, store: Projection, namespace: str) -> list[str]:
        """The session id kept beside each message, read from the store itself, in view order."""
        raise NotImplementedError

    async def forget_checkpoint(self, store: Projection, topic: str, partition: int) -> None:
        """Lose the checkpoint, as a restored backup would: the next delivery is applied again."""
        raise NotImplementedError

    async def test_an_empty_namespace_reads_empty(self, store: Projection) -> None:
        ns = unique("lt")
        topic = names.topic(ns)
        key = SessionKey(ns, "s")
        assert store.kind in {"memory", "redis", "postgres"} and store.name == "long-term"
        assert await store.checkpoint(topic, 0) is None
        assert await store.get(key, None) == []
        assert await store.search(key, "", 10, None) == []
        assert await store.get(key, Position(topic, 0, 0)) is None  # nothing applied there: not yet
        assert await store.applied(key, Position(topic, 0, 0)) is None

    async def test_a_redelivered_batch_changes_nothing(self, store: Projection) -> None:
        ns = unique("lt")
        topic = names.topic(ns)
        batch = [
            said(ns, topic, 0, 0, "one", T0, sid="a"),
            said(ns, topic, 0, 1, "two", T0 + timedelta(seconds=1), sid="b"),
            cleared(ns, topic, 0, 2, T0 + timedelta(seconds=2)),
            said(ns, topic, 0, 3, "three", T0 + timedelta(seconds=3), sid="a"),
            said(ns, topic, 0, 4, "four", T0 + timedelta(seconds=4), sid="b"),
        ]
        key = SessionKey(ns, "a")
        assert (await store.apply(batch)).events == 5
        assert await store.checkpoint(topic, 0) == 4
        assert contents(await store.get(key, None) or []) == ["three", "four"]
        assert (await store.apply(batch)).events == 0  # at or below the checkpoint: skipped
        assert (await store.apply(batch[3:])).events == 0
        assert contents(await store.get(key, None) or []) == ["three", "four"]
        # Past a lost checkpoint the events apply again, and the row keys keep them single. Redis, which
        # loses checkpoints with their data (FLUSHALL), first refuses once: the projector refolds then.
        await self.forget_checkpoint(store, topic, 0)
        assert await store.checkpoint(topic, 0) is None
        if self.refuses_after_a_lost_checkpoint:
            with pytest.raises(CheckpointLost):
                await store.apply(batch)
        assert (await store.apply(batch)).events == 5
        assert contents(await store.get(key, None) or []) == ["three", "four"]
        assert await self.stored_sessions(store, ns) == ["a", "b"]
        assert await store.checkpoint(topic, 0) == 4

    async def test_messages_no_newer_than_a_clear_of_their_batch_are_gone_wherever_they_stand(
        self, store: Projection
    ) -> None:
        ns = unique("lt")
        topic = names.topic(ns)
        at = [T0 + timedelta(seconds=i) for i in range(8)]
        batch = [
            said(ns, topic, 0, 0, "t1", at[1]),
            said(ns, topic, 0, 1, "t5", at[5]),
            cleared(ns, topic, 0, 2, at[3]),
            said(ns, topic, 0, 3, "t2, after the clear", at[2]),
            said(ns, topic, 0, 4, "t3, at the clear", at[3]),
            said(ns, topic, 0, 5, "t4", at[4]),
            cleared(ns, topic, 0, 6, at[0]),  # older than the first: moves nothing
            said(ns, topic, 0, 7, "t6", at[6]),
        ]
        assert (await store.apply(batch)).events == 8
        assert contents(await store.get(SessionKey(ns, "s"), None) or []) == ["t4", "t5", "t6"]
        assert await store.checkpoint(topic, 0) == 7
        assert await self.stored_sessions(store, ns) == ["s"] * 3  # nothing else left behind

    async def test_order_and_clears_do_not_depend_on_which_partition_is_applied_first(self, store: Projection) -> None:
        def batches(ns: str) -> tuple[list[Record], list[Record]]:
            topic = names.topic(ns)
            at = [T0 + timedelta(milliseconds=i) for i in range(8)]
            p0 = [
                said(ns, topic, 0, 0, "p0 t0", at[0]),
                said(ns, topic, 0, 1, "p0 t3", at[3]),
                said(ns, topic, 0, 2, "p0 t5", at[5]),
                said(ns, topic, 0, 3, "p0 t7", at[7]),
            ]
            p1 = [
                said(ns, topic, 1, 0, "p1 t1", at[1]),
                cleared(ns, topic, 1, 1, at[4]),
                said(ns, topic, 1, 2, "p1 t6", at[6]),
                said(ns, topic, 1, 3, "p1 t6 too", at[6]),
            ]
            return p0, p1

        expected = ["p0 t5", "p1 t6", "p1 t6 too", "p0 t7"]
        ns_a, ns_b, ns_c = unique("lt-a"), unique("lt-b"), unique("lt-c")
        a0, a1 = batches(ns_a)
        await store.apply(a0)
        await store.apply(a1)
        b0, b1 = batches(ns_b)
        await store.apply(b1)
        await store.apply(b0)
        c0, c1 = batches(ns_c)  # interleaved, one record at a time
        for r in (c1[0], c0[0], c0[1], c1[1], c0[2], c1[2], c0[3], c1[3]):
            await store.apply([r])
        for ns in (ns_a, ns_b, ns_c):
            assert contents(await store.get(SessionKey(ns, "s"), None) or []) == expected, ns
            assert contents(await store.search(SessionKey(ns, "s"), "T6", 10, None) or []) == expected[1:3]

    async def test_partitions_applied_concurrently_agree(self, store: Projection) -> None:
        """Projectors of two partitions racing on one namespace: a clear never misses an older message."""
        namespaces = [unique("lt-race") for _ in range(8)]
        runs = []
        for ns in namespaces:
            topic = names.topic(ns)
            at = [T0 + timedelta(milliseconds=i) for i in range(6)]
            p0 = [
                said(ns, topic, 0, 0, "old", at[0]),
                said(ns, topic, 0, 1, "older than the clear", at[2]),
                said(ns, topic, 0, 2, "kept", at[5]),
            ]
            p1 = [
                said(ns, topic, 1, 0, "also old", at[1]),
                cleared(ns, topic, 1, 1, at[3]),
                said(ns, topic, 1, 2, "kept too", at[4]),
            ]
            runs += [store.apply(p0), store.apply(p1)]
        await asyncio.gather(*runs)
        for ns in namespaces:
            assert contents(await store.get(SessionKey(ns, "s"), None) or []) == ["kept too", "kept"]

    async def test_reads_wait_for_the_checkpoint_of_the_callers_write(self, store: Projection) -> None:
        ns = unique("lt")
        topic = names.topic(ns)
        key = SessionKey(ns, "s")
        records = [said(ns, topic, 0, i, f"m{i}", T0 + timedelta(seconds=i)) for i in range(4)]
        await store.apply(records[:2])
        want = Position(topic, 0, 3)
        assert await store.get(key, want) is None
        assert await store.search(key, "m", 10, want) is None
        assert await store.applied(key, want) == 1
        assert await store.get(key, Position(topic, 1, 0)) is None  # nothing applied there yet
        assert await store.applied(key, Position(topic, 1, 0)) is None
        assert contents(await store.get(key, Position(topic, 0, 1)) or []) == ["m0", "m1"]
        await store.apply(records[2:])
        assert contents(await store.get(key, want) or []) == ["m0", "m1", "m2", "m3"]
        assert contents(await store.search(key, "M3", 10, want) or []) == ["m3"]
        assert await store.applied(key, want) == 3

    async def test_a_batch_is_one_topic_partition(self, store: Projection) -> None:
        ns = unique("lt")
        topic = names.topic(ns)
        with pytest.raises(ValueError, match="one topic-partition"):
            await store.apply([said(ns, topic, 0, 0, "a", T0), said(ns, topic, 1, 0, "b", T0)])
        assert await store.checkpoint(topic, 0) is None

    @pytest.mark.parametrize("cuts", [(), (1,), (2, 4), (1, 2, 3, 4, 5, 6, 7)])
    async def test_a_retraction_deletes_its_sessions_newest_row_before_it(
        self, store: Projection, cuts: tuple[int, ...]
    ) -> None:
        """Whatever the batches, on its own partition, never another session's row; applied once."""
        ns = unique("lt")
        topic = names.topic(ns)
        t = [T0 + timedelta(seconds=i) for i in range(20)]
        p0 = [
            said(ns, topic, 0, 0, "a1", t[0], sid="a"),
            said(ns, topic, 0, 1, "c1", t[1], sid="c"),
            said(ns, topic, 0, 2, "a2", t[2], sid="a"),
            took(ns, topic, 0, 3, t[3], sid="a"),  # a2
            said(ns, topic, 0, 4, "a3", t[4], sid="a"),
            took(ns, topic, 0, 5, t[5], sid="a"),  # a3
            took(ns, topic, 0, 6, t[6], sid="a"),  # a1, not c1
            took(ns, topic, 0, 7, t[7], sid="a"),  # nothing of a is left
            said(ns, topic, 0, 8, "a4", t[8], sid="a"),
        ]
        p1 = [said(ns, topic, 1, 0, "b1", t[9], sid="b"), said(ns, topic, 1, 1, "b2", t[10], sid="b")]
        p1.append(took(ns, topic, 1, 2, t[11], sid="b"))
        bounds = [0, *cuts, len(p0)]
        for lo, hi in pairwise(bounds):
            await store.apply(p0[lo:hi])
        await store.apply(p1)
        key = SessionKey(ns, "a")
        assert contents(await store.get(key, None) or []) == ["c1", "a4", "b1"]
        await store.apply(p0)  # re-delivered: the checkpoint covers it, no row more goes
        retry = Record(took(ns, topic, 1, 3, t[12], sid="b").event, Position(topic, 1, 3), duplicate_of=2)
        await store.apply([retry])  # a retried retraction: nothing
        assert contents(await store.get(key, None) or []) == ["c1", "a4", "b1"]

    async def test_retractions_in_a_big_batch(self, store: Projection) -> None:
        """Past the stores' bulk-write size, with retractions between the rows and at the end."""
        ns = unique("lt")
        topic = names.topic(ns)
        batch, offset, expected = [], 0, []
        for i in range(260):
            batch.append(said(ns, topic, 0, offset, f"m{i}", T0 + timedelta(milliseconds=offset)))
            expected.append(f"m{i}")
            offset += 1
            if i % 97 == 96:
                for _ in range(2):
                    batch.append(took(ns, topic, 0, offset, T0 + timedelta(milliseconds=offset)))
                    expected.pop()
                    offset += 1
        batch.append(took(ns, topic, 0, offset, T0 + timedelta(milliseconds=offset)))
        expected.pop()
        await store.apply(batch)
        assert contents(await store.get(SessionKey(ns, "s"), None) or []) == expected

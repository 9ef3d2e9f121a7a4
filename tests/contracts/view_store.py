"""`ViewStore`: states, session guards and partition checkpoints, written atomically."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from helix_es import Event, MemoryCleared, Message, MessageAdded, Position, Record
from helix_es.projection.fold import project
from helix_es.projection.session import SessionProjection
from helix_es.stores.memory.views import MemoryStore
from helix_es.stores.ports import EMPTY, Change, SessionKey, Snapshot, StaleWrite, ViewStore
from helix_es.views.conversation import Conversation
from helix_es.views.sliding_window import SlidingWindow
from tests.conftest import unique


def records(ns: str, topic: str, items: list[tuple[str, Any]], start: int = 0) -> list[Record]:
    out = []
    for i, (session, what) in enumerate(items, start):
        payload = MemoryCleared() if what is None else MessageAdded(Message("user", what))
        out.append(Record(Event(ns, session, payload), Position(topic, 0, i)))
    return out


def texts(snapshot: Snapshot) -> list[str]:
    return [m.content for m in snapshot.state]


class ViewStoreContract:
    """Subclasses override `store`: a fresh adapter over its real service, closed after the test."""

    @pytest.fixture
    async def store(self) -> AsyncIterator[ViewStore]:
        raise NotImplementedError("a ViewStoreContract subclass provides the `store` fixture")
        yield  # pragma: no cover

    async def test_an_unknown_session_is_empty(self, store: ViewStore) -> None:
        key = SessionKey(unique("ns"), "nobody")
        assert await store.read(Conversation(), key) == EMPTY
        assert await store.load(Conversation(), [key]) == {key: EMPTY}
        assert await store.checkpoint(Conversation(), "helix.memory.nothing", 0) is None

    async def test_project_writes_state_guard_and_checkpoint(self, store: ViewStore) -> None:
        ns = unique("ns")
        topic = f"helix.memory.{ns}"
        view = SlidingWindow(2)
        batch = records(ns, topic, [("a", "a1"), ("b", "b1"), ("a", "a2"), ("a", "a3"), ("b", None), ("b", "b2")])
        assert await project(view, store, batch) == 6
        a, b = SessionKey(ns, "a"), SessionKey(ns, "b")
        assert texts(await store.read(view, a)) == ["a2", "a3"]
        assert (await store.read(view, a)).applied == 3
        assert texts(await store.read(view, b)) == ["b2"]
        assert (await store.read(view, b)).applied == 5
        assert await store.checkpoint(view, topic, 0) == 5
        # The same view kept under another name is a separate view.
        assert await store.read(SlidingWindow(3), a) == EMPTY

    async def test_sessions_lists_what_the_view_holds_of_one_namespace(self, store: ViewStore) -> None:
        ns, other = unique("ns"), unique("ns")
        topic = f"helix.memory.{ns}"
        view = SlidingWindow(2)
        assert await store.sessions(view, ns) == []
        await project(view, store, records(ns, topic, [("b", "b1"), ("a:1", "a1"), ("c", None)]))
        await project(view, store, records(other, f"helix.memory.{other}", [("z", "z1")]))
        assert await store.sessions(view, ns) == ["a:1", "b", "c"]  # a cleared session is still held
        assert await store.sessions(SlidingWindow(3), ns) == []  # another view holds none of them
        assert await store.sessions(view, other) == ["z"]

    async def test_drop_removes_the_views_namespaces_and_checkpoints_only(self, store: ViewStore) -> None:
        ns, kept = unique("ns"), unique("ns")
        topic, kept_topic = f"helix.memory.{ns}", f"helix.memory.{kept}"
        view, other_view = SlidingWindow(2), Conversation()
        await project(view, store, records(ns, topic, [("a", "a1"), ("b", "b1")]))
        await project(view, store, records(kept, kept_topic, [("a", "k1")]))
        await project(other_view, store, records(ns, topic, [("a", "o1")]))
        await store.drop(view, [ns], [topic])
        assert await store.read(view, SessionKey(ns, "a")) == EMPTY
        assert await store.sessions(view, ns) == []
        assert await store.checkpoint(view, topic, 0) is None
        assert texts(await store.read(view, SessionKey(kept, "a"))) == ["k1"]
        assert await store.checkpoint(view, kept_topic, 0) == 0
        assert texts(await store.read(other_view, SessionKey(ns, "a"))) == ["o1"]
        assert await store.checkpoint(other_view, topic, 0) == 0

    async def test_forget_checkpoints_leaves_the_data(self, store: ViewStore) -> None:
        ns = unique("ns")
        topic = f"helix.memory.{ns}"
        view = SlidingWindow(2)
        await project(view, store, records(ns, topic, [("a", "a1")]))
        await store.forget_checkpoints(view, [(topic, 0)])
        assert await store.checkpoint(view, topic, 0) is None
        assert texts(await store.read(view, SessionKey(ns, "a"))) == ["a1"]

    async def test_redelivered_records_change_nothing(self, store: ViewStore) -> None:
        ns = unique("ns")
        topic = f"helix.memory.{ns}"
        view = Conversation()
        batch = records(ns, topic, [("s", f"m{i}") for i in range(5)])
        await project(view, store, batch[:3])
        assert await project(view, store, batch) == 2  # overlapping re-delivery: only the new two
        assert await project(view, store, batch) == 0
        assert texts(await store.read(view, SessionKey(ns, "s"))) == ["m0", "m1", "m2", "m3", "m4"]

    async def test_a_moved_guard_refuses_the_whole_batch(self, store: ViewStore) -> None:
        ns = unique("ns")
        view = Conversation()
        a, b = SessionKey(ns, "a"), SessionKey(ns, "b")
        one = (Message("user", "one"),)
        await store.apply(view, "t", 0, [Change(a, EMPTY, one, 0)], 0)
        stale = [Change(b, EMPTY, one, 1), Change(a, EMPTY, (*one, Message("user", "two")), 2)]
        with pytest.raises(StaleWrite):
            await store.apply(view, "t", 0, stale, 2)
        assert await store.read(view, b) == EMPTY  # nothing of the refused batch landed
        assert texts(await store.read(view, a)) == ["one"]
        assert await store.checkpoint(view, "t", 0) == 0

    async def test_writers_that_cache_snapshots_take_turns_without_losing_a_message(self, store: ViewStore) -> None:
        # A projector keeps its sessions' snapshots between batches; another process (after a
        # rebalance, or a replay) moving a session makes the cached snapshot stale: the guard's
        # compare-and-set refuses the write, the session is loaded again, nothing is lost.
        ns = unique("ns")
        topic = f"helix.memory.{ns}"
        view = SlidingWindow(4)
        one, two = SessionProjection(view, store, cache={}), SessionProjection(view, store, cache={})
        batch = records(ns, topic, [("a" if i % 3 else "b", f"m{i}") for i in range(24)])
        for i in range(0, 24, 3):
            writer = one if i % 2 == 0 else two
            await writer.apply(batch[i : i + 3])
        clean = MemoryStore()
        await project(view, clean, batch)
        for sid in ("a", "b"):
            key = SessionKey(ns, sid)
            assert await store.read(view, key) == await clean.read(view, key)
        assert await store.checkpoint(view, topic, 0) == 23

    async def test_a_cached_writer_folds_again_what_the_store_lost(self, store: ViewStore) -> None:
        # After a loss (FLUSHALL, a dropped target) the records come again from the log: the
        # writer's snapshots say they were applied, the store no longer has them.
        ns = unique("ns")
        topic = f"helix.memory.{ns}"
        view = SlidingWindow(3)
        writer = SessionProjection(view, store, cache={})
        batch = records(ns, topic, [("a", f"m{i}") for i in range(6)])
        await writer.apply(batch)
        await store.drop(view, [ns], [topic])
        await writer.apply(batch)
        assert texts(await store.read(view, SessionKey(ns, "a"))) == ["m3", "m4", "m5"]

    async def test_large_states_and_rewrites_round_trip(self, store: ViewStore) -> None:
        ns = unique("ns")
        view = Conversation()
        key = SessionKey(ns, "big")
        big = tuple(Message("user", f"m{i}", metadata={"i": str(i)}) for i in range(3000))
        await store.apply(view, "t", 0, [Change(key, EMPTY, big, 0)], 0)
        loaded = await store.read(view, key)
        assert loaded.state == big
        rewritten = (Message("system", "fresh"), *big[::-2])  # no cheap edit: a full rewrite
        await store.apply(view, "t", 0, [Change(key, loaded, rewritten, 1)], 1)
        assert (await store.read(view, key)).state == rewritten

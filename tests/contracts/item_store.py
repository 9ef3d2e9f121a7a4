"""`ItemStore`: LangGraph store items folded per namespace path, read as the in-process store reads
them (order, filters, TTL, similarity), a replay is a no-op, drop is scoped to its namespaces."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from helix_es.model.events import Event, ItemDeleted, ItemPut, MemoryCleared, MessageAdded, Position, Record
from helix_es.model.message import Message
from helix_es.providers.embed import EmbedSpec
from helix_es.stores.memory.items import MemoryItems
from helix_es.stores.ports import ItemStore
from helix_es.views.items import ItemIndex, Items, session_of
from tests.conftest import unique

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SOON, LATER = T0 + timedelta(seconds=30), T0 + timedelta(minutes=5)  # before and after C's item expires
INDEX = ItemIndex(EmbedSpec("hash", dims=16), ("text",))
OpenItems = Callable[[], ItemStore]


def put(path: tuple[str, ...], key: str, text: str, ttl: float | None = None) -> ItemPut:
    return ItemPut(path, key, json.dumps({"text": text, "n": len(text) % 3}), ttl_minutes=ttl)


class Of:
    """A payload of another session (a clear or a message), for `batch`."""

    def __init__(self, path: tuple[str, ...], payload: Any) -> None:
        self.session, self.payload = session_of(path), payload


def batch(ns: str, topic: str, payloads: list[Any], first: int = 0) -> list[Record]:
    """One record a second from T0 + `first` seconds, at offsets from `first`."""
    out = []
    for i, p in enumerate(payloads):
        sid = session_of(p.namespace) if isinstance(p, ItemPut | ItemDeleted) else p.session
        event = Event(ns, sid, p.payload if hasattr(p, "payload") else p, timestamp=T0 + timedelta(seconds=first + i))
        out.append(Record(event, Position(topic, 0, first + i)))
    return out


A, B, C = ("users", "u1"), ("users", "u1", "notes"), ("docs", "a b", "ü/%{}")
PAYLOADS: list[Any] = [
    put(A, "k1", "ocean river"),
    put(A, "k2", "coffee tea"),
    put(B, "k1", "forest mountain"),
    put(C, "k1", "bread cheese", ttl=1),
    Of(A, MessageAdded(Message("user", "not an item"))),
    put(A, "k1", "ocean plane"),  # replaces k1, keeps its created_at
    ItemDeleted(A, "k2"),
    put(B, "k2", "train"),
    Of(B, MemoryCleared()),  # B's items all go
    put(B, "k3", "gamma delta"),
]
ITEM_OPS = 9  # every payload but the message


def shown(items: list[Any]) -> list[Any]:
    """Items as compared: values parsed (PostgreSQL keeps them as `jsonb`, its own key order)."""
    return [(i.namespace, i.key, json.loads(i.value), i.created_at, i.updated_at, i.expires_at, i.score) for i in items]


async def reads(store: ItemStore, ns: str, now: datetime) -> list[Any]:
    """Every kind of read the port offers, over the paths of `PAYLOADS`."""
    return [
        shown(await store.find_items(ns, (), None, 100, 0, now)),
        shown(await store.find_items(ns, ("users",), {"n": 0}, 100, 0, now)),
        shown(await store.find_items(ns, (), None, 3, 1, now, query="ocean tea")),
        shown([i for i in [await store.get_item(ns, p, k, now) for p in (A, B, C) for k in ("k1", "k2", "k3")] if i]),
        await store.item_namespaces(ns, [], None, 100, 0, now),
        await store.item_namespaces(ns, [("prefix", ("users",))], 1, 100, 0, now),
        await store.item_namespaces(ns, [("suffix", ("notes",))], None, 100, 0, now),
    ]


async def reference(records: list[Record]) -> ItemStore:
    made = MemoryItems(Items(index=INDEX))
    await made.apply(records)
    return made


class ItemStoreContract:
    """Subclasses override `opened`: a factory of adapters over one place, each opened with the
    view `Items(store=<its kind>, index=INDEX)`, closed after the test."""

    @pytest.fixture
    async def opened(self) -> AsyncIterator[OpenItems]:
        raise NotImplementedError("an ItemStoreContract subclass provides the `opened` fixture")
        yield  # pragma: no cover

    async def test_items_fold_as_in_process_and_expire(self, opened: OpenItems) -> None:
        ns, topic = unique("items"), unique("t")
        records = batch(ns, topic, PAYLOADS)
        store = opened()
        applied = 0
        for i in range(0, len(records), 3):
            applied += (await store.apply(records[i : i + 3])).events
        assert applied == ITEM_OPS
        assert await store.checkpoint(topic, 0) == len(records) - 1
        live = {
            (i.namespace, i.key, json.loads(i.value)["text"]) for i in await store.find_items(ns, (), None, 9, 0, SOON)
        }
        assert live == {(A, "k1", "ocean plane"), (B, "k3", "gamma delta"), (C, "k1", "bread cheese")}
        item = await store.get_item(ns, A, "k1", SOON)
        assert item is not None and (item.created_at, item.updated_at) == (T0, T0 + timedelta(seconds=5))
        assert await store.get_item(ns, A, "k2", SOON) is None  # deleted
        assert await store.get_item(ns, B, "k1", SOON) is None  # its path was cleared
        assert await store.get_item(ns, C, "k1", SOON) is not None
        assert await store.get_item(ns, C, "k1", LATER) is None  # its TTL ran out
        assert await store.item_namespaces(ns, [], None, 100, 0, LATER) == sorted([A, B])
        ranked = await store.find_items(ns, (), None, 3, 0, SOON, query="ocean")
        assert ranked[0].key == "k1" and ranked[0].namespace == A and ranked[0].score is not None
        ref = await reference(records)
        for now in (SOON, LATER):
            assert await reads(store, ns, now) == await reads(ref, ns, now)

    async def test_a_replay_changes_nothing(self, opened: OpenItems) -> None:
        ns, topic = unique("items"), unique("t")
        records = batch(ns, topic, PAYLOADS)
        store = opened()
        assert (await store.apply(records)).events == ITEM_OPS
        before = await reads(store, ns, SOON)
        assert (await store.apply(records)).events == 0  # the checkpoint covers it
        assert (await store.apply(records[3:7])).events == 0
        again = opened()  # another projector of the same view, on the same place
        assert (await again.apply(records)).events == 0
        assert await reads(again, ns, SOON) == before
        assert await store.checkpoint(topic, 0) == len(records) - 1

    async def test_a_batch_of_no_item_ops_only_moves_the_checkpoint(self, opened: OpenItems) -> None:
        ns, topic = unique("items"), unique("t")
        store = opened()
        await store.apply(batch(ns, topic, PAYLOADS[:2]))
        before = await reads(store, ns, SOON)
        assert (await store.apply(batch(ns, topic, [Of(A, MessageAdded(Message("user", "hi")))], first=20))).events == 0
        assert await store.checkpoint(topic, 0) == 20
        assert await reads(store, ns, SOON) == before

    async def test_behind_names_the_first_position_not_applied(self, opened: OpenItems) -> None:
        ns, topic, other = unique("items"), unique("t"), unique("t")
        store = opened()
        assert await store.behind([Position(topic, 0, 0)]) == Position(topic, 0, 0)
        await store.apply(batch(ns, topic, PAYLOADS[:4]))
        assert await store.behind([Position(topic, 0, 3), Position(topic, 0, 0)]) is None
        assert await store.behind([Position(topic, 0, 2), Position(topic, 0, 4)]) == Position(topic, 0, 4)
        assert await store.behind([Position(other, 0, 0)]) == Position(other, 0, 0)

    async def test_drop_removes_a_namespace_and_the_topics_checkpoints(self, opened: OpenItems) -> None:
        store = opened()
        gone, kept = (unique("items"), unique("t")), (unique("items"), unique("t"))
        for ns, topic in (gone, kept):
            await store.apply(batch(ns, topic, PAYLOADS))
        await store.drop([gone[0]], [gone[1]])
        assert await store.find_items(gone[0], (), None, 100, 0, SOON) == []
        assert await store.item_namespaces(gone[0], [], None, 100, 0, SOON) == []
        assert await store.checkpoint(gone[1], 0) is None
        assert await store.checkpoint(kept[1], 0) == len(PAYLOADS) - 1
        assert len(await store.find_items(kept[0], (), None, 100, 0, SOON)) == 3
        # Dropped, the namespace folds afresh from the log.
        assert (await store.apply(batch(gone[0], gone[1], PAYLOADS))).events == ITEM_OPS
        assert len(await store.find_items(gone[0], (), None, 100, 0, SOON)) == 3

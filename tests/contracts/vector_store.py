"""`VectorStore`: entries, watermarks, cached embeddings and checkpoints, in one atomic write; top-K by cosine.

The first tests speak to the port alone; the rest fold batches through a `VectorProjection` over the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from helix_es import Message
from helix_es.model import names
from helix_es.model.events import EmbeddingRecorded, Event, MemoryCleared, MessageAdded, Payload, Position, Record
from helix_es.projection.vector import VectorProjection, content_sha256
from helix_es.providers.embed import Embedder, HashEmbedder, embedder_from_func
from helix_es.stores.ports import SessionKey
from helix_es.stores.ports.vector import BatchState, Entry, VectorStore, Write
from tests.conftest import unique

T0 = datetime(2030, 1, 1, tzinfo=UTC)

TRAVEL = [
    "The flight to Oslo leaves at nine from gate 4",
    "Book a hotel near the harbour in Bergen",
    "My cat is called Miso and likes salmon",
    "Remember that I prefer green tea to coffee",
    "The meeting with the finance team moved to Thursday",
]

NewStore = Callable[[], VectorStore]


def contents(messages: Sequence[Message] | None) -> list[str]:
    assert messages is not None
    return [m.content for m in messages]


def record(ns: str, partition: int, offset: int, seconds: float, payload: Payload, session: str = "s") -> Record:
    event = Event(ns, session, payload, timestamp=T0 + timedelta(seconds=seconds))
    return Record(event, Position(names.topic(ns), partition, offset))


def said(text: str) -> MessageAdded:
    return MessageAdded(Message("user", text))


async def search(
    p: VectorProjection, ns: str, query: str, limit: int = 10, want: Position | None = None
) -> list[Message] | None:
    return await p.search(SessionKey(ns, "s"), query, limit, want)


def model_counter(dims: int = 64, *, paid: bool = True) -> tuple[Embedder, list[list[str]]]:
    """A model (free or paid) that counts its calls: its vectors are the hash embedder's."""
    calls: list[list[str]] = []
    hashed = HashEmbedder(dims)

    async def embed(texts: Sequence[str]) -> np.ndarray:
        calls.append(list(texts))
        return hashed.embed_sync(texts)

    return embedder_from_func(embed, unique("paid" if paid else "free"), dims, paid=paid), calls


def recorded(derived: Sequence[Event]) -> dict[str, EmbeddingRecorded]:
    return {e.payload.content_sha256: e.payload for e in derived if isinstance(e.payload, EmbeddingRecorded)}


def unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def entry(ns: str, offset: int, seconds: float, text: str, session: str = "s", partition: int = 0) -> Entry:
    return Entry(
        ns,
        session,
        Position(names.topic(ns), partition, offset),
        T0 + timedelta(seconds=seconds),
        content_sha256(text),
        Message("user", text),
    )


def write(
    ns: str,
    entries: Sequence[Entry],
    vectors: Sequence[np.ndarray],
    checkpoint: int,
    *,
    cleared: dict[str, datetime] | None = None,
    embeddings: dict[str, np.ndarray] | None = None,
    erased: dict[tuple[str, str], Position] | None = None,
    partition: int = 0,
) -> Write:
    rows = np.stack(vectors) if len(vectors) else np.zeros((0, 4), dtype=np.float32)
    return Write(names.topic(ns), partition, checkpoint, entries, rows, cleared or {}, embeddings or {}, erased or {})


class VectorStoreContract:
    """Subclasses override `new_store` (a factory of fresh adapters over one place) and the hooks."""

    caches_embeddings = False  # `known` answers from the store (PostgreSQL's helix_embeddings)

    @pytest.fixture
    def new_store(self) -> Iterator[NewStore]:
        raise NotImplementedError("a VectorStoreContract subclass provides the `new_store` fixture")
        yield  # pragma: no cover

    @pytest.fixture
    def store(self, new_store: NewStore) -> VectorStore:
        return new_store()

    async def forget_embeddings(self, model: str) -> None:
        """Drop what the store caches of `model`, so only the log may bring its vectors back."""
        raise NotImplementedError

    async def lose_checkpoints(self, view: str) -> bool:
        """Lose `view`'s checkpoints but keep its entries, as another process would find them; False
        where the store cannot (its checkpoints live and die with its entries)."""
        raise NotImplementedError

    # --- the port alone ---

    async def test_an_empty_store(self, store: VectorStore) -> None:
        view, ns = unique("vector-test"), unique("vec")
        topic = names.topic(ns)
        assert await store.load(view, topic, 0, [ns]) == BatchState(None, {})
        assert await store.checkpoint(view, topic, 0) is None
        assert await store.count(view, ns) == 0
        assert await store.known(unique("m"), ["ab" * 32]) == {}
        assert await store.search(view, ns, unit(1, 0, 0, 0), 5, None) == []
        assert await store.search(view, ns, unit(1, 0, 0, 0), 5, Position(topic, 0, 0)) is None

    async def test_a_write_is_searched_best_first_and_kept_once(self, store: VectorStore) -> None:
        view, model, ns = unique("vector-test"), unique("m"), unique("vec")
        topic = names.topic(ns)
        entries = [entry(ns, 0, 0, "north"), entry(ns, 1, 1, "east"), entry(ns, 2, 2, "north-east")]
        vectors = [unit(1, 0, 0, 0), unit(0, 1, 0, 0), unit(1, 1, 0, 0)]
        await store.write(view, model, write(ns, entries, vectors, 2))
        assert await store.count(view, ns) == 3
        assert await store.checkpoint(view, topic, 0) == 2
        assert contents(await store.search(view, ns, unit(1, 0.1, 0, 0), 3, None)) == ["north", "north-east", "east"]
        assert contents(await store.search(view, ns, unit(0, 1, 0, 0), 1, Position(topic, 0, 2))) == ["east"]
        assert await store.search(view, ns, unit(0, 1, 0, 0), 1, Position(topic, 0, 3)) is None
        assert await store.search(view, ns, unit(0, 1, 0, 0), 1, Position(topic, 1, 0)) is None  # another partition
        # Entries present already are skipped; the checkpoint keeps the greater of the two.
        await store.write(view, model, write(ns, entries[:2], vectors[:2], 1))
        assert await store.count(view, ns) == 3
        assert await store.checkpoint(view, topic, 0) == 2
        # Another view and another namespace see none of it.
        assert await store.count(unique("vector-test"), ns) == 0
        assert await store.search(view, unique("vec"), unit(1, 0, 0, 0), 3, None) == []

    async def test_a_watermark_drops_and_skips_entries_at_or_before_it(self, store: VectorStore) -> None:
        view, model, ns, other = unique("vector-test"), unique("m"), unique("vec"), unique("vec")
        v = unit(1, 0, 0, 0)
        await store.write(view, model, write(ns, [entry(ns, i, i, f"m{i}") for i in range(4)], [v] * 4, 3))
        await store.write(view, model, write(other, [entry(other, 0, 0, "other")], [v], 0))
        mark = T0 + timedelta(seconds=2)
        await store.write(view, model, write(ns, [], [], 4, cleared={ns: mark}, partition=1))
        assert await store.load(view, names.topic(ns), 0, [ns, other]) == BatchState(3, {ns: mark})
        assert contents(await store.search(view, ns, v, 10, None)) == ["m3"]
        # Written later, from a lagging partition: at or before the watermark, never inserted.
        late = [
            entry(ns, 0, 1, "late", partition=2),
            entry(ns, 1, 2, "at the mark", partition=2),
            entry(ns, 2, 5, "after", partition=2),
        ]
        await store.write(view, model, write(ns, late, [v] * 3, 2, partition=2))
        assert sorted(contents(await store.search(view, ns, v, 10, None))) == ["after", "m3"]
        assert await store.count(view, ns) == 2
        # An older watermark does not move it back.
        await store.write(view, model, write(ns, [], [], 3, cleared={ns: T0}, partition=2))
        assert (await store.load(view, names.topic(ns), 2, [ns])).cleared == {ns: mark}
        assert contents(await store.search(view, other, v, 10, None)) == ["other"]

    async def test_an_erasure_removes_the_sessions_entries_up_to_it(self, store: VectorStore) -> None:
        view, model, ns = unique("vector-test"), unique("m"), unique("vec")
        v = unit(0, 0, 1, 0)
        entries = [
            entry(ns, 0, 0, "alice 0", "alice"),
            entry(ns, 1, 1, "bob 1", "bob"),
            entry(ns, 2, 2, "alice 2", "alice"),
            entry(ns, 0, 3, "alice on p1", "alice", partition=1),
        ]
        await store.write(view, model, write(ns, entries[:3], [v] * 3, 2))
        await store.write(view, model, write(ns, entries[3:], [v], 0, partition=1))
        # Erased at offset 1 of partition 0: the session's entries up to it, and on other partitions, go.
        at = Position(names.topic(ns), 0, 1)
        await store.write(view, model, write(ns, [], [], 3, erased={(ns, "alice"): at}))
        assert sorted(contents(await store.search(view, ns, v, 10, None))) == ["alice 2", "bob 1"]
        assert await store.count(view, ns) == 2

    async def test_known_answers_with_the_embeddings_it_was_given(self, store: VectorStore) -> None:
        view, model, ns = unique("vector-test"), unique("m"), unique("vec")
        sha, other = content_sha256("cached"), content_sha256("never given")
        vector = unit(1, 2, 3, 4)
        await store.write(view, model, write(ns, [], [], 0, embeddings={sha: vector}))
        found = await store.known(model, [sha, other])
        if self.caches_embeddings:
            assert list(found) == [sha]
            assert np.array_equal(found[sha], vector)
        else:
            assert found == {}
        assert await store.known(unique("m"), [sha]) == {}  # another model's cache is its own
        assert await store.checkpoint(view, names.topic(ns), 0) == 0

    # --- folded through a VectorProjection ---

    async def test_a_clear_is_decided_by_event_time_whatever_the_partition_order(self, new_store: NewStore) -> None:
        for order in ("clear-first", "clear-last"):
            ns = unique("vec")
            clear = [record(ns, 0, 0, 10, MemoryCleared())]
            messages = [
                record(ns, 1, 0, 5, said("written before the clear")),
                record(ns, 1, 1, 15, said("written after the clear")),
            ]
            p = VectorProjection(unique("vector-test"), HashEmbedder(64), new_store(), top_k=10)
            try:
                for batch in [clear, messages] if order == "clear-first" else [messages, clear]:
                    await p.apply(batch)
                assert contents(await search(p, ns, "written clear")) == ["written after the clear"], order
                assert await p.store.count(p.name, ns) == 1
            finally:
                await p.close()

    async def test_redelivery_adds_nothing(self, new_store: NewStore) -> None:
        ns = unique("vec")
        batch = [record(ns, 0, i, i, said(text)) for i, text in enumerate(TRAVEL)]
        store = new_store()
        name = unique("vector-test")
        p = VectorProjection(name, HashEmbedder(64), store)
        try:
            assert (await p.apply(batch)).events == len(TRAVEL)
            assert (await p.apply(batch)).events == 0
            assert (await p.apply(batch[2:])).events == 0
            assert await store.count(name, ns) == len(TRAVEL)
            if await self.lose_checkpoints(name):
                # Another process, and the checkpoint lost: every event comes again and is folded again.
                again = VectorProjection(name, HashEmbedder(64), new_store())
                assert (await again.apply(batch)).events == len(TRAVEL)
                await again.close()
            assert await store.count(name, ns) == len(TRAVEL)
            assert contents(await search(p, ns, "green tea", 1)) == [TRAVEL[3]]
            assert await p.checkpoint(names.topic(ns), 0) == len(TRAVEL) - 1
        finally:
            await p.close()

    async def test_reads_wait_for_the_callers_write(self, new_store: NewStore) -> None:
        ns = unique("vec")
        p = VectorProjection(unique("vector-test"), HashEmbedder(64), new_store())
        try:
            topic = names.topic(ns)
            await p.apply([record(ns, 0, 0, 0, said("first"))])
            ahead = Position(topic, 0, 1)
            key = SessionKey(ns, "s")
            assert await p.get(key, ahead) is None
            assert await p.search(key, "first", 5, ahead) is None
            assert await p.applied(key, ahead) == 0
            assert await p.search(key, "first", 5, Position(topic, 1, 0)) is None  # another partition: nothing yet
            await p.apply([record(ns, 0, 1, 1, said("second"))])
            assert await p.get(key, ahead) == []
            assert contents(await p.search(key, "second", 1, ahead)) == ["second"]
        finally:
            await p.close()

    @pytest.mark.parametrize("paid", [True, False], ids=["paid", "free"])
    async def test_replay_holds_messages_until_their_recorded_embedding_arrives(
        self, new_store: NewStore, paid: bool
    ) -> None:
        embedder, calls = model_counter(paid=paid)  # every model is recorded, free ones too
        ns = unique("vec")
        p = VectorProjection(unique("vector-test"), embedder, new_store())
        try:
            # Live: the model is called once per new text and its vectors come back as derived events.
            first = await p.apply(
                [
                    record(ns, 0, 0, 0, said("alpha")),
                    record(ns, 0, 1, 1, said("beta")),
                    record(ns, 0, 2, 2, said("alpha")),
                ]
            )
            assert calls == [["alpha", "beta"]]
            made = recorded(first.derived)
            assert len(made) == 2 and {r.model for r in made.values()} == {embedder.model}
            assert {e.namespace for e in first.derived} == {ns}

            # A rebuild replays history: no calls, messages wait for their EmbeddingRecorded.
            await self.forget_embeddings(embedder.model)  # else the store's cache would answer: only the log may
            ns2 = unique("vec")
            q = VectorProjection(unique("vector-test"), embedder, new_store())
            try:
                rec = [r for r in first.derived if isinstance(r.payload, EmbeddingRecorded)]
                await q.apply([record(ns2, 0, 0, 0, said("alpha")), record(ns2, 0, 1, 1, said("beta"))], live=False)
                assert (q.pending, await q.checkpoint(names.topic(ns2), 0)) == (2, -1)
                assert await search(q, ns2, "alpha", want=Position(names.topic(ns2), 0, 0)) is None  # not there yet
                await q.apply([record(ns2, 0, 2, 2, rec[0].payload)], live=False)
                assert (q.pending, await q.checkpoint(names.topic(ns2), 0)) == (1, 0)  # stays below "beta"
                assert contents(await search(q, ns2, "alpha", 1)) == ["alpha"]
                # The last, live batch pays for what history never recorded, and records it.
                last = await q.apply([record(ns2, 0, 3, 3, said("gamma"))], live=True)
                assert calls[1:] == [["alpha"], ["beta", "gamma"]]  # the query, then the two texts
                assert q.embedded == 2
                assert q.pending == 0 and await q.checkpoint(names.topic(ns2), 0) == 3
                assert sorted(recorded(last.derived)) == sorted(content_sha256(t) for t in ("beta", "gamma"))
                assert sorted(contents(await search(q, ns2, "alpha beta gamma"))) == ["alpha", "beta", "gamma"]
            finally:
                await q.close()
        finally:
            await p.close()

    async def test_a_clear_drops_pending_messages_without_paying_for_them(self, new_store: NewStore) -> None:
        embedder, calls = model_counter()
        ns = unique("vec")
        p = VectorProjection(unique("vector-test"), embedder, new_store())
        try:
            await p.apply([record(ns, 0, 0, 0, said("old news"))], live=False)
            assert p.pending == 1
            await p.apply([record(ns, 0, 1, 5, MemoryCleared()), record(ns, 0, 2, 6, said("fresh"))], live=True)
            assert calls == [["fresh"]] and p.pending == 0
        finally:
            await p.close()

    async def test_the_hash_embedder_records_nothing_and_never_waits(self, new_store: NewStore) -> None:
        ns = unique("vec")
        p = VectorProjection(unique("vector-test"), HashEmbedder(64), new_store())
        try:
            # Replaying: hashing again is cheaper than a recorded vector, so nothing waits for one.
            replayed = await p.apply(
                [record(ns, 0, 0, 0, said("alpha")), record(ns, 0, 1, 1, said("beta"))], live=False
            )
            assert (replayed.derived, p.pending, p.embedded) == ((), 0, 2)
            assert await p.checkpoint(names.topic(ns), 0) == 1
            assert (await p.apply([record(ns, 0, 2, 2, said("gamma"))])).derived == ()
            assert sorted(contents(await search(p, ns, "alpha beta gamma"))) == ["alpha", "beta", "gamma"]
        finally:
            await p.close()

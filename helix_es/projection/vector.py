"""The vector projection: messages embedded into a per-namespace index that answers top-K cosine.

One `apply` folds one topic-partition batch:

- `MessageAdded` with text is embedded (empty content, e.g. a bare tool call, is skipped).
- `MemoryCleared` moves the namespace's `cleared_at` watermark to its event time; the store
  drops entries at or before it and never inserts one at or before it later. Clears therefore
  give the same view whatever order partitions are applied in.
- `EmbeddingRecorded` of this view's model fills the content-hash cache.
- `SessionErased` (`helix-es forget`) removes that session's entries written before it (all of
  them but those after it on its own partition, where a session's events live) in the same
  atomic write, and drops its pending messages; other sessions' entries stay.
- `MessageRetracted` takes back its session's newest message on its partition: the store keeps
  each session's `Tail` (its newest `TAIL` message offsets there, text or not, written with the
  entries), so a retraction knows which message it takes back, and drops its entry if it has one
  (a bare tool call has none). Past `TAIL` retractions in a row, the older entries stay.
- **Forgetting.** A `MemoryForgotten` naming the view (`self.name`; a rebuild target folds its
  base's) drops, with `session`, its session's entries written before it, as an erasure does (its
  tail restarts too); else the entries of the messages at its `offsets` before it on its own
  partition (its session's), as retractions drop them; its tail keeps those. A long-term view's
  recall index is a vector view of its own name (`vector-<model>`): a forgetting names it too.

Vectors come, in order, from the batch's recorded embeddings, an in-process cache by content
hash, the store's own cache (Postgres `helix_embeddings`), and only then the model. Every
model's vectors, free or paid, local or remote, are recorded once: a model is never called
while replaying history (`live=False`): the message waits as pending until its
`EmbeddingRecorded` arrives further on; a live batch embeds what its partition still has
pending and returns the new vectors as derived `EmbeddingRecorded` events for the log. So
reopening or rebuilding a view makes no model call for text that model embedded before.
The partition checkpoint stays just below its oldest pending message, so a restart re-reads
it and a read-your-writes reader waits for it; every write is idempotent, so re-reading is safe.

The `hash` embedder alone records nothing and embeds as it replays: it is a pure function of
the text, cheaper to run again than a 1.5 KB vector is to decode from the log or to cache.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import TypeVar

import numpy as np

from helix_es.model.events import (
    EmbeddingRecorded,
    Event,
    MemoryCleared,
    MemoryForgotten,
    MessageAdded,
    MessageRetracted,
    Position,
    Record,
    SessionErased,
)
from helix_es.model.message import Message
from helix_es.model.recall import Recall, RecallHit, SearchMode
from helix_es.projection.recall import RANKERS, choose, depth, hits
from helix_es.providers.embed import Embedder, EmbeddingError, HashEmbedder
from helix_es.stores.ports import Applied, SessionKey
from helix_es.stores.ports.vector import TAIL, Entry, RankAsk, SessionId, Tail, VectorStore, Write, erases
from helix_es.views.vector import keyword_text

log = logging.getLogger(__name__)


def content_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


K = TypeVar("K")
V = TypeVar("V")


def _lru_get(cache: OrderedDict[K, V], key: K) -> V | None:
    value = cache.get(key)
    if value is not None:
        cache.move_to_end(key)
    return value


def _lru_put(cache: OrderedDict[K, V], key: K, value: V, cap: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > cap:
        cache.popitem(last=False)


def follow(tail: Tail, record: Record, forgets: bool = False) -> tuple[Tail, int | None, bool]:
    """One event of the session on the tail's partition: the tail after it, the offset a retraction
    took back, and for an add whether it is still the session's (one seen before and since
    retracted is not, when history is read again). `forgets`: the event forgets the session here."""
    payload, offset = record.event.payload, record.position.offset
    if offset <= tail.upto:  # read again (a restart below pending embeddings): the tail knows it
        full = len(tail.offsets) == TAIL and offset < tail.offsets[0]
        return tail, None, offset in tail.offsets or full
    if isinstance(payload, MessageAdded):
        return Tail(offset, (*tail.offsets[-(TAIL - 1) :], offset)), None, True
    if isinstance(payload, MessageRetracted):
        taken = tail.offsets[-1] if tail.offsets else None
        return Tail(offset, tail.offsets[:-1]), taken, False
    if forgets or isinstance(payload, MemoryCleared | SessionErased):
        return Tail(offset), None, False  # nothing of the session is left to take back
    return tail, None, False


class VectorProjection:
    """The `Projection` of a `Vector` view over one `VectorStore`, which it owns and closes."""

    def __init__(
        self, name: str, embedder: Embedder, store: VectorStore, *, top_k: int = 5, search: SearchMode | None = None
    ) -> None:
        self.name = name
        self.kind = store.kind
        self.embedder = embedder
        self.store = store
        self.top_k = top_k
        self.search_mode = search
        # A keyword index costs every write: kept only when the view's mode ranks by keywords.
        self.offers: tuple[str, ...] = ("vector", "substring")
        if search in ("hybrid", "keyword"):
            self.offers = ("hybrid", "vector", "keyword", "substring")
        self.embedded = 0  # texts this process sent to the model for entries (not queries)
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()  # content sha -> vector
        self._cache_cap = max(1024, (64 << 20) // (4 * embedder.dims))  # about 64 MiB of vectors
        # sha -> the partitions this process saw (or made) its EmbeddingRecorded on: see `_records`
        self._recorded_at: OrderedDict[str, set[tuple[str, int]]] = OrderedDict()
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()  # a read-your-writes wait re-asks
        self._pending: dict[Position, Entry] = {}
        self._high: dict[tuple[str, int], int] = {}  # last offset applied per partition, in this process
        # Hashing is cheaper than decoding a recorded vector; a model (even a free local one) is not.
        self._record = not isinstance(embedder, HashEmbedder)
        self._lock = asyncio.Lock()  # pending and caches are shared by every partition's batches

    @property
    def pending(self) -> int:
        """Messages waiting for a recorded embedding (a model's, while replaying)."""
        return len(self._pending)

    def _recorded(self, payload: EmbeddingRecorded) -> np.ndarray | None:
        vector = np.frombuffer(payload.vector, dtype="<f4").astype(np.float32)
        if vector.shape != (self.embedder.dims,) or not np.isfinite(vector).all():
            log.warning(
                "%s: ignoring a recorded %s embedding of %d values (want %d)",
                self.name,
                payload.model,
                vector.size,
                self.embedder.dims,
            )
            return None
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm > 0 else vector

    def _entry(self, record: Record, message: Message) -> Entry:
        event = record.event
        return Entry(
            event.namespace,
            event.session_id,
            record.position,
            event.timestamp,
            content_sha256(message.content),
            message,
            message.occurred_at,
        )

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        if not records:
            return Applied(0)
        topic, partition = records[0].position.topic, records[0].position.partition
        here = (topic, partition)
        async with self._lock:
            namespaces = sorted({r.event.namespace for r in records})
            sessions = sorted({(r.event.namespace, r.event.session_id) for r in records})
            state = await self.store.load(self.name, topic, partition, namespaces, sessions)
            floor = max(-1 if state.checkpoint is None else state.checkpoint, self._high.get(here, -1))
            fresh = [r for r in records if r.position.offset > floor]
            if not fresh:
                return Applied(0)

            adds: list[Entry] = []
            clears: dict[str, datetime] = {}
            erased: dict[tuple[str, str], Position] = {}
            learned: dict[str, np.ndarray] = {}
            tails: dict[SessionId, Tail] = {}  # the sessions' tails this batch moved
            taken: dict[Position, str] = {}  # entries retractions took back -> their namespace
            for r in fresh:
                if r.duplicate_of is not None:
                    continue  # a retried write: its first event was applied
                payload, ns = r.event.payload, r.event.namespace
                who = (ns, r.event.session_id)
                forget = payload if isinstance(payload, MemoryForgotten) and payload.names(self.name) else None
                whole = forget is not None and forget.session
                tail, gone, kept = follow(tails.get(who) or state.tails.get(who) or Tail(), r, whole)
                tails[who] = tail
                if gone is not None:
                    taken[Position(topic, partition, gone)] = ns
                if isinstance(payload, MessageAdded):
                    if kept and payload.message.content.strip():  # a bare tool call has nothing to embed
                        adds.append(self._entry(r, payload.message))
                elif isinstance(payload, MemoryCleared):
                    if ns not in clears or r.event.timestamp > clears[ns]:
                        clears[ns] = r.event.timestamp
                elif isinstance(payload, SessionErased) or whole:  # to the store both are the same cut
                    erased[who] = r.position  # offset order: the last one wins
                elif forget is not None:  # messages of its session, before it on this partition
                    here_before = (o for o in forget.offsets if o < r.position.offset)
                    taken.update((Position(topic, partition, o), ns) for o in here_before)
                elif isinstance(payload, EmbeddingRecorded) and payload.model == self.embedder.model:
                    vector = self._recorded(payload)
                    if vector is not None:
                        learned.setdefault(payload.content_sha256, vector)
            for sha, vector in learned.items():
                _lru_put(self._cache, sha, vector, self._cache_cap)
                self._saw_record(sha, here)  # on the log whether or not this batch's write succeeds

            watermarks = dict(state.cleared)
            moved = {ns: ts for ns, ts in clears.items() if ns not in watermarks or ts > watermarks[ns]}
            watermarks.update(moved)

            def visible(e: Entry) -> bool:
                if e.position in taken:
                    return False  # retracted
                mark = watermarks.get(e.namespace)
                at = erased.get((e.namespace, e.session_id))
                if at is not None and erases(at, e.position):
                    return False  # its session was forgotten after it
                return mark is None or e.timestamp > mark

            # Pending messages a clear has since covered will never be shown: forget them.
            candidates = {pos: e for pos, e in self._pending.items() if visible(e)}
            for e in adds:
                if visible(e):
                    candidates.setdefault(e.position, e)

            # Looked up here, not only through the bounded cache, which a big batch could overflow.
            found = dict(learned)
            unknown = {e.sha for e in candidates.values() if e.sha not in found and e.sha not in self._cache}
            if unknown and self._record:
                for sha, vector in (await self.store.known(self.embedder.model, unknown)).items():
                    found[sha] = vector
                    _lru_put(self._cache, sha, vector, self._cache_cap)

            vectors: dict[str, np.ndarray] = {}
            ready: list[Entry] = []
            ask: dict[str, Entry] = {}  # sha -> the first entry that needs it
            pending: dict[Position, Entry] = {}
            for pos, e in candidates.items():
                vector = found.get(e.sha)
                if vector is None:
                    vector = _lru_get(self._cache, e.sha)
                if vector is not None:
                    vectors[e.sha] = vector
                    ready.append(e)
                elif not self._record or (live and (pos.topic, pos.partition) == here):
                    ask.setdefault(e.sha, e)
                    ready.append(e)
                else:
                    pending[pos] = e  # its EmbeddingRecorded is further on in the log

            made: dict[str, np.ndarray] = {}
            if ask:
                shas = list(ask)
                matrix = await self.embedder.embed([ask[s].message.content for s in shas])
                if matrix.shape != (len(shas), self.embedder.dims):
                    raise EmbeddingError(f"{self.embedder.model}: answered shape {matrix.shape} for {len(shas)} texts")
                self.embedded += len(shas)
                for sha, row in zip(shas, matrix, strict=True):
                    vector = np.array(row, dtype=np.float32)
                    made[sha] = vectors[sha] = vector
                    _lru_put(self._cache, sha, vector, self._cache_cap)
            derived = self._records(here, ready, vectors, made) if self._record and live else []

            ready.sort(key=lambda e: (e.position.topic, e.position.partition, e.position.offset))
            matrix = (
                np.stack([vectors[e.sha] for e in ready]) if ready else np.zeros((0, self.embedder.dims), np.float32)
            )
            waiting = [pos.offset for pos in pending if (pos.topic, pos.partition) == here]
            checkpoint = min(waiting) - 1 if waiting else fresh[-1].position.offset
            keep = {**learned, **made} if self._record else {}
            retracted = [(ns, pos) for pos, ns in taken.items()]
            keywords = [keyword_text(e.message) for e in ready] if "keyword" in self.offers else None
            write = Write(topic, partition, checkpoint, ready, matrix, moved, keep, erased, tails, retracted, keywords)
            await self.store.write(self.name, self.embedder.model, write)
            # Only once the write is durable: a failed write leaves everything to be re-folded.
            freed = {(p.topic, p.partition) for p in self._pending} - {(p.topic, p.partition) for p in pending}
            self._pending = pending
            self._high[here] = fresh[-1].position.offset
            for event in derived:
                if isinstance(event.payload, EmbeddingRecorded):
                    self._saw_record(event.payload.content_sha256, here)
            for tp in freed - {here}:
                # Its messages waited on a record of this partition, and are written now: so is its checkpoint.
                if tp in self._high:
                    await self.advance(*tp, self._high[tp])
            return Applied(len(fresh), tuple(derived))

    def _saw_record(self, sha: str, here: tuple[str, int]) -> None:
        _lru_put(self._recorded_at, sha, (self._recorded_at.get(sha) or set()) | {here}, self._cache_cap)

    def _records(
        self, here: tuple[str, int], ready: Sequence[Entry], vectors: dict[str, np.ndarray], made: dict[str, np.ndarray]
    ) -> list[Event]:
        """The `EmbeddingRecorded` events a live batch derives: one per text the model just embedded,
        and one per text of this partition whose vector this process has only from a record on
        another partition (the same text said in another session). So each partition holds the
        records of its own texts, and replaying it never waits on, or calls the model for, a
        record another partition holds further on (a vector from the store's cache is recorded
        somewhere already, so it is not recorded again)."""
        out: list[Event] = []
        done: set[str] = set()
        for e in ready:
            if (e.position.topic, e.position.partition) != here or e.sha in done:
                continue
            elsewhere = self._recorded_at.get(e.sha)
            if e.sha in made or (elsewhere is not None and here not in elsewhere):
                done.add(e.sha)
                vector = vectors[e.sha].astype("<f4").tobytes()
                out.append(Event(e.namespace, e.session_id, EmbeddingRecorded(self.embedder.model, e.sha, vector)))
        return out

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        return await self.store.checkpoint(self.name, topic, partition)

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        if any((p.topic, p.partition) == (topic, partition) for p in self._pending):
            return  # the checkpoint waits below a pending embedding; a restart re-reads from there
        empty = np.zeros((0, self.embedder.dims), np.float32)
        await self.store.write(self.name, self.embedder.model, Write(topic, partition, offset, [], empty, {}, {}))

    async def get(self, key: SessionKey, want: Position | None) -> list[Message] | None:
        """Always [] (search-only, as in the seed), once the view holds the caller's write."""
        if want is None:
            return []
        done = await self.store.checkpoint(self.name, want.topic, want.partition)
        return None if done is None or done < want.offset else []

    async def _query(self, query: str) -> np.ndarray:
        vector = _lru_get(self._queries, query)
        if vector is None:
            vector = (await self.embedder.embed([query]))[0]
            _lru_put(self._queries, query, vector, 256)
        return vector

    async def search(self, key: SessionKey, query: str, limit: int, want: Position | None) -> list[Message] | None:
        if self.search_mode is not None:  # `search:` set: search is recall's messages
            if not query.strip():
                return await self.get(key, want)
            found = await self.recall(key, Recall(query, limit), want)
            return None if found is None else [hit.message for hit in found]
        k = min(limit, self.top_k)
        if not query.strip() or k < 1:
            return await self.get(key, want)  # nothing to embed: an API would refuse it
        return await self.store.search(self.name, key.namespace, await self._query(query), k, want)

    async def recall(self, key: SessionKey, recall: Recall, want: Position | None) -> list[RecallHit] | None:
        """The view's best hits for `recall` in its mode (`recall.mode`, else the view's `search:`)."""
        mode = choose(recall, self.search_mode, self.offers, self.name)
        rankers = RANKERS[mode]
        vector = await self._query(recall.query) if "vector" in rankers else None
        keywords = recall.query if "keyword" in rankers else None
        substring = recall.query if "substring" in rankers else None
        ask = RankAsk(recall, depth(recall), vector, keywords, substring, "keyword" in self.offers)
        ranking = await self.store.rank(self.name, key.namespace, ask, want)
        return None if ranking is None else hits(ranking, recall, mode)

    async def applied(self, key: SessionKey, want: Position) -> int | None:
        return await self.store.checkpoint(self.name, want.topic, want.partition)

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        await self.store.drop(self.name, namespaces, topics)

    async def close(self) -> None:
        await self.store.close()

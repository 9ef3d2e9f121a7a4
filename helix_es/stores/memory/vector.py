"""In-process vector store: one float32 matrix per namespace, brute-force cosine.

Like the seed's InMemoryVectorStore it holds at most `cap` entries (100_000 by default) in
total. At the cap it evicts the oldest entries first (FIFO by the order they were applied,
across namespaces), so the newest `cap` stay searchable; the first eviction logs a warning,
once per store. Evicted messages stay on the log; a Postgres store has no cap.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta
from itertools import islice

import numpy as np

from helix_es.model.events import Position, micros
from helix_es.model.message import Message
from helix_es.model.recall import Recall
from helix_es.stores.ports.vector import BatchState, Found, RankAsk, Ranking, SessionId, Tail, Write, erases
from helix_es.views.fusion import Ranked
from helix_es.views.keywords import KeywordIndex

log = logging.getLogger(__name__)

DEFAULT_CAP = 100_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class VectorIndex:
    """One namespace's rows: vectors, event times (µs), apply sequence numbers, messages, positions,
    sessions and when each was said (µs), and, for a view that ranks by keywords, their keyword index
    (by sequence number, which stays a row's id while rows move).

    Live rows are `[start, end)` of the arrays; dropping the oldest only moves `start`, and
    space is compacted when it is reused, so neither eviction nor appending copies per row.
    """

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self._vectors = np.zeros((0, dims), np.float32)
        self._times = np.zeros(0, np.int64)
        self._seqs = np.zeros(0, np.int64)
        self._said = np.zeros(0, np.int64)
        self._sessions = np.zeros(0, np.int32)  # codes of `_names`
        self._messages: list[Message | None] = []  # index-aligned with the arrays, up to `end`
        self._folded: list[str] = []  # their content, case folded once: what substring recall scans
        self._positions: list[Position | None] = []
        self._names: list[str] = []  # session ids by code
        self._codes: dict[str, int] = {}
        self.keywords: KeywordIndex | None = None
        self._start = 0
        self._end = 0

    def __len__(self) -> int:
        return self._end - self._start

    @property
    def seqs(self) -> np.ndarray:
        return self._seqs[self._start : self._end]

    def _compact(self, extra: int) -> None:
        live = len(self)
        # A first bulk load gets exactly its size; growth after that is by half, amortised.
        cap = live + extra if live == 0 else max(64, live + extra + (live + extra) // 2)
        if cap <= len(self._vectors) and self._start == 0:
            return
        keep = slice(self._start, self._end)
        vectors = np.zeros((cap, self.dims), np.float32)
        vectors[:live] = self._vectors[keep]
        times = np.zeros(cap, np.int64)
        times[:live] = self._times[keep]
        seqs = np.zeros(cap, np.int64)
        seqs[:live] = self._seqs[keep]
        said = np.zeros(cap, np.int64)
        said[:live] = self._said[keep]
        sessions = np.zeros(cap, np.int32)
        sessions[:live] = self._sessions[keep]
        self._vectors, self._times, self._seqs, self._said, self._sessions = vectors, times, seqs, said, sessions
        self._messages = self._messages[keep]
        self._folded = self._folded[keep]
        self._positions = self._positions[keep]
        self._start, self._end = 0, live

    def add(
        self,
        vectors: np.ndarray,
        times: Sequence[int],
        seqs: Sequence[int],
        messages: Sequence[Message],
        positions: Sequence[Position],
        sessions: Sequence[str] = (),
        said: Sequence[int] | None = None,
        keywords: Sequence[str] | None = None,
    ) -> None:
        n = len(messages)
        if not n:
            return
        if self._end + n > len(self._vectors):
            self._compact(n)
        rows = slice(self._end, self._end + n)
        self._vectors[rows] = vectors
        self._times[rows] = times
        self._seqs[rows] = seqs
        self._said[rows] = times if said is None else said
        self._sessions[rows] = [self._code(s) for s in sessions] if sessions else 0
        self._messages.extend(messages)
        self._folded.extend(m.content.casefold() for m in messages)
        self._positions.extend(positions)
        self._end += n
        if keywords is not None:
            if self.keywords is None:
                self.keywords = KeywordIndex()
            self.keywords.add(list(seqs), keywords)

    def _code(self, session_id: str) -> int:
        code = self._codes.get(session_id)
        if code is None:
            code = self._codes[session_id] = len(self._names)
            self._names.append(session_id)
        return code

    def _keep(self, mask: np.ndarray) -> list[Position]:
        live = slice(self._start, self._end)
        dropped = [p for p, k in zip(self._positions[live], mask, strict=True) if not k and p is not None]
        if self.keywords is not None:
            self.keywords.remove(self._seqs[live][~mask].tolist())
        n = int(mask.sum())
        self._vectors[:n] = self._vectors[live][mask]
        self._times[:n] = self._times[live][mask]
        self._seqs[:n] = self._seqs[live][mask]
        self._said[:n] = self._said[live][mask]
        self._sessions[:n] = self._sessions[live][mask]
        self._messages = [m for m, k in zip(self._messages[live], mask, strict=True) if k]
        self._folded = [t for t, k in zip(self._folded[live], mask, strict=True) if k]
        self._positions = [p for p, k in zip(self._positions[live], mask, strict=True) if k]
        self._start, self._end = 0, n
        return dropped

    def drop_until(self, cleared_at: int) -> list[Position]:
        """Drop rows whose event time is at or before `cleared_at` (µs); returns their positions."""
        mask = self._times[self._start : self._end] > cleared_at
        return [] if mask.all() else self._keep(mask)

    def drop_positions(self, positions: Collection[Position]) -> list[Position]:
        """Drop the rows at these log positions (an erased session's); returns those dropped."""
        gone = set(positions)
        live = self._positions[self._start : self._end]
        mask = np.fromiter((p not in gone for p in live), dtype=bool, count=len(live))
        return [] if mask.all() else self._keep(mask)

    def drop_oldest(self, count: int) -> list[Position]:
        """Drop the `count` rows applied first; returns their positions."""
        count = min(count, len(self))
        stop = self._start + count
        dropped = [p for p in self._positions[self._start : stop] if p is not None]
        if self.keywords is not None:
            self.keywords.remove(self._seqs[self._start : stop].tolist())
        for i in range(self._start, stop):  # release them now; the slots are reclaimed on the next compaction
            self._messages[i] = None
            self._folded[i] = ""
            self._positions[i] = None
        self._start = stop
        return dropped

    def top(self, query: np.ndarray, k: int) -> list[Message]:
        """The `k` rows nearest `query` by cosine (rows and query are unit vectors), best first."""
        n = len(self)
        if k < 1 or n == 0 or not query.any():
            return []
        scores = self._vectors[self._start : self._end] @ query
        best = np.argpartition(scores, n - k)[n - k :] if k < n else np.arange(n)
        order = best[np.lexsort((best, -scores[best]))]  # best first; ties: applied first
        return [self._messages[self._start + i] for i in order]  # live rows are never None

    def admitted(self, recall: Recall) -> np.ndarray | None:
        """Which live rows pass `recall`'s filters (None: all of them)."""
        live = slice(self._start, self._end)
        mask: np.ndarray | None = None
        if recall.sessions is not None:
            codes = [self._codes[s] for s in recall.sessions if s in self._codes]
            mask = np.isin(self._sessions[live], np.array(codes, np.int32))
        for bound, keep in ((recall.after, np.greater), (recall.before, np.less)):
            if bound is not None:
                test = keep(self._said[live], micros(bound))
                mask = test if mask is None else mask & test
        if recall.where:
            rows = range(len(self)) if mask is None else np.flatnonzero(mask).tolist()
            pairs = recall.where.items()
            found = np.zeros(len(self), bool)
            for i in rows:
                metadata = self._messages[self._start + i].metadata  # type: ignore[union-attr]
                found[i] = all(metadata.get(k) == v for k, v in pairs)
            mask = found
        return mask

    def rank(self, ask: RankAsk) -> Ranking:
        """`ask`'s rankers over the rows its filters admit: each one's best `ask.depth` by sequence number."""
        live = slice(self._start, self._end)
        seqs = self._seqs[live]
        mask = self.admitted(ask.recall)
        rows = np.arange(len(self)) if mask is None else np.flatnonzero(mask)
        ranked: list[Ranked] = []
        if ask.vector is not None and len(rows) and ask.vector.any():
            scores = (self._vectors[live] if mask is None else self._vectors[live][rows]) @ ask.vector
            k = min(ask.depth, len(rows))
            best = np.argpartition(scores, len(rows) - k)[len(rows) - k :] if k < len(rows) else np.arange(len(rows))
            order = best[np.lexsort((best, -scores[best]))]
            ranked.append(Ranked("vector", seqs[rows[order]], scores[order].astype(np.float32)))
        if ask.keywords is not None and self.keywords is not None:
            allowed = None if mask is None else seqs[rows]
            ids, scores = self.keywords.top(ask.keywords, ask.depth, allowed)
            ranked.append(Ranked("keyword", ids, scores))
        if ask.substring is not None:
            needle = ask.substring.casefold()
            folded = self._folded[self._start : self._end]
            scan = range(len(folded)) if mask is None else rows.tolist()
            hits = list(islice((i for i in scan if needle in folded[i]), ask.depth))  # the oldest: stop there
            ranked.append(Ranked("substring", seqs[hits], np.ones(len(hits), np.float32)))
        wanted = {int(i) for r in ranked for i in r.ids.tolist()}
        at = np.searchsorted(seqs, np.array(sorted(wanted), np.int64))
        found = {}
        for seq, i in zip(sorted(wanted), at.tolist(), strict=True):
            row = self._start + i
            message, position = self._messages[row], self._positions[row]
            assert message is not None and position is not None  # live rows
            said = _EPOCH + timedelta(microseconds=int(self._said[row]))
            found[seq] = Found(message, self._names[self._sessions[row]] if self._names else "", position, said)
        return Ranking(tuple(ranked), found)


class MemoryVectorStore:
    """The embedded default: vectors in this process, rebuilt from the log on start."""

    kind = "memory"

    def __init__(self, cap: int = DEFAULT_CAP) -> None:
        if cap < 1:
            raise ValueError(f"cap: must be >= 1, got {cap}")
        self.cap = cap
        self.evicted = 0
        self._indexes: dict[tuple[str, str], VectorIndex] = {}
        self._held: dict[tuple[str, str], set[Position]] = {}  # re-delivery never duplicates an entry
        self._writers: dict[tuple[str, str], dict[Position, str]] = {}  # held entry -> its session, for erasure
        self._cleared: dict[tuple[str, str], datetime] = {}
        self._tails: dict[tuple[str, str, int, str, str], Tail] = {}  # (view, topic, partition, ns, session)
        self._checkpoints: dict[tuple[str, str, int], int] = {}
        self._seq = 0
        self._total = 0
        self._warned = False

    async def load(
        self, view: str, topic: str, partition: int, namespaces: Sequence[str], sessions: Sequence[SessionId] = ()
    ) -> BatchState:
        cleared = {ns: self._cleared[(view, ns)] for ns in namespaces if (view, ns) in self._cleared}
        found = ((s, self._tails.get((view, topic, partition, *s))) for s in sessions)
        tails = {s: tail for s, tail in found if tail is not None}
        return BatchState(self._checkpoints.get((view, topic, partition)), cleared, tails)

    async def known(self, model: str, shas: Collection[str]) -> dict[str, np.ndarray]:
        return {}

    async def write(self, view: str, model: str, write: Write) -> None:
        for (ns, session), tail in write.tails.items():
            self._tails[(view, write.topic, write.partition, ns, session)] = tail
        # What retractions, forgettings and erasures take, dropped in one pass over each index: an erasure of
        # many sessions (or a forgetting of many messages) costs one compaction, not one per session.
        gone: dict[str, set[Position]] = {}
        for ns, position in write.retracted:
            if position in self._held.get((view, ns), ()):
                gone.setdefault(ns, set()).add(position)
        erased: dict[str, dict[str, Position]] = {}
        for (ns, session), at in write.erased.items():
            erased.setdefault(ns, {})[session] = at
        for ns, sessions in erased.items():
            for p, s in self._writers.get((view, ns), {}).items():
                upto = sessions.get(s)
                if upto is not None and erases(upto, p):
                    gone.setdefault(ns, set()).add(p)
        for ns, positions in gone.items():
            index = self._indexes.get((view, ns))
            if index is not None and positions:
                self._forget(view, ns, index.drop_positions(positions))
        for ns, mark in write.cleared.items():
            old = self._cleared.get((view, ns))
            if old is None or mark > old:
                self._cleared[(view, ns)] = mark
                index = self._indexes.get((view, ns))
                if index is not None:
                    self._forget(view, ns, index.drop_until(micros(mark)))
        groups: dict[str, list[int]] = {}
        for i, e in enumerate(write.entries):
            groups.setdefault(e.namespace, []).append(i)
        for ns, rows in groups.items():
            watermark = self._cleared.get((view, ns))
            held = self._held.setdefault((view, ns), set())
            fresh = [
                i
                for i in rows
                if write.entries[i].position not in held
                and (watermark is None or write.entries[i].timestamp > watermark)
            ]
            if not fresh:
                continue
            index = self._indexes.setdefault((view, ns), VectorIndex(write.vectors.shape[1]))
            entries = [write.entries[i] for i in fresh]
            seqs = range(self._seq, self._seq + len(fresh))
            self._seq += len(fresh)
            keywords = None if write.keywords is None else [write.keywords[i] for i in fresh]
            index.add(
                write.vectors[fresh],
                [micros(e.timestamp) for e in entries],
                seqs,
                [e.message for e in entries],
                [e.position for e in entries],
                [e.session_id for e in entries],
                [micros(e.said) for e in entries],
                keywords,
            )
            held.update(e.position for e in entries)
            self._writers.setdefault((view, ns), {}).update((e.position, e.session_id) for e in entries)
            self._total += len(fresh)
        key = (view, write.topic, write.partition)
        self._checkpoints[key] = max(write.checkpoint, self._checkpoints.get(key, -1))
        self._evict()

    def _forget(self, view: str, namespace: str, dropped: list[Position]) -> None:
        self._held.get((view, namespace), set()).difference_update(dropped)
        writers = self._writers.get((view, namespace), {})
        for p in dropped:
            writers.pop(p, None)
        self._total -= len(dropped)

    def _evict(self) -> None:
        over = self._total - self.cap
        if over <= 0:
            return
        if not self._warned:
            self._warned = True
            log.warning(
                "in-memory vector store reached its cap of %d entries: evicting the oldest; "
                "use store: postgres to keep every message searchable",
                self.cap,
            )
        # The `over` oldest entries overall are among the first `over` of each namespace.
        fronts = {key: index.seqs[:over] for key, index in self._indexes.items() if len(index)}
        last = np.partition(np.concatenate(list(fronts.values())), over - 1)[over - 1]
        for (view, ns), seqs in fronts.items():
            count = int(np.searchsorted(seqs, last, side="right"))
            if count:
                self._forget(view, ns, self._indexes[(view, ns)].drop_oldest(count))
                self.evicted += count

    async def checkpoint(self, view: str, topic: str, partition: int) -> int | None:
        return self._checkpoints.get((view, topic, partition))

    async def search(
        self, view: str, namespace: str, query: np.ndarray, k: int, want: Position | None
    ) -> list[Message] | None:
        if want is not None:
            done = self._checkpoints.get((view, want.topic, want.partition))
            if done is None or done < want.offset:
                return None
        index = self._indexes.get((view, namespace))
        return index.top(query, k) if index is not None else []

    async def rank(self, view: str, namespace: str, ask: RankAsk, want: Position | None) -> Ranking | None:
        if want is not None:
            done = self._checkpoints.get((view, want.topic, want.partition))
            if done is None or done < want.offset:
                return None
        index = self._indexes.get((view, namespace))
        return index.rank(ask) if index is not None else Ranking((), {})

    async def count(self, view: str, namespace: str) -> int:
        index = self._indexes.get((view, namespace))
        return len(index) if index is not None else 0

    async def drop(self, view: str, namespaces: Collection[str], topics: Collection[str]) -> None:
        for ns in namespaces:
            index = self._indexes.pop((view, ns), None)
            self._total -= len(index) if index is not None else 0
            self._held.pop((view, ns), None)
            self._writers.pop((view, ns), None)
            self._cleared.pop((view, ns), None)
        logs = set(topics)
        for cp in [k for k in self._checkpoints if k[0] == view and k[1] in logs]:
            del self._checkpoints[cp]
        for key in [k for k in self._tails if k[0] == view and k[3] in namespaces]:
            del self._tails[key]

    async def close(self) -> None:
        pass

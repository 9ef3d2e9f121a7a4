"""In-process checkpoint view: a `Thread` per (namespace, thread id) and the partition checkpoints.

`apply` has no await inside, so nothing runs between its steps: that is the atomic step. The
embedded saver rebuilds it from the log when it opens.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from helix_es.model.events import Record, Serialized
from helix_es.stores.ports import Applied
from helix_es.views.checkpoints import EMPTY, VIEW_NAME, Saved, Thread, WriteRow, apply_op, newest_first, record_op


class MemoryCheckpoints:
    kind = "memory"

    def __init__(self, name: str = VIEW_NAME) -> None:
        self.name = name
        self._threads: dict[tuple[str, str], Thread] = {}
        self._checkpoints: dict[tuple[str, int], int] = {}

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        if not records:
            return Applied(0)
        p = records[0].position
        done = self._checkpoints.get((p.topic, p.partition), -1)
        fresh = [r for r in records if r.position.offset > done]
        for r in fresh:
            e = r.event
            thread = self._threads.setdefault((e.namespace, e.session_id), Thread())
            if (op := record_op(r)) is not None:
                apply_op(thread, op)
        if fresh:
            self._checkpoints[(p.topic, p.partition)] = fresh[-1].position.offset
        return Applied(len(fresh))

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        return self._checkpoints.get((topic, partition))

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        self._checkpoints[(topic, partition)] = max(offset, self._checkpoints.get((topic, partition), -1))

    async def get(self, namespace: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None) -> Saved | None:
        thread = self._threads.get((namespace, thread_id))
        rows = thread.checkpoints.get(checkpoint_ns) if thread else None
        if not rows:
            return None
        if checkpoint_id is None:
            return rows[max(rows)]
        return rows.get(checkpoint_id)

    async def listing(
        self,
        namespace: str,
        thread_id: str | None,
        checkpoint_ns: str | None,
        before: str | None,
        limit: int | None,
    ) -> list[Saved]:
        ids = [thread_id] if thread_id is not None else sorted(t for n, t in self._threads if n == namespace)
        found: list[Saved] = []
        for tid in ids:
            thread = self._threads.get((namespace, tid))
            if thread is None:
                continue
            for ns, rows in thread.checkpoints.items():
                if checkpoint_ns is None or ns == checkpoint_ns:
                    found += [s for s in newest_first(rows) if before is None or s.checkpoint_id < before]
        found.sort(key=lambda s: (s.thread_id, s.checkpoint_id), reverse=True)
        return found if limit is None else found[:limit]

    async def latest(self, namespace: str) -> list[Saved]:
        found = []
        for tid in sorted(t for n, t in self._threads if n == namespace):
            newest = [rows[max(rows)] for rows in self._threads[(namespace, tid)].checkpoints.values() if rows]
            if newest:
                found.append(max(newest, key=lambda s: s.checkpoint_id))
        return found

    async def blobs(
        self, namespace: str, thread_id: str, checkpoint_ns: str, versions: Sequence[tuple[str, str]]
    ) -> dict[str, Serialized]:
        thread = self._threads.get((namespace, thread_id))
        if thread is None:
            return {}
        out = {}
        for channel, version in versions:
            value = thread.blobs.get((checkpoint_ns, channel, version))
            if value is not None and value.type != EMPTY:
                out[channel] = value
        return out

    async def writes(self, namespace: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> list[WriteRow]:
        thread = self._threads.get((namespace, thread_id))
        rows = thread.writes.get((checkpoint_ns, checkpoint_id)) if thread else None
        return list(rows.values()) if rows else []

    async def runs(self, namespace: str, run_ids: Collection[str]) -> list[str]:
        wanted = set(run_ids)
        return sorted(
            tid
            for (ns, tid), thread in self._threads.items()
            if ns == namespace
            and any(s.run_id in wanted for rows in thread.checkpoints.values() for s in rows.values())
        )

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        for key in [k for k in self._threads if k[0] in namespaces]:
            del self._threads[key]
        for cp in [k for k in self._checkpoints if k[0] in topics]:
            del self._checkpoints[cp]

    async def close(self) -> None:
        pass

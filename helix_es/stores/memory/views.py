"""In-process store: the embedded default. Atomic because nothing else runs between its steps."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from helix_es.stores.ports import EMPTY, Change, SessionKey, Snapshot, StaleWrite
from helix_es.views.base import View


class MemoryStore:
    kind = "memory"

    def __init__(self) -> None:
        self._sessions: dict[tuple[str, SessionKey], Snapshot] = {}
        self._checkpoints: dict[tuple[str, str, int], int] = {}

    async def load(self, view: View, keys: Sequence[SessionKey]) -> dict[SessionKey, Snapshot]:
        return {k: self._sessions.get((view.name, k), EMPTY) for k in keys}

    async def apply(self, view: View, topic: str, partition: int, changes: Sequence[Change], checkpoint: int) -> None:
        for c in changes:
            if self._sessions.get((view.name, c.key), EMPTY).applied != c.before.applied:
                raise StaleWrite(f"{view.name} {c.key}: guard moved since load")
        for c in changes:
            self._sessions[(view.name, c.key)] = Snapshot(c.after, c.applied)
        self._checkpoints[(view.name, topic, partition)] = checkpoint

    async def checkpoint(self, view: View, topic: str, partition: int) -> int | None:
        return self._checkpoints.get((view.name, topic, partition))

    async def read(self, view: View, key: SessionKey, *, guard: bool = True) -> Snapshot:
        return self._sessions.get((view.name, key), EMPTY)

    async def drop(self, view: View, namespaces: Collection[str], topics: Collection[str]) -> None:
        spaces, logs = set(namespaces), set(topics)
        for key in [k for k in self._sessions if k[0] == view.name and k[1].namespace in spaces]:
            del self._sessions[key]
        for cp in [k for k in self._checkpoints if k[0] == view.name and k[1] in logs]:
            del self._checkpoints[cp]

    async def sessions(self, view: View, namespace: str) -> list[str]:
        return sorted(k.session_id for name, k in self._sessions if name == view.name and k.namespace == namespace)

    async def forget_checkpoints(self, view: View, partitions: Collection[tuple[str, int]]) -> None:
        for topic, partition in partitions:
            self._checkpoints.pop((view.name, topic, partition), None)

    async def close(self) -> None:
        pass

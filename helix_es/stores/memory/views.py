"""In-process store: the embedded default. Atomic because nothing else runs between its steps."""

from __future__ import annotations

from collections.abc import Sequence

from helix_es.stores.ports import EMPTY, Change, SessionKey, Snapshot, StaleWrite
from helix_es.views.base import View


class MemoryStore:
    kind = "memory"

    def __init__(self) -> None:
        self._sessions: dict[tuple[str, SessionKey], Snapshot] = {}
        self._checkpoints: dict[tuple[str, str, int], int] = {}

    async def load(self, view: View, keys: Sequence[SessionKey]) -> dict[SessionKey, Snapshot]:
        return {k: self._sessions.get((view.name, k), EMPTY) for k in keys}

    async def apply(
        self, view: View, topic: str, partition: int, changes: Sequence[Change], checkpoint: int
    ) -> None:
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

    async def close(self) -> None:
        pass

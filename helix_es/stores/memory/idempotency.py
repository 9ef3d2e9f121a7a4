"""Idempotency keys in the process: per view and session, keys in the order first seen (memory and file stores)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from helix_es.model.events import REMEMBERED_KEYS
from helix_es.stores.ports import Claim, SessionKey


class MemoryIdempotency:
    """Keys live as long as the process, like the in-process views beside them; a ttl is not needed
    (only Redis expires sessions)."""

    kind = "memory"

    def __init__(self, remembered: int = REMEMBERED_KEYS) -> None:
        self.remembered = remembered
        self._keys: dict[tuple[str, SessionKey], dict[str, int]] = {}  # insertion order: oldest first

    async def claim(self, view: str, claims: Sequence[Claim], *, ttl: float | None = None) -> list[int]:
        firsts = []
        for c in claims:
            seen = self._keys.setdefault((view, c.key), {})
            first = seen.setdefault(c.idempotency_key, c.offset)
            if len(seen) > self.remembered:
                del seen[next(iter(seen))]
            firsts.append(first)
        return firsts

    async def drop(self, view: str, namespaces: Collection[str]) -> None:
        for ident in [i for i in self._keys if i[0] == view and i[1].namespace in namespaces]:
            del self._keys[ident]

    async def close(self) -> None:
        pass

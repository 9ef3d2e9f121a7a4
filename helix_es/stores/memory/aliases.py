"""In-process aliases, for views that live in the process (memory and file stores)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class MemoryAliases:
    """In-process aliases, for views that live in the process (memory and file stores)."""

    kind: str = "memory"
    cheap: bool = True
    aliases: dict[str, str] = field(default_factory=dict)
    built: dict[str, set[str]] = field(default_factory=dict)
    announced: dict[tuple[str, str], float] = field(default_factory=dict)  # (alias, target) -> until (monotonic)

    async def get(self, alias: str) -> str | None:
        return self.aliases.get(alias)

    async def switch(self, alias: str, target: str, *, expect: str, base: str) -> str | None:
        current = self.aliases.get(alias, base)
        if current != expect:
            return current
        self.aliases[alias] = target
        self.built.setdefault(alias, set()).add(target)
        return None

    async def targets(self, alias: str) -> set[str]:
        return set(self.built.get(alias, ()))

    async def add_target(self, alias: str, target: str) -> None:
        self.built.setdefault(alias, set()).add(target)

    async def forget_target(self, alias: str, target: str) -> None:
        self.built.get(alias, set()).discard(target)

    async def announce(self, alias: str, target: str, ttl: float) -> None:
        self.announced[(alias, target)] = time.monotonic() + ttl

    async def served(self, alias: str) -> set[str]:
        now = time.monotonic()
        return {t for (a, t), until in self.announced.items() if a == alias and until > now}

    async def close(self) -> None:
        pass

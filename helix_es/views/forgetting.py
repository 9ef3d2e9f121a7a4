"""A view's forgetting policy (YAML `forget:`): what it lets go of, and how often it looks.

```yaml
forget: {max_age: 720h, inactive_for: 168h, budget: 10000, every: 1m}
```

- `max_age`: an item said (`occurred_at`, else its event's time) longer ago than this leaves.
- `inactive_for`: an item not used (written, or returned by a read) for this long leaves.
- `budget`: the view keeps N items; the rest leave. `keep: recent` (the default) keeps the most
  recently used; `keep: relevant` keeps those reads returned most often (how often an agent's
  questions found an item is what a memory can know of its relevance), the most recently used
  first among equals.
- `every`: how often the policy worker looks (default 1m).

Durations take the seed's `ttl` format (`720h`, `30m`, `1h30m`) or seconds. What an item is
depends on the view: a message of a long-term or vector view, a whole session of a session view
(conversation, windows, smart, summary). A policy never deletes: the worker records
`MemoryForgotten` and the views fold it (`helix_es.projection.forgetting`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from helix_es.model.errors import ConfigError
from helix_es.model.options import mapping, only_keys
from helix_es.model.times import parse_ttl

FORGET_KEYS = frozenset({"max_age", "inactive_for", "budget", "keep", "every"})
KEEPS = ("recent", "relevant")
DEFAULT_EVERY = 60.0


@dataclass(frozen=True)
class Forget:
    """One view's policy; durations in seconds, None where not set."""

    max_age: float | None = None
    inactive_for: float | None = None
    budget: int | None = None
    every: float = DEFAULT_EVERY
    keep: str = "recent"  # which items a budget keeps: the most recently used, or the most often returned

    def settings(self) -> dict[str, str]:
        """Each set rule as the reason a `MemoryForgotten` carries (`max_age=720h`)."""
        out = {}
        for key in ("max_age", "inactive_for"):
            value = getattr(self, key)
            if value is not None:
                out[key] = f"{key}={_duration(value)}"
        if self.budget is not None:
            out["budget"] = f"budget={self.budget}" + ("" if self.keep == "recent" else f" keep={self.keep}")
        return out


def parse_forget(raw: object, where: str) -> Forget | None:
    """`forget:` of a memory mapping, or None when absent; `ConfigError` naming the key otherwise."""
    if raw is None:
        return None
    options: Mapping[str, Any] = mapping(raw, where)
    only_keys(options, FORGET_KEYS, where, "forget")
    budget = options.get("budget")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
        raise ConfigError(f"{where}.budget", f"must be a whole number >= 0 (items kept), got {budget!r}")
    policy = Forget(
        max_age=parse_ttl(options.get("max_age"), f"{where}.max_age"),
        inactive_for=parse_ttl(options.get("inactive_for"), f"{where}.inactive_for"),
        budget=budget,
        every=parse_ttl(options.get("every"), f"{where}.every") or DEFAULT_EVERY,
        keep=options.get("keep", "recent"),
    )
    if policy.keep not in KEEPS:
        raise ConfigError(f"{where}.keep", f"must be one of {', '.join(KEEPS)}, got {policy.keep!r}")
    if "keep" in options and budget is None:
        raise ConfigError(f"{where}.keep", "says which items a budget keeps: set budget too")
    if not policy.settings():
        raise ConfigError(where, "set at least one of max_age, inactive_for, budget")
    return policy


def _duration(seconds: float) -> str:
    """Seconds as the seed writes durations: 720h, 90m, 45s, 1.5s."""
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"

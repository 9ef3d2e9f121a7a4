"""`helix-es facts diff OLD NEW`: what a facts view's two targets know differently.

Two targets of one facts view (the one readers use and one `helix-es rebuild --re-extract` built
with another model, say) are compared fact by fact, per namespace: the facts each holds now and
its history (retracted ones left out), by subject, predicate, value and valid time. What only the
new target has is added, what only the old one has is removed; the rest is the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from helix_es.config import MemoryConfig
from helix_es.model.errors import ConfigError
from helix_es.model.facts import Fact, FactsAsk
from helix_es.model.names import check_target
from helix_es.projection.aliases import target_projection
from helix_es.projection.facts import facts_rows_of
from helix_es.views.facts import Facts

Key = tuple[str, str, str, datetime, datetime | None]


def _key(fact: Fact) -> Key:
    return (fact.subject.casefold(), fact.predicate, fact.value.casefold(), fact.valid_from, fact.valid_to)


@dataclass
class NamespaceDiff:
    namespace: str
    added: list[Fact] = field(default_factory=list)  # only in the new target
    removed: list[Fact] = field(default_factory=list)  # only in the old one
    same: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "added": [f.to_json() for f in self.added],
            "removed": [f.to_json() for f in self.removed],
            "same": self.same,
        }


async def _known(part: MemoryConfig, target: str, namespace: str) -> list[Fact]:
    projection = target_projection(part, check_target(target, "target"))
    try:
        rows = facts_rows_of(projection)
        assert rows is not None
        found = await rows.facts(namespace, FactsAsk(history=True))
        return [f for f in found or [] if f.known_to is None]
    finally:
        await projection.close()


async def diff_facts(part: MemoryConfig, old: str, new: str, namespaces: Sequence[str]) -> list[NamespaceDiff]:
    """Per namespace, the facts (history included) only `new` holds and only `old` holds."""
    if not isinstance(part.view, Facts):
        raise ConfigError("--view", f"facts diff compares targets of a facts view; {part.view.name} is not one")
    out = []
    for namespace in namespaces:
        before = {_key(f): f for f in await _known(part, old, namespace)}
        after = {_key(f): f for f in await _known(part, new, namespace)}
        diff = NamespaceDiff(namespace)
        diff.added = [f for k, f in after.items() if k not in before]
        diff.removed = [f for k, f in before.items() if k not in after]
        diff.same = len(before.keys() & after.keys())
        out.append(diff)
    return out

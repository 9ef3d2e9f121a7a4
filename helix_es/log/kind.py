"""A log kind: what `log.type` means, decided here once (as `helix_es.stores.kind` does for stores).

Every other module asks a kind's properties (`LogConfig.kind`), never compares `log.type` to a name:
`tests/test_layers.py` counts such comparisons outside this module.
"""

from __future__ import annotations

from dataclasses import dataclass

from helix_es.model.errors import ConfigError


@dataclass(frozen=True)
class LogKind:
    """One log technology, found by its name (`log.type`)."""

    name: str
    broker: bool  # a broker many processes share: addressed by its servers, not by a local path
    inline: bool  # its writer folds each append into the views: no projector service runs for it
    groups: bool  # consumer groups: projector services, their lag, rebuilds by a group of members

    @property
    def projected_apart(self) -> bool:
        """Views are folded by workers apart from the writers, so they cannot live in one process."""
        return not self.inline


KAFKA = LogKind("kafka", broker=True, inline=False, groups=True)
EMBEDDED = LogKind("embedded", broker=False, inline=True, groups=False)
KINDS = {k.name: k for k in (KAFKA, EMBEDDED)}
DEFAULT = EMBEDDED  # with no `log:` configured: a local file per namespace


def log_kind(name: object, where: str = "log.type") -> LogKind:
    """The kind named `name`; anything else is a `ConfigError` at `where`."""
    found = KINDS.get(name) if isinstance(name, str) else None
    if found is None:
        raise ConfigError(where, f"must be {' or '.join(KINDS)}, got {name!r}")
    return found

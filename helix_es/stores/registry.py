"""The one place that turns a store kind into adapters. A new kind: one package with a `KIND`, one line here."""

from __future__ import annotations

from helix_es.model.errors import ConfigError
from helix_es.stores.file import KIND as FILE
from helix_es.stores.kind import StoreKind
from helix_es.stores.memory import KIND as MEMORY
from helix_es.stores.postgres import KIND as POSTGRES
from helix_es.stores.redis import KIND as REDIS

KINDS: dict[str, StoreKind] = {k.name: k for k in (MEMORY, REDIS, POSTGRES, FILE)}


def kind(name: str, field: str = "memory.store") -> StoreKind:
    """The kind called `name`, or `ConfigError` naming `field` and the kinds there are."""
    found = KINDS.get(name)
    if found is None:
        raise ConfigError(field, f"must be one of {list(KINDS)}, got {name!r}")
    return found


def offering(what: str) -> list[str]:
    """The kinds that offer `what` (`vectors`, `keys`, `tables`), in registry order."""
    return [k.name for k in KINDS.values() if getattr(k, what)]


def views_kind(name: str) -> str:
    """The kind a store's view adapters report (a `file` store keeps its views in `memory` ones)."""
    found = kind(name)
    return found.views_from or found.name


def transient(exc: BaseException) -> bool:
    """A store failure that waiting cures, as the kind whose service failed says."""
    return any(k.transient is not None and k.transient(exc) for k in KINDS.values())

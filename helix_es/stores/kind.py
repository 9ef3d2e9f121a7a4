"""A store kind: what one technology offers, found by its name in `helix_es.stores.registry`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from helix_es.stores.ports import (
    AliasStore,
    CheckpointStore,
    IdempotencyStore,
    ItemStore,
    KeyStore,
    RowStore,
    ViewStore,
)
from helix_es.stores.ports.vector import VectorStore
from helix_es.views.items import Items
from helix_es.views.rows import Table


class RowsFactory(Protocol):
    """A kind's row store for a view: (location, view name, tables); `family` names its keys where the
    technology has a key space (Redis: `helix:<family>:{<ns>}:<view>:...`, e.g. `facts`)."""

    def __call__(self, where: str | None, name: str, tables: Sequence[Table], *, family: str = "rows") -> RowStore: ...


@dataclass(frozen=True)
class StoreKind:
    """One technology's adapters, found by its name (`memory.store`) in `helix_es.stores.registry`.

    Each factory takes the store's location (a Redis URL, a PostgreSQL DSN, a directory; None where
    the kind lives in the process); None means the kind does not offer that sort of adapter.
    """

    name: str
    address: Literal["redis_url", "dsn"] | None  # the config key that says where it lives
    in_process: bool  # its views live in one process: the embedded log only
    views: Callable[[str | None], ViewStore]
    aliases: Callable[[str | None], AliasStore]
    vectors: Callable[[str | None], VectorStore] | None = None
    keys: Callable[[str | None], KeyStore] | None = None
    idempotency: Callable[[str | None], IdempotencyStore] | None = None
    items: Callable[[str | None, Items], ItemStore] | None = None  # (location, view): LangGraph store items
    checkpoints: Callable[[str | None, str], CheckpointStore] | None = None  # (location, view name)
    rows: RowsFactory | None = None  # (location, view name, tables)
    transient: Callable[[BaseException], bool] | None = None  # a failure of its service that waiting cures
    tables: bool = False  # its long-term memory lives in a table the config may name (`table:`)
    exported: bool = False  # its views are exported as JSON to `file_path`, the embedded log kept beside it
    views_from: str | None = None  # the kind whose view adapters it keeps its views in, if another's

"""The one factory: a log config becomes a log, a memory config becomes its store and projection.

Store kinds are looked up in `helix_es.stores.registry`; nothing else decides between them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import replace
from typing import cast

from helix_es.config import LogConfig, MemoryConfig
from helix_es.log.codec import Codec
from helix_es.log.embedded import EmbeddedLog
from helix_es.log.kafka import KafkaLog
from helix_es.log.port import EventLog
from helix_es.model.errors import ConfigError
from helix_es.projection.checkpoints import CheckpointProjection
from helix_es.projection.facts import FactsRows
from helix_es.projection.idempotency import IdempotentProjection
from helix_es.projection.long_term import LongTermRows
from helix_es.projection.protocol import Projection, WideProjection
from helix_es.projection.session import SessionProjection
from helix_es.projection.summary import SummaryProjection
from helix_es.projection.vector import VectorProjection
from helix_es.providers.summarise import ExtractiveSummariser
from helix_es.stores import registry
from helix_es.stores.kind import StoreKind
from helix_es.stores.ports import (
    AliasStore,
    CheckpointStore,
    IdempotencyStore,
    ItemStore,
    SessionKey,
    Snapshot,
    ViewStore,
)
from helix_es.stores.ports.vector import VectorStore
from helix_es.views.base import IndexView, View
from helix_es.views.checkpoints import Checkpoints
from helix_es.views.facts import Facts
from helix_es.views.facts import tables as facts_tables
from helix_es.views.items import Items
from helix_es.views.long_term import LongTerm
from helix_es.views.long_term_rows import tables as long_term_tables
from helix_es.views.summary import Summary
from helix_es.views.vector import Vector

# Sessions whose snapshots a projector keeps between batches: a busy session's next batch is then
# one write and no read. A window's snapshot is its messages, so this bounds the memory it takes.
LIVE_CACHED = 2_000

_MISSING = {  # what a store kind's address is called in config, and where it comes from
    "redis_url": ("memory.redis_url", "redis_url (or HELIX_REDIS_URL)"),
    "dsn": ("memory.dsn", "dsn (or HELIX_POSTGRES_DSN)"),
}


def open_log(config: LogConfig, codec: Codec | None = None) -> EventLog:
    if config.kind.broker:
        return KafkaLog(
            config.bootstrap_servers,
            topic_prefix=config.topic_prefix,
            partitions=config.partitions,
            replication_factor=config.replication_factor,
            min_insync_replicas=config.min_insync_replicas,
            codec=codec,
        )
    return EmbeddedLog(config.path, fsync=config.fsync, topic_prefix=config.topic_prefix, codec=codec)


def location(memory: MemoryConfig, kind: StoreKind | None = None) -> str | None:
    """Where `memory`'s store lives (a URL or DSN; None in the process). Config resolved the environment."""
    kind = kind or registry.kind(memory.store)
    if kind.address == "redis_url":
        return memory.redis_url or getattr(memory.view, "redis_url", None)
    if kind.address == "dsn":
        return memory.postgres_dsn or getattr(memory.view, "dsn", None)
    return None


def _located(memory: MemoryConfig, kind: StoreKind, what: str) -> str | None:
    where = location(memory, kind)
    if kind.address is not None and not where:
        field, needs = _MISSING[kind.address]
        raise ConfigError(field, f"{what} needs {needs}")
    return where


def store_key(memory: MemoryConfig) -> tuple[str, str | None]:
    """Where a memory's store lives: memories with the same key share one store connection."""
    return memory.store, location(memory) if memory.store in registry.KINDS else None


def merge_served(parts: Iterable[MemoryConfig], key: Callable[[MemoryConfig], Hashable]) -> list[MemoryConfig]:
    """One memory per `key` (a view in its store), serving the union of the namespaces of all that share it:
    two agents with the same view are one consumer group (its name is a contract), folding both."""
    merged: dict[Hashable, MemoryConfig] = {}
    for part in parts:
        first = merged.setdefault(key(part), part)
        if first is not part:
            union = tuple(dict.fromkeys((*first.served, *part.served)))
            merged[key(part)] = replace(first, namespaces=union)
    return list(merged.values())


def open_store(memory: MemoryConfig) -> ViewStore:
    """The session-view store of `memory` (its owner closes it)."""
    kind = registry.kind(memory.store)
    return kind.views(_located(memory, kind, f"store: {kind.name}"))


def open_aliases(memory: MemoryConfig) -> AliasStore:
    """Where the aliases of `memory`'s view live: its own store (memory and file: a new in-process table)."""
    kind = registry.kind(memory.store) if memory.store in registry.KINDS else registry.KINDS["memory"]
    return kind.aliases(_located(memory, kind, f"store: {kind.name}"))


def open_long_term(memory: MemoryConfig) -> LongTermRows:
    """The long-term store of `memory` (a `LongTerm` view), owning its connection (opened on first use)."""
    view = memory.view
    assert isinstance(view, LongTerm)
    kind = registry.KINDS.get(view.store)
    if kind is None:
        raise ConfigError("memory.store", f"long-term lives in memory, file, redis or postgres, not {view.store!r}")
    where = _located(memory, kind, f"a {kind.name} long-term memory")
    assert kind.rows is not None, kind.name
    return LongTermRows(kind.rows(where, view.name, long_term_tables(view.table)), view.table)


def open_facts(memory: MemoryConfig) -> FactsRows:
    """The facts store of `memory` (a `Facts` view), owning its connection (opened on first use)."""
    view = memory.view
    assert isinstance(view, Facts)
    kind = registry.KINDS.get(view.store)
    if kind is None or kind.rows is None:
        stores = " or ".join(registry.offering("rows"))
        raise ConfigError("memory.store", f"facts live in {stores}, not {view.store!r}")
    where = _located(memory, kind, f"a {kind.name} facts view")
    store = kind.rows(where, view.name, facts_tables(view.table), family="facts")
    model = view.extract.model if view.extract is not None else None
    return FactsRows(store, view.table, source=view.name, model=model, multi_valued=view.multi_valued)


def open_items(memory: MemoryConfig) -> ItemStore:
    """The LangGraph store items of `memory` (an `Items` view), owning its connection."""
    kind = registry.KINDS.get(memory.store)
    if kind is None or kind.items is None:
        stores = " or ".join(registry.offering("items"))
        raise ConfigError("store.store", f"LangGraph store items live in {stores}, got {memory.store!r}")
    assert isinstance(memory.view, Items)
    return kind.items(_located(memory, kind, f"store: {kind.name}"), memory.view)


def open_checkpoints(memory: MemoryConfig) -> CheckpointStore:
    """The LangGraph checkpoint store of `memory` (a `Checkpoints` view), owning its connection."""
    kind = registry.KINDS.get(memory.store)
    if kind is None or kind.checkpoints is None:
        stores = " or ".join(registry.offering("checkpoints"))
        raise ConfigError("checkpoints.store", f"LangGraph checkpoints live in {stores}, got {memory.store!r}")
    return kind.checkpoints(_located(memory, kind, f"store: {kind.name}"), memory.view.name)


def open_vectors(memory: MemoryConfig) -> VectorStore:
    """The vector store of `memory` (a `Vector` view); its owner closes it."""
    kind = registry.KINDS.get(memory.store)
    if kind is None or kind.vectors is None:
        stores = " or ".join(registry.offering("vectors"))
        raise ConfigError("memory.store", f"a vector memory lives in {stores}, got {memory.store!r}")
    return kind.vectors(_located(memory, kind, f"store: {kind.name}"))


def open_idempotency(memory: MemoryConfig) -> IdempotencyStore:
    """Where `memory`'s view remembers idempotency keys: beside its data, in the same store kind."""
    view = memory.view
    name = view.store if isinstance(view, LongTerm) else memory.store
    kind = registry.KINDS.get(name) or registry.KINDS["memory"]
    if kind.idempotency is None:
        raise ConfigError("memory.store", f"{kind.name} keeps no idempotency keys")
    return kind.idempotency(_located(memory, kind, f"store: {kind.name}"))


def open_projection(
    memory: MemoryConfig,
    store: ViewStore | None = None,
    *,
    name: str | None = None,
    keys: IdempotencyStore | None = None,
) -> Projection:
    """The projection a memory config describes; session views use `store` (else their own).

    `name` (a rebuild target) names its checkpoints, keys, rows and consumer group in place of the
    view's name; derived events keep the view's own name, so every target reuses what was recorded.
    It remembers idempotency keys in `keys` (else in its own store kind), and closes them.
    """
    projection = open_wide(memory) if isinstance(memory.view, IndexView) else _open_session(memory, store)
    if name is not None:
        projection.name = name
    return IdempotentProjection(projection, keys or open_idempotency(memory), ttl=getattr(memory.view, "ttl", None))


def open_wide(memory: MemoryConfig) -> WideProjection:
    """The projection of a namespace-wide view (`IndexView`), owning its connection (opened on first use)."""
    view = memory.view
    # Long-term and items stores are projections by shape (their ports declare only what readers use).
    if isinstance(view, LongTerm):
        return cast(WideProjection, open_long_term(memory))
    if isinstance(view, Items):
        return cast(WideProjection, open_items(memory))
    if isinstance(view, Facts):
        return cast(WideProjection, open_facts(memory))
    if isinstance(view, Checkpoints):
        return CheckpointProjection(open_checkpoints(memory))
    if isinstance(view, Vector):
        vectors = open_vectors(memory)
        embedder = view.embedder if view.embedder is not None else view.embed.build()
        return VectorProjection(view.name, embedder, vectors, top_k=view.top_k, search=view.search)
    raise ConfigError("memory.type", f"{memory.type} has no projection of its own")


def _open_session(memory: MemoryConfig, store: ViewStore | None) -> SessionProjection | SummaryProjection:
    view = memory.view
    if not isinstance(view, View):
        raise ConfigError("memory.type", f"{memory.type} has no projection of its own (its parts have)")
    store = store or open_store(memory)
    if isinstance(view, Summary):
        return SummaryProjection(view, store, summariser=memory.summariser or ExtractiveSummariser())
    # A store's expiry (Redis ttl) may take a session's data and its guard at different moments:
    # then only a read tells what is left.
    cache: dict[SessionKey, Snapshot] | None = {} if getattr(view, "ttl", None) is None else None
    return SessionProjection(view, store, cache=cache, max_cached=LIVE_CACHED)

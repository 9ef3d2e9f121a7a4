"""The store registry: every kind builds its adapters against the real services, and each fits its port.

A new kind in `helix_es.stores.registry.KINDS` runs here with no change to this file.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from helix_es import ConfigError, load_config
from helix_es.model import names
from helix_es.projection.long_term import LongTermRows
from helix_es.projection.protocol import Projection
from helix_es.stores import registry
from helix_es.stores.ports import (
    EMPTY,
    AliasStore,
    KeyStore,
    RowStore,
    SessionKey,
    ViewStore,
)
from helix_es.stores.ports.vector import VectorStore
from helix_es.views.conversation import Conversation
from helix_es.views.long_term import DEFAULT_TABLE
from helix_es.views.long_term_rows import tables
from tests.conftest import unique


def assert_satisfies(adapter: object, port: type) -> None:
    """Every attribute the port declares, and every method it declares as a coroutine function."""
    for name in getattr(port, "__annotations__", {}):
        assert hasattr(adapter, name), f"{adapter!r} lacks {port.__name__}.{name}"
    methods = [n for n, v in vars(port).items() if inspect.isfunction(v) and not n.startswith("_")]
    assert methods, port
    for name in methods:
        assert inspect.iscoroutinefunction(getattr(adapter, name, None)), f"{adapter!r}: {port.__name__}.{name}"


def location(kind: registry.StoreKind, request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    if kind.address == "redis_url":
        return str(request.getfixturevalue("redis_url"))
    if kind.address == "dsn":
        return str(request.getfixturevalue("postgres_dsn"))
    return str(tmp_path / "keys")  # in the process: only a file key store uses it, as its directory


@pytest.mark.parametrize("name", list(registry.KINDS))
async def test_every_kind_builds_adapters_that_satisfy_their_ports(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    kind = registry.kind(name)
    assert kind.name == name and registry.KINDS[name] is kind
    assert kind.in_process == (kind.address is None)  # in the process, or somewhere to say where
    where = location(kind, request, tmp_path)
    views_kind = "memory" if kind.in_process else name  # file views are memory views, exported as JSON
    assert registry.views_kind(name) == views_kind
    ns = unique("reg")
    topic, key = names.topic(ns), SessionKey(ns, "s")
    opened: list[Any] = []
    try:
        views: ViewStore = kind.views(where)
        opened.append(views)
        assert_satisfies(views, ViewStore)
        assert views.kind == views_kind
        assert await views.read(Conversation(), key) == EMPTY  # it answers, from its real service
        assert await views.checkpoint(Conversation(), topic, 0) is None

        if kind.rows is not None:
            rows = kind.rows(where, unique("rows"), tables(DEFAULT_TABLE))
            opened.append(rows)
            assert_satisfies(rows, RowStore)
            assert rows.kind == views_kind
        assert kind.rows is not None  # the long-term view is kept as rows
        long_term = LongTermRows(kind.rows(where, "long-term", tables(DEFAULT_TABLE)), DEFAULT_TABLE)
        opened.append(long_term)
        assert_satisfies(long_term, Projection)
        assert (long_term.kind, long_term.name) == (views_kind, "long-term")
        assert await long_term.checkpoint(topic, 0) is None

        aliases: AliasStore = kind.aliases(where)
        opened.append(aliases)
        assert_satisfies(aliases, AliasStore)
        assert (aliases.kind, aliases.cheap) == (views_kind, kind.in_process)
        assert await aliases.get(names.alias_id("w", ns)) is None

        if kind.vectors is not None:
            vectors: VectorStore = kind.vectors(where)
            opened.append(vectors)
            assert_satisfies(vectors, VectorStore)
            assert vectors.kind == name
            assert await vectors.count(unique("vector"), ns) == 0

        if kind.keys is not None:
            keys: KeyStore = kind.keys(where)
            opened.append(keys)
            assert isinstance(keys, KeyStore)  # runtime-checkable
            assert_satisfies(keys, KeyStore)
            assert keys.kind == name
            assert await keys.rows(ns, "s") == []
    finally:
        for adapter in opened:
            await adapter.close()


def test_the_registry_says_who_offers_what() -> None:
    assert list(registry.KINDS) == ["memory", "redis", "postgres", "file"]
    assert registry.offering("vectors") == ["memory", "postgres"]
    assert registry.offering("keys") == ["redis", "postgres", "file"]
    assert registry.offering("vectors") == [k.name for k in registry.KINDS.values() if k.vectors is not None]
    assert registry.offering("tables") == ["postgres"]  # what else config and projections ask of a kind
    assert registry.offering("exported") == ["file"]
    assert [registry.views_kind(k) for k in registry.KINDS] == ["memory", "redis", "postgres", "memory"]


@pytest.mark.parametrize("memory", [{"type": "conversation"}, {"type": "long-term"}, {"type": "sliding-window"}])
def test_config_refuses_a_store_kind_not_in_the_registry(memory: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"memory": {**memory, "store": "cassandra"}})
    assert err.value.field == "memory.store"
    assert "cassandra" in str(err.value) and all(k in str(err.value) for k in registry.KINDS)
    with pytest.raises(ConfigError) as err:
        load_config({"agents": [{"id": "chat", "memory": {**memory, "store": "cassandra"}}]})
    assert err.value.field == "agents[0].memory.store"
    with pytest.raises(ConfigError) as err:
        registry.kind("cassandra")
    assert err.value.field == "memory.store"


def test_config_refuses_a_vector_memory_in_a_kind_without_vectors() -> None:
    for name in registry.KINDS:
        if registry.KINDS[name].vectors is None:
            with pytest.raises(ConfigError, match="a vector memory lives in memory or postgres") as err:
                load_config({"memory": {"type": "vector", "store": name}})
            assert err.value.field == "memory.store"

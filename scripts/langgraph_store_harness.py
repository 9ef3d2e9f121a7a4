"""The stand-ins `scripts/langgraph-store-suite` puts where LangGraph's own store tests build their
store: the only thing of those tests that changes. Copied into the run folder as `helix_harness.py`.

- `EmbeddedStore` replaces `InMemoryStore` (langgraph-checkpoint's tests): a `HelixStore` on an
  embedded log of its own, items in memory (the embedded default), opened for sync code.
- `kafka_store` / `akafka_store` replace `PostgresStore` / `AsyncPostgresStore` (langgraph-checkpoint-
  postgres's tests): a `HelixStore` on Kafka with its items in PostgreSQL, folded by a projector
  (`helix-es project`'s `serve`) run in this process, on a namespace and topics of their own.

A LangGraph index config (`dims`, `embed`: the tests' `Embeddings` object, `fields`) becomes the
`store:` mapping's `index`, its embedder registered as an embed provider of this process: the
projector runs here too, so it embeds with the very object the test compares against.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from helix_es.integrations.langgraph_store import HelixStore
from helix_es.providers.embed import EmbedSpec, embedder_from_func, register_provider
from helix_es.sync import run as run_sync
from projectors.service import serve

_closers: list[Callable[[], None]] = []  # the stores a test opened without closing them (InMemoryStore has no close)


def index_section(index: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A LangGraph `IndexConfig` as a `store:` mapping's `index`, its `embed` registered as a provider."""
    if index is None:
        return None
    embed, dims = index["embed"], index["dims"]
    name = f"suite-{uuid.uuid4().hex[:10]}"

    async def vectors(texts: Sequence[str]) -> np.ndarray:
        # LangChain's Embeddings, called in order on the loop: the tests' one keeps per-character state.
        call = embed.embed_documents if hasattr(embed, "embed_documents") else embed
        return np.asarray(call(list(texts)), dtype=np.float32)

    def factory(spec: EmbedSpec) -> Any:
        return embedder_from_func(vectors, spec.model_id, spec.dims)

    register_provider(name, factory, model=name, dims=dims)
    return {"embed": {"provider": name, "dims": dims}, "fields": list(index.get("fields") or ["$"])}


class EmbeddedStore(HelixStore):
    """`InMemoryStore(index=..., ttl=...)`'s stand-in: a HelixStore on an embedded log in a new folder."""

    def __init__(self, *, index: Mapping[str, Any] | None = None, ttl: Any = None) -> None:
        folder = tempfile.mkdtemp(prefix="helix-suite-")
        section: dict[str, Any] = {"namespace": "suite"}
        if index is not None:
            section["index"] = index_section(index)
        opened = HelixStore.from_config(
            {"log": {"type": "embedded", "path": folder, "fsync": False}, "store": section}, ttl=ttl
        )
        inner = opened.__enter__()
        super().__init__(inner.items, loop=inner._loop, ttl=ttl, own_loop=True)
        self.index_config = index

        def close() -> None:
            opened.__exit__(None, None, None)
            shutil.rmtree(folder, ignore_errors=True)

        _closers.append(close)


def _kafka_config(index: Mapping[str, Any] | None) -> tuple[dict[str, Any], str]:
    # Topics and consumer groups of their own too: a group shared with the last test's projector
    # would wait out its session before it folds anything.
    name = f"lgsuite{uuid.uuid4().hex[:10]}"
    log = {
        "type": "kafka",
        "bootstrap_servers": os.environ["HELIX_KAFKA_BOOTSTRAP"],
        "partitions": 1,
        "topic_prefix": name,
    }
    section: dict[str, Any] = {"namespace": name, "store": "postgres", "dsn": os.environ["HELIX_POSTGRES_DSN"]}
    if index is not None:
        section["index"] = index_section(index)
    config = {"log": log, "store": section}
    path = os.path.join(tempfile.mkdtemp(prefix="helix-suite-"), "project.json")
    with open(path, "w") as f:
        json.dump(config, f)  # JSON is YAML: what `helix-es project --config` reads
    return config, path


async def _project(path: str, stop: asyncio.Event) -> None:
    code = await serve(path, stop, batch_size=500, progress=3600.0)
    if code:
        raise RuntimeError(f"the projector stopped with {code}")


async def _started(store: HelixStore, path: str, stop: asyncio.Event) -> asyncio.Task[None]:
    """The projector of `store`'s view, started once its namespace's topic exists: a projector finds a
    topic made later only at its next look at the cluster's metadata (a second later)."""
    await store.items.backend.log.ensure_topic(store.items.namespace)  # type: ignore[attr-defined]
    return asyncio.create_task(_project(path, stop))


@contextlib.contextmanager
def kafka_store(*, index: Mapping[str, Any] | None = None, ttl: Any = None) -> Iterator[HelixStore]:
    """`PostgresStore.from_conn_string(...)`'s stand-in, for sync tests: helix-es's own loop runs the
    projector and the store."""
    config, path = _kafka_config(index)

    async def event() -> asyncio.Event:
        return asyncio.Event()

    stop = run_sync(event())
    try:
        with HelixStore.from_config(config, ttl=ttl) as store:
            projector = run_sync(_started(store, path, stop))
            store.index_config = index  # type: ignore[attr-defined]
            try:
                yield store
            finally:

                async def stopping() -> None:
                    stop.set()
                    await projector

                run_sync(stopping())
    finally:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


@contextlib.asynccontextmanager
async def akafka_store(*, index: Mapping[str, Any] | None = None, ttl: Any = None) -> AsyncIterator[HelixStore]:
    """`AsyncPostgresStore.from_conn_string(...)`'s stand-in, on the test's own loop."""
    config, path = _kafka_config(index)
    stop = asyncio.Event()
    try:
        async with HelixStore.from_config(config, ttl=ttl) as store:
            projector = await _started(store, path, stop)
            store.index_config = index  # type: ignore[attr-defined]
            try:
                yield store
            finally:
                stop.set()
                await projector
    finally:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


class Unavailable:
    """A name the tests import from PostgreSQL-only modules; only excluded tests use it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attr: str) -> Any:
        raise RuntimeError(f"{self.name} is PostgresStore's own; the test using it is excluded")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self.name} is PostgresStore's own; the test using it is excluded")


@pytest.fixture(autouse=True)
def _close_stores() -> Iterator[None]:
    yield
    while _closers:
        _closers.pop()()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the tests `scripts/langgraph-store-suite` excludes (each with its reason there)."""
    excluded = json.loads(os.environ.get("HELIX_SUITE_EXCLUDED", "[]"))
    kept, dropped = [], []
    for item in items:
        (dropped if any(fnmatch.fnmatchcase(item.nodeid, pattern) for pattern, _ in excluded) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept

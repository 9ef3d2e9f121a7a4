"""`add_many` (a batch appended together, checked whole first) and `Message.occurred_at` (when a message
was said), on the embedded log and Kafka, through middleware, composites, the file export and sync code."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helix_es import InvalidInput, InvalidMessage, Message, ToolCall, load_config, open_memory
from helix_es.log.codec import load_schemas
from helix_es.model.events import Event, MessageAdded
from helix_es.projection.factory import open_log
from helix_es.providers.embed import Embedder, EmbedSpec, HashEmbedder, embedder_from_func, register_provider
from helix_es.sync import open_memory as open_sync
from tests.conftest import topic_values, unique

THEN = datetime(2019, 3, 4, 7, 6, 5, 432100, tzinfo=timezone(timedelta(hours=2)))
V8 = next(v for v in load_schemas() if v.version == 8)  # the first with occurred_at
V1 = load_schemas()[0]


def embedded(tmp_path: Path, namespace: str, **memory: Any) -> dict[str, Any]:
    return {
        "log": {"type": "embedded", "path": str(tmp_path / "log")},
        "memory": {"type": "conversation", "namespace": namespace, **memory},
    }


async def on_log(cfg: dict[str, Any], namespace: str, session: str) -> list[Event]:
    log = open_log(load_config(cfg).log)
    try:
        return [r.event async for r in log.read(namespace, session_id=session)]
    finally:
        await log.close()


def batch(n: int, prefix: str = "m") -> list[Message]:
    return [Message("user" if i % 2 == 0 else "assistant", f"{prefix}{i}") for i in range(n)]


# -- occurred_at ---------------------------------------------------------------------------------------


def test_occurred_at_is_checked_at_the_edge_and_kept_in_utc() -> None:
    m = Message("user", "hi", occurred_at=THEN)
    assert m.occurred_at == THEN and m.occurred_at.tzinfo is UTC
    assert m.to_json() == '{"role":"user","content":"hi","occurred_at":"2019-03-04T05:06:05.432100+00:00"}'
    assert Message.from_json(m.to_json()) == m and hash(Message.from_json(m.to_json())) == hash(m)
    assert Message.from_record(m.to_record()) == m
    assert m != Message("user", "hi") and Message("user", "hi").to_json() == '{"role":"user","content":"hi"}'
    for bad, says in [(datetime(2019, 3, 4), "timezone-aware"), ("2019-03-04T05:06:05Z", "datetime, got str")]:
        with pytest.raises(InvalidMessage, match=says) as caught:
            Message("user", "hi", occurred_at=bad)  # type: ignore[arg-type]
        assert caught.value.field == "occurred_at"


async def test_occurred_at_round_trips_through_the_embedded_log(tmp_path: Path) -> None:
    ns, sid = unique("occ"), unique("s")
    cfg = embedded(tmp_path, ns)
    dated = Message("user", "said long ago", metadata={"src": "import"}, occurred_at=THEN)
    async with open_memory(cfg, session_id=sid) as mem:
        await mem.add(dated)
        await mem.add(Message("assistant", "said now"))
        assert await mem.get() == [dated, Message("assistant", "said now")]
    events = await on_log(cfg, ns, sid)
    assert [e.payload.message for e in events if isinstance(e.payload, MessageAdded)] == [
        dated,
        Message("assistant", "said now"),
    ]
    assert events[0].payload.message.occurred_at == THEN  # type: ignore[union-attr]
    raw = (tmp_path / "log" / f"helix.memory.{ns}.log").read_bytes()
    # Only the dated message needs v8; the other keeps the oldest version with its fields, for older readers.
    assert raw.count(b"\xc3\x01" + V8.fingerprint) == 1 and raw.count(b"\xc3\x01" + V1.fingerprint) == 1


async def test_occurred_at_round_trips_through_kafka(kafka_bootstrap: str, redis_url: str) -> None:
    ns, sid, prefix = unique("occ"), unique("s"), unique("occ")
    cfg: dict[str, Any] = {
        "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 2, "topic_prefix": prefix},
        "memory": {
            "type": "conversation",
            "namespace": ns,
            "store": "redis",
            "redis_url": redis_url,
            "consistency": "eventual",
        },
    }
    dated = Message("user", "said long ago", occurred_at=THEN)
    async with open_memory(cfg, session_id=sid) as mem:
        await mem.add(dated)
        positions = await mem.add_many([Message("assistant", "now"), Message("user", "then too", occurred_at=THEN)])
    values = await topic_values(kafka_bootstrap, f"{prefix}.{ns}", 3)
    assert [v[2:10] for v in values] == [V8.fingerprint, V1.fingerprint, V8.fingerprint]
    events = await on_log(cfg, ns, sid)
    assert [e.payload.message for e in events] == [  # type: ignore[union-attr]
        dated,
        Message("assistant", "now"),
        Message("user", "then too", occurred_at=THEN),
    ]
    assert [p.offset for p in positions] == [positions[0].offset, positions[0].offset + 1]


# -- add_many ------------------------------------------------------------------------------------------


async def test_add_many_appends_in_order_and_returns_the_positions(tmp_path: Path) -> None:
    ns, sid = unique("many"), unique("s")
    cfg = embedded(tmp_path, ns)
    messages = batch(5)
    async with open_memory(cfg, session_id=sid) as mem:
        await mem.add(Message("system", "first"))
        positions = await mem.add_many(messages)
        assert [(p.topic, p.partition, p.offset) for p in positions] == [
            (f"helix.memory.{ns}", 0, i) for i in range(1, 6)
        ]
        assert await mem.get() == [Message("system", "first"), *messages]  # read-your-writes covers the batch
        assert await mem.add_many([]) == []
        assert (await mem.add(Message("user", "after"))).offset == 6
    assert [e.payload.message.content for e in await on_log(cfg, ns, sid)] == [  # type: ignore[union-attr]
        "first",
        *(m.content for m in messages),
        "after",
    ]


async def test_a_bad_message_or_key_names_its_index_and_nothing_is_written(tmp_path: Path) -> None:
    ns, sid = unique("many"), unique("s")
    cfg = embedded(tmp_path, ns, max_content_bytes=1000)
    forged = Message.from_record({"role": "user", "content": "a\x00b"})  # built around Message()'s checks
    cases: list[tuple[list[Any], Any, str]] = [
        ([*batch(3), forged], None, "messages[3].content"),
        ([*batch(2), "hi"], None, "messages[2]"),
        ([*batch(2), Message("user", "x" * 2000)], None, "messages[2].content"),
        (batch(3), ["k0", "k1"], "idempotency_keys"),
        (batch(3), ["k0", "", None], "idempotency_keys[1]"),
        (Message("user", "one"), None, "messages"),
    ]
    async with open_memory(cfg, session_id=sid) as mem:
        await mem.add(Message("user", "kept"))
        for messages, keys, field in cases:
            with pytest.raises(InvalidInput) as caught:
                await mem.add_many(messages, idempotency_keys=keys)
            assert caught.value.field == field, caught.value
        assert [m.content for m in await mem.get()] == ["kept"]
    assert len(await on_log(cfg, ns, sid)) == 1


async def test_add_many_with_idempotency_keys_shows_a_retried_batch_once(tmp_path: Path) -> None:
    ns, sid = unique("many"), unique("s")
    cfg = embedded(tmp_path, ns)
    keys = ["k0", None, "k2"]
    async with open_memory(cfg, session_id=sid) as mem, open_memory(cfg, session_id=sid) as other:
        first = await mem.add_many(batch(3), idempotency_keys=keys)
        again = await other.add_many(batch(3), idempotency_keys=keys)  # another writer's retry
        assert [p.offset for p in first] == [0, 1, 2] and [p.offset for p in again] == [3, 4, 5]
        # The keyed ones show once; the unkeyed one was written twice and shows twice.
        assert [m.content for m in await mem.get()] == ["m0", "m1", "m2", "m1"]
    assert [e.idempotency_key for e in await on_log(cfg, ns, sid)] == keys * 2


async def test_add_many_goes_through_redaction_and_encryption(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HELIX_ENCRYPTION_KEY", base64.b64encode(os.urandom(32)).decode())
    ns, sid = unique("many"), unique("s")
    cfg = {**embedded(tmp_path, ns), "memory_middleware": ["logging", "redaction", "encryption"]}
    secret = "mail ada@example.com"
    call = ToolCall("c1", "send", json.dumps({"to": "bob@example.com"}))
    messages = [Message("user", secret), Message("assistant", "", tool_calls=(call,)), Message("user", "plain")]
    async with open_memory(cfg, session_id=sid) as mem:
        positions = await mem.add_many(messages)
        assert [p.offset for p in positions] == [0, 1, 2]
        got = await mem.get()
        assert [m.content for m in got] == ["mail [REDACTED:email]", "", "plain"]
        assert json.loads(got[1].tool_calls[0].arguments) == {"to": "[REDACTED:email]"}
    raw = b"".join(p.read_bytes() for p in (tmp_path / "log").glob("*.log"))
    for text in (b"ada@example.com", b"bob@example.com", b"REDACTED", b"plain"):
        assert text not in raw  # redacted, then sealed: every message of the batch


async def test_add_many_on_a_composite_feeds_every_part(tmp_path: Path) -> None:
    ns, sid = unique("many"), unique("s")
    parts = [{"type": "sliding-window", "window_size": 2}, {"type": "conversation"}]
    cfg = {"log": {"path": str(tmp_path)}, "memory": {"type": "composite", "namespace": ns, "backends": parts}}
    async with open_memory(cfg, session_id=sid) as mem:
        assert [p.offset for p in await mem.add_many(batch(4))] == [0, 1, 2, 3]
        assert [m.content for m in await mem.get()] == ["m2", "m3", "m0", "m1"]  # the window first, then the rest
    assert len(await on_log(cfg, ns, sid)) == 4  # one event per message, whatever the parts


async def test_add_many_writes_the_file_export_once_the_batch_is_in(tmp_path: Path) -> None:
    ns, sid = unique("many"), unique("s")
    export = tmp_path / "export.json"
    cfg = {
        "memory": {
            "type": "sliding-window",
            "window_size": 2,
            "namespace": ns,
            "store": "file",
            "file_path": str(export),
        }
    }
    async with open_memory(cfg, session_id=sid) as mem:
        await mem.add_many(batch(3))
        assert [m["content"] for m in json.loads(export.read_text())["messages"]] == ["m1", "m2"]


def test_add_many_from_sync_code(tmp_path: Path) -> None:
    ns, sid = unique("many"), unique("s")
    with open_sync(embedded(tmp_path, ns), session_id=sid) as mem:
        positions = mem.add_many(m for m in batch(3))  # a generator: read in the caller's thread
        assert [p.offset for p in positions] == [0, 1, 2]
        assert [m.content for m in mem.get()] == ["m0", "m1", "m2"]
        with pytest.raises(InvalidMessage) as caught:
            mem.add_many([Message("user", "ok"), None])  # type: ignore[list-item]
        assert caught.value.field == "messages[1]"
        assert len(mem.get()) == 3


# -- embedders see one batch ---------------------------------------------------------------------------

CALLS: dict[str, list[int]] = {}  # model -> the number of texts of each embedding call


def _counting(spec: EmbedSpec) -> Embedder:
    hashed = HashEmbedder(64)
    calls = CALLS.setdefault(spec.model_id, [])

    async def embed(texts: Sequence[str]) -> np.ndarray:
        calls.append(len(texts))
        return await hashed.embed(texts)

    return embedder_from_func(embed, spec.model_id, 64)  # a model's vectors: recorded on the log


register_provider("counting-hash", _counting, dims=64)


async def test_an_inline_batch_is_one_embedding_call_and_one_record(tmp_path: Path) -> None:
    ns, model = unique("am"), unique("m")
    cfg = embedded(tmp_path, ns, type="vector", search="hybrid", embed={"provider": "counting-hash", "model": model})
    async with open_memory(cfg, session_id="s") as mem:
        await mem.add_many(batch(12, "fact "))
        assert CALLS[f"counting-hash/{model}"] == [12]  # one call for the batch, none per message
        hits = await mem.recall("fact 7", limit=1)
        assert [h.message.content for h in hits] == ["fact 7"]
    kinds = [type(e.payload).__name__ for e in await on_log(cfg, ns, "s")]
    assert kinds.count("MessageAdded") == 12 and kinds.count("EmbeddingRecorded") == 12  # one a text
    async with open_memory(cfg, session_id="s") as mem:  # a reopen folds the record: no call
        assert len(await mem.recall("fact", limit=20, mode="keyword")) == 12
    assert CALLS[f"counting-hash/{model}"] == [12, 1]  # only the question above

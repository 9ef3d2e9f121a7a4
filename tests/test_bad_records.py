"""Nothing stops at a bad record: forget, audit and rebuild skip what the projector dead-letters, and count it.

Records a foreign producer wrote into a session's partition (undecodable, an envelope naming
another namespace, a key that is not the session id) sit between good events. The projector
parks them; `helix_es.log.check.Checker`, the same rules, makes every reader of the log pass over
them and report where they were. Real Kafka, Redis and the embedded log (tests/conftest.py).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from helix_es import Message, open_memory
from helix_es.client.runtime import default_runtime
from helix_es.history.audit import audit
from helix_es.log.check import Checker, concerns, skipped
from helix_es.log.codec import Codec, event_to_record
from helix_es.log.embedded import EmbeddedLog
from helix_es.log.kafka import KafkaLog
from helix_es.model import names
from helix_es.model.errors import InvalidInput, LogCorrupted, UnknownSchema
from helix_es.model.events import Event, MessageAdded, Position
from projectors import runner
from projectors.rebuild import pump, rebuild
from tests.conftest import cli, unique, wait_for

ROOT = Path(__file__).resolve().parent.parent
TURNS = ["hello, I am Alice", "hi Alice", "my card ends 4242", "noted"]


@pytest.fixture
async def file_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[None]:
    """Encryption with a key store, so `forget` can shred; the CLI processes inherit the environment."""
    monkeypatch.setenv("HELIX_ENCRYPTION_KEY", base64.b64encode(os.urandom(32)).decode())
    monkeypatch.setenv("HELIX_KEY_STORE", "file")
    monkeypatch.setenv("HELIX_KEY_STORE_URL", str(tmp_path / "keys"))
    monkeypatch.delenv("HELIX_ENCRYPTION_OLD_KEYS", raising=False)
    monkeypatch.setenv("HELIX_KEY_CACHE_TTL", "0")
    yield
    await default_runtime().aclose()


def plain(cfg: dict[str, Any]) -> dict[str, Any]:
    """The same memory without the middleware: messages as the views hold them (ciphertext), as audit shows them."""
    return {k: v for k, v in cfg.items() if k != "memory_middleware"}


def forged(namespace: str, session_id: str, **message: Any) -> bytes:
    """A well-encoded event, its message changed past `Message`'s checks if asked."""
    record = event_to_record(Event(namespace, session_id, MessageAdded(Message("user", "forged"))))
    record["payload"][1]["message"].update(message)
    return Codec().encode_record(record)


def spots(report: dict[str, Any]) -> list[tuple[int, int]]:
    return [(s["partition"], s["offset"]) for s in report["skipped_records"]]


async def test_kafka_forget_audit_and_rebuild_skip_what_the_projector_dead_letters(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, file_keys: None
) -> None:
    ns, prefix = unique("bad"), unique("bad")
    cfg: dict[str, Any] = {
        "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 3, "topic_prefix": prefix},
        "memory": {
            "type": "conversation",
            "store": "redis",
            "redis_url": redis_url,
            "namespace": ns,
            "read_timeout": 60,
        },
        "memory_middleware": ["encryption"],
    }
    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(cfg))
    topic = names.topic(ns, prefix)
    poison = [
        (b"alice", b"\x00not avro at all"),  # undecodable
        (b"alice", forged("someone-else", "alice")),  # an envelope naming another namespace
        (b"mallory", forged(ns, "alice")),  # keyed by another session id
    ]
    project = subprocess.Popen(
        [sys.executable, "-m", "helix_es.cli", "project", "--config", str(path)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    good: list[Position] = []
    bad: list[tuple[int, int]] = []
    try:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        await producer.start()
        try:
            async with open_memory(cfg, session_id="alice") as alice:
                for i, text in enumerate(TURNS):
                    good.append(await alice.add(Message("user" if i % 2 == 0 else "assistant", text)))
                    if i < len(poison):  # between good events, in the session's partition
                        key, value = poison[i]
                        meta = await producer.send_and_wait(topic, value, key=key, partition=good[0].partition)
                        bad.append((meta.partition, meta.offset))
        finally:
            await producer.stop()
        async with open_memory(plain(cfg), session_id="alice") as stored:

            async def folded() -> bool:
                return len(await stored.get()) == len(TURNS)

            await wait_for(folded, 60, "the projector to fold every good event")
            projected = await stored.get()

        # audit, from Python: every good event, the three skipped with their positions, the projector's view.
        report = await audit(cfg, session_id="alice", as_of="now", raw=True)  # as stored, like `stored`
        assert [e.position for e in report.events] == good
        assert [(s.position.partition, s.position.offset) for s in report.skipped] == bad
        assert [s.error.split(":")[0] for s in report.skipped] == ["UnknownSchema", "InvalidInput", "InvalidInput"]
        assert report.views == {"conversation": projected}
        # ... and from the command line.
        code, out, err = await cli("audit", "--config", str(path), "--session", "alice", "--json")
        assert code == 0, err
        doc = json.loads(out)
        assert [(e["partition"], e["offset"]) for e in doc["events"]] == [(p.partition, p.offset) for p in good]
        assert doc["skipped"] == 3 and spots(doc) == bad
        code, out, err = await cli("audit", "--config", str(path), "--session", "alice")
        assert code == 0, err
        assert "3 record(s) skipped: the projector dead-letters them" in out

        # A plain read still raises at the first one: skipping is asked for (`on_bad`), never silent.
        log = KafkaLog(kafka_bootstrap, topic_prefix=prefix)
        try:
            with pytest.raises(UnknownSchema):
                _ = [r async for r in log.read(ns, session_id="alice")]
        finally:
            await log.close()

        # rebuild: succeeds, and counts the three as skipped (the checker the projector uses).
        built = await rebuild(cfg, switch=False)
        assert (built.read, built.events, built.skipped) == (len(TURNS) + 3, len(TURNS), 3)

        # forget, from the command line: erases the session, counts the skipped records.
        code, out, err = await cli("forget", "--config", str(path), "--session", "alice", "--yes", "--json")
        assert code == 0, err
        result = json.loads(out)
        assert result["skipped"] == 3 and result["events"] == len(TURNS) and result["messages"] == len(TURNS)
        assert result["erased_keys"] and result["unshreddable"] == 0 and not result["already_erased"]
        code, out, err = await cli("forget", "--config", str(path), "--session", "alice", "--yes")
        assert code == 0, err
        assert "already erased" in out and "skipped 3 record(s)" in out

        async def emptied() -> bool:
            async with open_memory(plain(cfg), session_id="alice") as mem:
                return await mem.get() == []

        await wait_for(emptied, 60, "the projector to fold the erasure")
        after = await audit(cfg, session_id="alice")
        assert after.erasure is not None and len(after.skipped) == 3
    finally:
        project.send_signal(signal.SIGTERM)
        _, err = project.communicate(timeout=60)
    assert project.returncode == 0, err
    assert err.count("cannot be used") == 3  # the projector parked the same three


async def test_embedded_log_skips_well_framed_records_the_checker_refuses(
    tmp_path: Path, redis_url: str, file_keys: None
) -> None:
    """The embedded log has no keys, so no key can disagree with its session; the other rules apply.

    A damaged frame stays a `LogCorrupted` matter (the file's integrity), never a dead letter."""
    ns, prefix = unique("badfile"), unique("badfile")  # a prefix of its own: its own aliases in Redis
    cfg: dict[str, Any] = {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False, "topic_prefix": prefix},
        "memory": {"type": "conversation", "namespace": ns, "read_timeout": 30},
        "memory_middleware": ["encryption"],
    }
    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(cfg))
    poison = [
        forged("someone-else", "alice"),  # an envelope naming another namespace
        b"\x00not avro at all",  # whole frame, checksum right, but no schema decodes it
        forged(ns, "alice", role="robot"),  # decodes, fails validation
    ]
    bad: list[int] = []
    async with open_memory(cfg, session_id="alice") as alice:
        for i, text in enumerate(TURNS):
            await alice.add(Message("user" if i % 2 == 0 else "assistant", text))
            if i < len(poison):  # through the log's own append of raw bytes: framed like any event
                log = EmbeddedLog(tmp_path / "log", fsync=False, topic_prefix=prefix)
                bad.append(log._file(ns).append(poison[i]))
                await log.close()
    async with open_memory(plain(cfg), session_id="alice") as stored:  # a fresh backend folds the file
        projected = await stored.get()
    assert len(projected) == len(TURNS)

    report = await audit(cfg, session_id="alice", as_of="now", raw=True)  # as stored
    assert len(report.events) == len(TURNS) and [s.position.offset for s in report.skipped] == bad
    assert report.views == {"conversation": projected}
    code, out, err = await cli("audit", "--config", str(path), "--session", "alice", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["skipped"] == 3 and spots(doc) == [(0, b) for b in bad]

    async with open_memory(plain(cfg), session_id="alice") as stored:  # memory views rebuild where they serve
        built = await rebuild(plain(cfg))
        assert (built.read, built.events, built.skipped) == (len(TURNS) + 3, len(TURNS), 3)
        assert built.switched and await stored.get() == projected
    # The same log rebuilt into Redis: read by the replay reader, with the same checker.
    in_redis = plain(cfg)
    in_redis["memory"] = {**cfg["memory"], "store": "redis", "redis_url": redis_url}
    built = await rebuild(in_redis, switch=False)
    assert (built.read, built.events, built.skipped) == (len(TURNS) + 3, len(TURNS), 3)

    code, out, err = await cli("forget", "--config", str(path), "--session", "alice", "--yes")
    assert code == 0, err
    assert "forgot" in out and "skipped 3 record(s)" in out
    async with open_memory(plain(cfg), session_id="alice") as stored:
        assert await stored.get() == []

    # A damaged frame in the middle is the file's integrity, not a dead letter: still refused.
    file = tmp_path / "log" / f"{names.topic(ns, prefix)}.log"
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    file.write_bytes(bytes(data))
    with pytest.raises(LogCorrupted):
        await audit(cfg, session_id="alice")


def test_the_checker_is_one_and_the_projector_uses_it() -> None:
    assert runner.Checker is Checker and pump.Checker is Checker


def test_a_session_read_judges_exactly_the_records_its_audit_lists() -> None:
    """Which refused records a session's read reports (`concerns`) and which its audit keeps (`claims`) agree."""
    mine, other = forged("ns", "alice"), forged("ns", "bob")
    garbage = b"\x00not avro at all"
    cases = {
        (b"alice", garbage): True,  # keyed by it
        (b"mallory", mine): True,  # its envelope names it
        (b"alice", other): True,  # keyed by it, the envelope says otherwise
        (b"mallory", other): False,
        (b"mallory", garbage): False,  # keyed by someone else, nothing else readable
        (None, garbage): True,  # nothing names anyone: every session's audit shows it
        (None, other): False,
    }
    at = Position("helix.memory.ns", 0, 7)
    for (key, value), expected in cases.items():
        assert concerns(b"alice", key, value) is expected, (key, value)
        assert skipped(at, InvalidInput("x", "y"), value, key).claims("alice") is expected, (key, value)

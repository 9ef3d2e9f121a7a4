"""Security at rest: with the encryption middleware, no store holds a marked message's plaintext;
after `forget`, no path reads a forgotten session back.

test_encryption.py checks the Kafka record values and the one view key or table each write lands
in; test_erasure.py checks forget's key stores, folds and get/search through Kafka. Here the scan
is exhaustive, and every view type projects the same writes:

- Kafka: key, value and headers of every record of every topic under the test's prefix (the
  namespace topic with its derived SummaryRecorded events, dead letters if any);
- Redis: every key of the database (its name, and its value read by type: string, list, hash,
  set, sorted set, stream), the key store's keys included;
- PostgreSQL: every text, varchar, char, json, jsonb and bytea column of every table of the
  public schema, other tests' rows included (the secrets are unique to this run);
- the embedded log, its JSON export and the key directory, byte for byte.

Each scan also finds something it must find (the envelope prefix, a tool name kept in clear), so
an empty scan cannot pass for a clean one. After `forget`: get and search, audit (now and at a
cut before the erasure), a rebuild of the view from the whole log, and raw decryption of the
records on the topic with a fresh key provider, the master's derived keys, and another session's key.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from helix_es import Message, ToolCall, audit, forget, open_memory
from helix_es.client.encryption import (
    PREFIX,
    DecryptionError,
    DerivedSessionKeys,
    EncryptedMemory,
    KeyErased,
    KeyNotFound,
    KeyRing,
    NamespaceKeys,
    envelope_key_ids,
)
from helix_es.client.keys import StoredSessionKeys
from helix_es.client.runtime import default_runtime
from helix_es.log.kafka import KafkaLog
from helix_es.model.events import MessageAdded, SessionErased, SummaryRecorded
from helix_es.stores.redis.keys import RedisKeyStore
from projectors.lag import lag
from projectors.rebuild import rebuild
from tests.conftest import Deadline, start_projector, unique

H = uuid.uuid4().hex[:8]  # the secrets are this run's own: finding one anywhere is a leak
ALICE_SECRETS = [f"NO93-8601-{H}", f"hunter2-pw-{H}", f"Ünïcødé-Straße-{H}", f"1 Main St {H}"]
BOB_SECRET = f"green-tea-{H}"
SECRETS = [*ALICE_SECRETS, BOB_SECRET]
TOOL = f"iban_lookup_{H}"  # tool names stay clear: each scan must find it
ALICE = [
    Message("system", f"You guard {ALICE_SECRETS[3]}."),
    Message(
        "user", f"my password is {ALICE_SECRETS[1]}, iban {ALICE_SECRETS[0]}", name="alice", metadata={"lang": "en"}
    ),
    Message(
        "assistant",
        "",
        tool_calls=[
            ToolCall(
                "call-1", TOOL, json.dumps({"iban": ALICE_SECRETS[0], "city": ALICE_SECRETS[2]}, ensure_ascii=False)
            )
        ],
    ),
    Message("tool", json.dumps({"owner": ALICE_SECRETS[2], "ok": True}, ensure_ascii=False), tool_call_id="call-1"),
    Message("assistant", f"Done: {ALICE_SECRETS[0]} belongs to {ALICE_SECRETS[2]}. Anything else?"),
]
BOB = [Message("user", f"Bob here, I like {BOB_SECRET}"), Message("assistant", f"Noted: {BOB_SECRET}.")]


def forms(secret: str) -> list[str]:
    """The ways text can sit in bytes: as is, JSON-escaped (\\u00dc), and either one lower-cased (below)."""
    return sorted({secret, json.dumps(secret)[1:-1]})


def leaks(raw: bytes) -> list[str]:
    low = raw.lower()
    return [s for s in SECRETS if any(f.encode() in raw or f.encode().lower() in low for f in forms(s))]


def assert_sealed(raw: bytes, where: str, *, clear: str = TOOL) -> None:
    assert not leaks(raw), f"{where} holds plaintext: {leaks(raw)}"
    assert PREFIX.encode() in raw and clear.encode() in raw, f"{where}: the scan did not see this test's data"


# --- raw readers, as an attacker with access to each store would read it -------------------------------


async def kafka_bytes(bootstrap: str, prefix: str) -> tuple[bytes, int]:
    """Every record (key, value, headers) of every topic whose name starts with `prefix`."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    chunks: list[bytes] = []
    count = 0
    try:
        topics = [t for t in await admin.list_topics() if t.startswith(prefix)]
        tps = [
            TopicPartition(d["topic"], p["partition"])
            for d in await admin.describe_topics(topics)
            for p in d["partitions"]
        ]
        ends = await consumer.end_offsets(tps)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = Deadline(120, f"every record of {len(tps)} partitions")
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            deadline.check(f"read {count} records")
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                for r in records:
                    count += 1
                    chunks += [r.topic.encode(), r.key or b"", r.value or b""]
                    chunks += [k.encode() + b"=" + v for k, v in r.headers]
    finally:
        await consumer.stop()
        await admin.close()
    return b"\n".join(chunks), count


async def redis_bytes(url: str) -> bytes:
    """Every key of the database and its value, read by type (DUMP would compress long strings).
    Pipelined a thousand keys at a time: a shared development Redis may hold 100,000 keys."""
    r = aioredis.from_url(url)
    chunks: list[bytes] = []
    readers = {
        "string": lambda p, k: p.get(k),
        "list": lambda p, k: p.lrange(k, 0, -1),
        "hash": lambda p, k: p.hgetall(k),
        "set": lambda p, k: p.smembers(k),
        "zset": lambda p, k: p.zrange(k, 0, -1),
        "stream": lambda p, k: p.xrange(k),
    }
    try:
        batch: list[bytes] = []
        keys = [key async for key in r.scan_iter(count=1000)]
        for start in range(0, len(keys), 1000):
            batch = keys[start : start + 1000]
            async with r.pipeline(transaction=False) as pipe:
                for key in batch:
                    pipe.type(key)
                kinds = [k.decode() for k in await pipe.execute()]
            async with r.pipeline(transaction=False) as pipe:
                for key, kind in zip(batch, kinds, strict=True):
                    if kind in readers:
                        readers[kind](pipe, key)
                    elif kind != "none":  # "none": expired meanwhile
                        pipe.dump(key)  # a module's type: its serialised form
                values = iter(await pipe.execute())
            for key, kind in zip(batch, kinds, strict=True):
                chunks.append(key)
                if kind == "none":
                    continue
                value = next(values)
                if kind == "hash":
                    chunks += [k + b"=" + v for k, v in value.items()]
                elif kind == "stream":
                    chunks += [k + b"=" + v for _, fields in value for k, v in fields.items()]
                elif kind in ("list", "set", "zset"):
                    chunks += list(value)
                else:
                    chunks.append(value or b"")
    finally:
        await r.aclose()
    return b"\n".join(chunks)


TEXT_TYPES = ("text", "character varying", "character", "json", "jsonb", "name", "bytea")


async def postgres_leaks(dsn: str, namespace: str) -> tuple[dict[str, list[str]], dict[str, int]]:
    """Per table of the public schema, the secrets any text-like or bytea column holds (one scan per table);
    and, per view table, the rows of `namespace` holding ciphertext (the positive control)."""
    needles: list[str] = []  # $1..$n as text; $n+1..$2n the same as bytes
    by_secret: dict[str, list[int]] = {}
    for secret in SECRETS:
        for form in sorted({f2 for f in forms(secret) for f2 in (f, f.lower())}):
            by_secret.setdefault(secret, []).append(len(needles) + 1)
            needles.append(form)
    n = len(needles)
    conn = await asyncpg.connect(dsn)
    found: dict[str, list[str]] = {}
    try:
        columns = await conn.fetch(
            "SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c "
            "JOIN information_schema.tables t ON (t.table_schema, t.table_name) = (c.table_schema, c.table_name) "
            "WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE' AND c.data_type = ANY($1) "
            "ORDER BY 1, 2",
            list(TEXT_TYPES),
        )
        tables: dict[str, list[tuple[str, str]]] = {}
        for c in columns:
            tables.setdefault(c["table_name"], []).append((c["column_name"], c["data_type"]))
        for table, cols in tables.items():
            texts = [c for c, kind in cols if kind != "bytea"]
            raws = [c for c, kind in cols if kind == "bytea"]
            shift = n if texts else 0  # only parameters the query uses: $1..$n text, then bytes

            def hit(i: int, texts: list[str] = texts, raws: list[str] = raws, shift: int = shift) -> str:
                return " OR ".join(
                    [f'strpos("{c}"::text, ${i}) > 0 OR strpos(lower("{c}"::text), ${i}) > 0' for c in texts]
                    + [f'position(${shift + i}::bytea IN "{c}") > 0' for c in raws]
                )

            picks = ", ".join(
                f"coalesce(bool_or({' OR '.join(f'({hit(i)})' for i in ids)}), false)" for ids in by_secret.values()
            )
            args = [*(needles if texts else ()), *((x.encode() for x in needles) if raws else ())]
            row = await conn.fetchrow(f'SELECT {picks} FROM "{table}"', *args)
            assert row is not None
            leaked = [secret for secret, flag in zip(by_secret, row, strict=True) if flag]
            if leaked:
                found[table] = leaked
        sealed = {
            table: await conn.fetchval(
                f"SELECT count(*) FROM {table} WHERE namespace = $1 AND strpos(message::text, $2) > 0",
                namespace,
                PREFIX,
            )
            for table in ("helix_view_messages", "agent_memory", "helix_vectors", "helix_summary")
        }
    finally:
        await conn.close()
    return found, sealed


def file_bytes(root: Path) -> bytes:
    return b"\n".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


# --- fixtures --------------------------------------------------------------------------------------------


@pytest.fixture
def master(monkeypatch: pytest.MonkeyPatch) -> bytes:
    key = os.urandom(32)
    monkeypatch.setenv("HELIX_ENCRYPTION_KEY", base64.b64encode(key).decode())
    monkeypatch.delenv("HELIX_ENCRYPTION_OLD_KEYS", raising=False)
    monkeypatch.setenv("HELIX_KEY_CACHE_TTL", "0")  # every memory sees a forget at once
    return key


@pytest.fixture
async def shared_keys() -> AsyncIterator[None]:
    yield
    await default_runtime().aclose()


async def caught_up(config_path: Path, timeout: float = 90.0) -> None:
    """Every view of the projector config has applied the whole log (twice in a row: summaries append)."""
    deadline = asyncio.get_running_loop().time() + timeout
    zero = 0
    while zero < 2:
        report = await lag(str(config_path))
        zero = zero + 1 if report.total() == 0 and report.partitions else 0
        assert not report.dead_letters, report.dead_letters
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"views still behind after {timeout}s: {report.partitions}")
        await asyncio.sleep(0.3)


def contents(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


# --- Kafka, Redis and PostgreSQL ---------------------------------------------------------------------------


async def test_no_plaintext_in_any_store_and_a_forgotten_session_cannot_be_read_back(
    tmp_path: Path,
    master: bytes,
    shared_keys: None,
    monkeypatch: pytest.MonkeyPatch,
    kafka_bootstrap: str,
    redis_url: str,
    postgres_dsn: str,
    procs: list[subprocess.Popen[str]],
) -> None:
    monkeypatch.setenv("HELIX_KEY_STORE", "redis")  # its keys are scanned with the rest of Redis
    monkeypatch.setenv("HELIX_KEY_STORE_URL", redis_url)
    ns, prefix = unique("sec"), unique("sec")
    log = {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 2, "topic_prefix": prefix}
    redis_store = {"store": "redis", "redis_url": redis_url}
    pg_store = {"store": "postgres", "dsn": postgres_dsn}
    # The agent reads the conversation; every other view of the seed folds the same events.
    client = {
        "log": log,
        "memory_middleware": ["encryption"],
        "memory": {"type": "conversation", "namespace": ns, "read_timeout": 60, **redis_store},
    }
    projected = {
        "log": log,
        "memory": {
            "type": "composite",
            "namespace": ns,
            "backends": [
                {"type": "conversation", **redis_store},
                {"type": "sliding-window", "window_size": 3, **redis_store},
                {"type": "token-window", "max_tokens": 2000, **redis_store},
                {"type": "smart", "max_tokens": 2000, **redis_store},
                {"type": "long-term", **redis_store},
                {"type": "summary", "max_messages": 2, **pg_store},
                {"type": "sliding-window", "window_size": 4, **pg_store},
                {"type": "long-term", **pg_store},
                {"type": "vector", "top_k": 5, **pg_store},
            ],
        },
    }
    projected_path = tmp_path / "projected.yaml"
    projected_path.write_text(json.dumps(projected))
    procs.append(start_projector(projected, tmp_path))

    async with open_memory(client, session_id="alice") as alice, open_memory(client, session_id="bob") as bob:
        for m in ALICE:
            await alice.add(m)
        for m in BOB:
            await bob.add(m)
        assert await alice.get() == ALICE and await bob.get() == BOB
        assert contents(await alice.search(ALICE_SECRETS[2].upper())) == contents(ALICE[3:])
    await caught_up(projected_path)

    kafka_raw, records = await kafka_bytes(kafka_bootstrap, prefix)
    assert records > len(ALICE) + len(BOB)  # and the summaries the summary view recorded
    assert_sealed(kafka_raw, "Kafka")
    assert_sealed(await redis_bytes(redis_url), "Redis")
    found, sealed = await postgres_leaks(postgres_dsn, ns)
    assert not found, f"PostgreSQL holds plaintext: {found}"
    assert all(sealed.values()), f"the scan did not see this test's rows: {sealed}"

    # --- forget alice ---
    result = await forget(client, session_id="alice", reason="erasure request 17")
    assert result.erased_keys and result.unshreddable == 0
    await caught_up(projected_path)

    # get and search, through the middleware, with a fresh provider (the key cache is off)
    async with open_memory(client, session_id="alice") as alice, open_memory(client, session_id="bob") as bob:
        assert await alice.get() == [] and await alice.search(ALICE_SECRETS[0]) == []
        assert await bob.get() == BOB

    # audit: now, and at a cut before the erasure; contents show as the log stores them, or as erased
    now = await audit(client, session_id="alice", as_of="now")
    assert now.erasure is not None and now.views == {"conversation": []}
    last_message = max(e.position.offset for e in now.events if e.type == "MessageAdded")
    before = await audit(client, session_id="alice", offset=last_message)
    assert before.views is not None
    for report in (now, before):
        doc = json.dumps(report.to_json(), ensure_ascii=False).encode()
        assert not leaks(doc), f"the audit shows {leaks(doc)}"
        assert all(e.erased for e in report.events if e.type == "MessageAdded")

    # rebuild the view from the whole log into a new target; readers switch to it
    report = await rebuild(projected, view="conversation", handover=5)
    assert report.switched and report.target == "conversation@v2"
    async with open_memory(client, session_id="alice") as alice, open_memory(client, session_id="bob") as bob:
        assert await alice.get() == [] and await bob.get() == BOB
    assert not leaks(await redis_bytes(redis_url)), "the rebuilt view holds plaintext"

    # raw: the records are still on the topic, sealed with a key nobody has any more
    kafka = KafkaLog(kafka_bootstrap, topic_prefix=prefix)
    try:
        records_of_alice = [r async for r in kafka.read(ns, session_id="alice")]
    finally:
        await kafka.close()
    assert isinstance(records_of_alice[-1].event.payload, SessionErased)
    assert any(isinstance(r.event.payload, SummaryRecorded) for r in records_of_alice)  # was on the scanned topic
    sealed_messages = [r.event.payload.message for r in records_of_alice if isinstance(r.event.payload, MessageAdded)]
    assert len(sealed_messages) == len(ALICE)
    fresh = StoredSessionKeys(RedisKeyStore(redis_url), KeyRing.of(master), cache_ttl=0)
    try:
        await fresh.prepare(ns, "bob")
        bob_key = fresh.current_key(ns, "bob")[1]
        for message in sealed_messages:
            (key_id,) = envelope_key_ids(message)
            await fresh.prepare(ns, "alice", key_ids={key_id})
            attempts: list[tuple[Any, type[Exception]]] = [
                (fresh, KeyErased),  # a new process with the master and the key store
                (DerivedSessionKeys(master), KeyNotFound),  # the master's own derived keys
                (NamespaceKeys({ns: KeyRing({key_id: bob_key}, key_id)}), DecryptionError),  # bob's key, alice's id
            ]
            for keys, error in attempts:
                with pytest.raises(error):
                    EncryptedMemory(object(), keys, namespace=ns, session_id="alice").decrypt(message)  # type: ignore[arg-type]
    finally:
        await fresh.close()

    # and a last full scan: nothing of alice (or bob) came back anywhere
    kafka_raw, _ = await kafka_bytes(kafka_bootstrap, prefix)
    assert_sealed(kafka_raw, "Kafka, after forget")
    assert not leaks(await redis_bytes(redis_url))
    found, _ = await postgres_leaks(postgres_dsn, ns)
    assert not found, f"PostgreSQL holds plaintext after forget: {found}"


# --- the embedded log, with the file store and a file key store --------------------------------------------


async def test_embedded_log_export_and_key_files_hold_no_plaintext_and_forget_reaches_them(
    tmp_path: Path, master: bytes, shared_keys: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HELIX_KEY_STORE", "file")
    monkeypatch.setenv("HELIX_KEY_STORE_URL", str(tmp_path / "keys"))
    ns = unique("sec")
    cfg = {
        "memory_middleware": ["encryption"],  # store: file keeps its embedded log in export/log
        "memory": {
            "type": "conversation",
            "namespace": ns,
            "store": "file",
            "file_path": str(tmp_path / "export" / "{session_id}.json"),
        },
    }
    async with open_memory(cfg, session_id="alice") as alice, open_memory(cfg, session_id="bob") as bob:
        for m in ALICE:
            await alice.add(m)
        for m in BOB:
            await bob.add(m)
        assert await alice.get() == ALICE and await bob.get() == BOB
    assert {p.name for p in (tmp_path / "export").glob("*.json")} == {"alice.json", "bob.json"}
    assert list((tmp_path / "export" / "log").glob("*.log")) and list((tmp_path / "keys").rglob("*.json"))
    assert_sealed(file_bytes(tmp_path), "the embedded log, exports and key files")

    await forget(cfg, session_id="alice")
    async with open_memory(cfg, session_id="alice") as alice, open_memory(cfg, session_id="bob") as bob:
        assert await alice.get() == [] and await alice.search(ALICE_SECRETS[1]) == []
        assert await bob.get() == BOB
    assert json.loads((tmp_path / "export" / "alice.json").read_text())["messages"] == []
    report = await audit(cfg, session_id="alice", as_of="now")
    assert report.erasure is not None and not leaks(json.dumps(report.to_json(), ensure_ascii=False).encode())
    assert_sealed(file_bytes(tmp_path), "the embedded log, exports and key files after forget")

"""Erasure by crypto-shredding: `forget` destroys a session's data keys and every view drops it.

The log keeps every event (it is append-only); what changes is that nobody can open the
forgotten session's content any more. Real services from tests/conftest.py, never mocked.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import asyncpg
import pytest
import redis.asyncio as aioredis

import helix_es
from helix_es import Message, ToolCall, open_memory
from helix_es.client.encryption import (
    DerivedSessionKeys,
    EncryptedMemory,
    KeyErased,
    KeyNotFound,
    KeyRing,
    encryption_middleware,
    envelope_key_ids,
)
from helix_es.client.keys import StoredSessionKeys, shreddable
from helix_es.history.erasure import NotShreddable, erased_by, erasure_of, forget, is_erased
from helix_es.log.codec import Codec, load_schemas
from helix_es.log.embedded import EmbeddedLog
from helix_es.log.kafka import KafkaLog
from helix_es.model import names
from helix_es.model.events import (
    Event,
    ExtractedFact,
    FactAsserted,
    FactRetracted,
    FactsExtracted,
    FactsMerged,
    MemoryCleared,
    MessageAdded,
    Position,
    Record,
    SessionErased,
    SourceTurn,
    SummaryRecorded,
)
from helix_es.projection.long_term import LongTermRows
from helix_es.projection.protocol import Projection
from helix_es.projection.vector import VectorProjection
from helix_es.providers.embed import HashEmbedder
from helix_es.stores.file.keys import FileKeyStore
from helix_es.stores.memory.vector import MemoryVectorStore
from helix_es.stores.ports import KeyStore, SessionKey
from helix_es.stores.postgres.keys import PostgresKeyStore
from helix_es.stores.postgres.rows import PostgresRows
from helix_es.stores.postgres.vector import PostgresVectorStore
from helix_es.stores.redis.keys import RedisKeyStore
from helix_es.stores.redis.rows import RedisRows
from helix_es.views.conversation import Conversation
from helix_es.views.long_term import DEFAULT_TABLE
from helix_es.views.long_term_rows import tables
from helix_es.views.sliding_window import SlidingWindow
from helix_es.views.summary import Summary, split
from tests.conftest import start_projector, stop, topic_values, unique, wait_for

ROOT = Path(__file__).resolve().parent.parent
T0 = datetime(2031, 1, 1, tzinfo=UTC)
ALICE = [
    Message("user", "I am Alice Example, born 1990-04-01, iban NO93-8601", name="alice"),
    Message("assistant", "", tool_calls=(ToolCall("c1", "lookup", '{"iban": "NO93-8601"}'),)),
    Message("tool", '{"owner": "Alice Example"}', tool_call_id="c1"),
]
BOB = [Message("user", "Bob here, likes green tea"), Message("assistant", "Noted, Bob: green tea.")]


def contents(messages: list[Message] | None) -> list[str]:
    assert messages is not None
    return [m.content for m in messages]


def use_file_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("HELIX_KEY_STORE", "file")
    monkeypatch.setenv("HELIX_KEY_STORE_URL", str(tmp_path / "keys"))
    return tmp_path / "keys"


def embedded(tmp_path: Path, ns: str, memory: dict[str, Any], *, encrypted: bool = True) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False},
        "memory": {"namespace": ns, "read_timeout": 30, **memory},
    }
    if encrypted:
        cfg["memory_middleware"] = ["encryption"]
    return cfg


async def raw_session(tmp_path: Path, ns: str, sid: str) -> list[Record]:
    log = EmbeddedLog(tmp_path / "log")
    try:
        return [r async for r in log.read(ns, session_id=sid)]
    finally:
        await log.close()


def cannot_open(keys: StoredSessionKeys | DerivedSessionKeys, ns: str, sid: str, stored: Message) -> Exception:
    """What opening a stored message raises; it must raise."""
    mem = EncryptedMemory(object(), keys, namespace=ns, session_id=sid)  # type: ignore[arg-type]
    try:
        mem.decrypt(stored)
    except KeyNotFound as exc:
        return exc
    raise AssertionError(f"{keys!r} opened a forgotten message")


# --- the wire format and the folds ------------------------------------------------------------


def test_session_erased_is_a_v3_event_and_older_types_keep_their_versions() -> None:
    codec = Codec()
    by_version = {v.version: v.fingerprint for v in load_schemas()}
    erased = Event("ns", "s", SessionErased("gdpr request 17", ("dk-0123456789abcdef",)))
    data = codec.encode(erased)
    assert data[2:10] == by_version[3]
    assert codec.decode(data) == erased
    assert codec.decode(codec.encode(Event("ns", "s", SessionErased()))).payload == SessionErased(None, ())
    assert codec.encode(Event("ns", "s", MessageAdded(Message("user", "hi"))))[2:10] == by_version[1]
    assert codec.encode(Event("ns", "s", MemoryCleared()))[2:10] == by_version[1]
    assert helix_es.SessionErased is SessionErased and helix_es.forget is forget


def test_session_views_fold_an_erasure_like_a_clear() -> None:
    msgs = [Event("ns", "s", MessageAdded(Message("user", f"m{i}"))) for i in range(4)]
    erasure = Event("ns", "s", SessionErased("asked"))
    for view in (Conversation(), SlidingWindow(2)):
        state: tuple[Message, ...] = ()
        for e in msgs:
            state = view.fold(state, e)
        assert view.fold(state, erasure) == ()
        assert contents(view.render(view.fold(view.fold(state, erasure), msgs[0]))) == ["m0"]

    summary = Summary(max_messages=2)
    state = ()
    for e in msgs:
        state = summary.fold(state, e)
    before = split(state)[0].epoch
    state = summary.fold(state, erasure)
    header, recent = split(state)
    assert (header.epoch, header.covers, header.text, recent) == (str(erasure.event_id), 0, "", ())
    assert summary.render(state) == []
    # A summary asked for before the erasure belongs to the old epoch: it stays void.
    late = Event("ns", "s", SummaryRecorded(summary.name, before, 2, "Alice said m0 and m1"))
    assert summary.fold(state, late) == state


# --- key stores ---------------------------------------------------------------------------------


@pytest.fixture(params=["file", "redis", "postgres"])
async def key_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KeyStore]:
    store: KeyStore
    if request.param == "redis":
        store = RedisKeyStore(request.getfixturevalue("redis_url"))
    elif request.param == "postgres":
        store = PostgresKeyStore(request.getfixturevalue("postgres_dsn"))
    else:
        store = FileKeyStore(tmp_path / "keys")
    yield store
    await store.close()


async def test_key_stores_keep_one_live_key_per_session_and_erase_it_for_good(
    key_store: KeyStore, master: bytes
) -> None:
    ns, sid, other = unique("ks"), unique("s"), unique("s")
    # Two processes racing to write the session's first message agree on one key.
    a = StoredSessionKeys(key_store, master, cache_ttl=0)
    b = StoredSessionKeys(key_store, master, cache_ttl=0)
    await asyncio.gather(a.prepare(ns, sid, write=True), b.prepare(ns, sid, write=True))
    key_id, key = a.current_key(ns, sid)
    assert b.current_key(ns, sid) == (key_id, key) and key_id.startswith("dk-") and len(key) == 32
    await a.prepare(ns, other, write=True)
    assert a.current_key(ns, other)[1] != key  # a random key per session

    (row,) = await key_store.rows(ns, sid)
    assert row.wrapped_key is not None and key not in row.wrapped_key and row.wrapped_by is not None
    assert key.hex() not in repr(row) and key.hex() not in repr(a)

    assert await a.erase(ns, sid) == [key_id]
    (row,) = await key_store.rows(ns, sid)
    assert row.wrapped_key is None and row.erased_at is not None  # a tombstone: the key material is gone
    with pytest.raises(KeyErased, match="destroyed"):
        a.key(ns, sid, key_id)
    await b.prepare(ns, sid, key_ids={key_id})
    with pytest.raises(KeyErased):
        b.key(ns, sid, key_id)
    with pytest.raises(KeyNotFound):
        b.current_key(ns, sid)
    assert await a.is_erased(ns, sid) and not await a.is_erased(ns, other)
    assert await a.erase(ns, sid) == []  # idempotent

    # Written to again, the session gets a new key; forgetting again destroys that one too.
    await b.prepare(ns, sid, write=True)
    new_id, new_key = b.current_key(ns, sid)
    assert new_id != key_id and new_key != key
    assert not await b.is_erased(ns, sid)
    assert await b.erase(ns, sid) == [new_id]
    assert [r.key_id for r in await key_store.rows(ns, sid)] == [key_id, new_id]
    assert a.current_key(ns, other)[0] == (await key_store.rows(ns, other))[0].key_id  # untouched

    # Only the master that wrapped a key unwraps it.
    stranger = StoredSessionKeys(key_store, os.urandom(32), cache_ttl=0)
    await stranger.prepare(ns, other)
    with pytest.raises(KeyNotFound, match="not configured"):
        stranger.key(ns, other, a.current_key(ns, other)[0])


# --- forget, embedded -----------------------------------------------------------------------------


async def test_forget_on_the_embedded_log_with_a_file_key_store(
    tmp_path: Path, key_env: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys_dir = use_file_keys(monkeypatch, tmp_path)
    ns = unique("erase")
    conv = embedded(tmp_path, ns, {"type": "conversation"})
    window = embedded(tmp_path, ns, {"type": "sliding-window", "window_size": 2})
    # A summary of sealed messages is refused (it would summarise ciphertext): this one reads them raw.
    summary = embedded(tmp_path, ns, {"type": "summary", "max_messages": 2}, encrypted=False)
    long_term = embedded(tmp_path, ns, {"type": "long-term"}, encrypted=False)  # namespace-wide: read raw
    vector = embedded(tmp_path, ns, {"type": "vector", "top_k": 10}, encrypted=False)
    async with (
        open_memory(conv, session_id="alice") as alice,
        open_memory(conv, session_id="bob") as bob,
        open_memory(window, session_id="alice") as alice_window,
        open_memory(summary, session_id="alice") as alice_summary,
        open_memory(long_term, session_id="audit") as lt,
        open_memory(vector, session_id="audit") as vec,
    ):
        for m in ALICE:
            await alice.add(m)
        for m in BOB:
            await bob.add(m)
        assert await alice.get() == ALICE and await bob.get() == BOB
        assert await alice_window.get() == ALICE[1:]
        assert len(await lt.get()) == 5 and len(await vec.search("Alice Example")) == 5  # ciphertext, all of it
        assert all(envelope_key_ids(m) for m in await lt.get())

        result = await helix_es.forget(conv, session_id="alice", reason="gdpr request 17")
        assert result.erased_keys and result.unshreddable == 0 and not result.already_erased
        assert (result.events, result.messages) == (4, 3)  # and the summary view's SummaryRecorded

        # Every view dropped alice; bob is untouched; nothing raises for the erased content.
        assert await alice.get() == [] and await alice.search("alice") == []
        assert await alice_window.get() == [] and await alice_summary.get() == []
        assert await bob.get() == BOB and contents(await bob.search("green tea")) == [m.content for m in BOB]
        long_term_left, vector_left = await lt.get(), await vec.search("Alice Example")
    bobs = [cast(MessageAdded, r.event.payload).message for r in await raw_session(tmp_path, ns, "bob")]
    assert long_term_left == bobs and sorted(contents(vector_left)) == sorted(contents(bobs))

    # The log still holds every event, sealed with a key that no longer exists anywhere.
    records = await raw_session(tmp_path, ns, "alice")
    kinds = [type(r.event.payload).__name__ for r in records]
    assert kinds == ["MessageAdded"] * 3 + ["SummaryRecorded", "SessionErased"]
    erasure = records[-1].event.payload
    assert isinstance(erasure, SessionErased) and erasure.reason == "gdpr request 17"
    assert list(erasure.key_ids) == list(result.erased_keys)
    (doc,) = [json.loads(p.read_text()) for p in keys_dir.rglob("*.json") if "alice" in p.read_text()]
    assert [k["wrapped_key"] for k in doc["keys"]] == [None]
    fresh = StoredSessionKeys(FileKeyStore(keys_dir), key_env)  # a new process, same master and store
    for r in records[:3]:
        message = cast(MessageAdded, r.event.payload).message
        assert message.content.startswith("helix-enc:v1:dk-")
        await fresh.prepare(ns, "alice", key_ids=envelope_key_ids(message))
        assert isinstance(cannot_open(fresh, ns, "alice", message), KeyErased)
        assert not isinstance(cannot_open(DerivedSessionKeys(key_env), ns, "alice", message), KeyErased)
    assert is_erased(records) and not is_erased(await raw_session(tmp_path, ns, "bob"))
    found = erasure_of(records)
    assert found is not None and found.position == records[-1].position and found.reason == "gdpr request 17"
    assert all(erased_by(r, found) for r in records[:3])

    # Idempotent: forgetting again changes nothing and appends nothing.
    again = await forget(conv, session_id="alice")
    assert again.already_erased and again.position is None and again.erased_keys == ()
    assert len(await raw_session(tmp_path, ns, "alice")) == 5

    # Views rebuilt from the log in a new backend agree; alice may start afresh with a new key.
    async with open_memory(conv, session_id="alice") as alice, open_memory(conv, session_id="bob") as bob:
        assert await alice.get() == [] and await bob.get() == BOB
        await alice.add(Message("user", "hello again"))
        assert contents(await alice.get()) == ["hello again"]
    records = await raw_session(tmp_path, ns, "alice")
    new_ids = envelope_key_ids(cast(MessageAdded, records[-1].event.payload).message)
    assert new_ids and not new_ids & set(result.erased_keys)
    second = await forget(conv, session_id="alice")
    assert set(second.erased_keys) == new_ids and second.position is not None
    async with open_memory(conv, session_id="alice") as alice:
        assert await alice.get() == []


async def test_forget_refuses_keys_it_cannot_destroy_and_plaintext(
    tmp_path: Path, key_env: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = unique("erase")
    cfg = embedded(tmp_path, ns, {"type": "conversation"})
    async with open_memory(cfg, session_id="alice") as alice:  # HELIX_KEY_STORE unset: derived keys
        await alice.add(ALICE[0])
    with pytest.raises(NotShreddable, match=r"derived from the master key.*HELIX_KEY_STORE"):
        await forget(cfg, session_id="alice")
    with pytest.raises(NotShreddable, match="DerivedSessionKeys"):
        await forget(cfg, session_id="alice", keys=DerivedSessionKeys(key_env))
    assert not shreddable(DerivedSessionKeys(key_env))
    plain = embedded(tmp_path, ns, {"type": "conversation"}, encrypted=False)
    with pytest.raises(NotShreddable, match="plaintext"):
        await forget(plain, session_id="alice")
    assert len(await raw_session(tmp_path, ns, "alice")) == 1  # nothing appended

    # Switched to a key store later: old events stay readable (derived) but cannot be shredded.
    use_file_keys(monkeypatch, tmp_path)
    async with open_memory(cfg, session_id="alice") as alice:
        await alice.add(ALICE[2])
        assert await alice.get() == [ALICE[0], ALICE[2]]
    with pytest.raises(NotShreddable, match="1 of the 2 messages"):
        await forget(cfg, session_id="alice")
    assert len(await raw_session(tmp_path, ns, "alice")) == 2
    async with open_memory(cfg, session_id="alice") as alice:
        assert await alice.get() == [ALICE[0], ALICE[2]]  # refused: nothing changed, keys intact
    result = await forget(cfg, session_id="alice", allow_unshreddable=True)
    assert (result.messages, result.unshreddable, len(result.erased_keys)) == (2, 1, 1)
    async with open_memory(cfg, session_id="alice") as alice:
        assert await alice.get() == []


async def test_forget_counts_peoples_facts_as_plaintext_and_passes_over_extracted_ones(
    tmp_path: Path, key_env: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fact a person asserted or retracted is on the log in plaintext, as a store item is: forget
    counts it as unshreddable. Extracted facts are a model's text derived from the turns, as a
    summary is: the turns' own check stands for them."""
    use_file_keys(monkeypatch, tmp_path)
    ns = unique("erase")
    cfg = embedded(tmp_path, ns, {"type": "conversation"})
    async with open_memory(cfg, session_id="alice") as alice, open_memory(cfg, session_id="bob") as bob:
        said = await alice.add(ALICE[0])
        await bob.add(BOB[0])
    log = EmbeddedLog(tmp_path / "log")
    try:
        turn = SourceTurn("e-1", said, T0)
        await log.append(
            Event(ns, "alice", FactsExtracted("facts", "rules/v1", "", (ExtractedFact("a", "b", "c"),), (turn,)))
        )
        await log.append(Event(ns, "alice", FactsMerged(("f-1", "f-2"))))
        await log.append(Event(ns, "bob", FactAsserted("bob", "likes", "green tea")))
        await log.append(Event(ns, "bob", FactRetracted("f-3", "bob", "likes", "coffee", "wrong")))
    finally:
        await log.close()

    result = await forget(cfg, session_id="alice")
    assert (result.events, result.messages, result.unshreddable) == (3, 1, 0) and not result.already_erased
    with pytest.raises(NotShreddable, match="2 of the 3 messages"):
        await forget(cfg, session_id="bob")
    result = await forget(cfg, session_id="bob", allow_unshreddable=True)
    assert (result.events, result.messages, result.unshreddable) == (3, 3, 2)


def run_cli(*args: str, stdin: int | None = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "helix_es.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ},
        stdin=stdin,
        timeout=120,
    )


async def test_cli_asks_for_yes_refuses_derived_keys_and_exits_with_its_codes(
    tmp_path: Path, key_env: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = unique("erase")
    cfg = embedded(tmp_path, ns, {"type": "conversation"})
    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(cfg))
    async with open_memory(cfg, session_id="alice") as alice:
        await alice.add(ALICE[0])
    derived = run_cli("forget", "--config", str(path), "--session", "alice", "--yes")
    assert derived.returncode == 2 and "HELIX_KEY_STORE" in derived.stderr

    use_file_keys(monkeypatch, tmp_path)
    async with open_memory(cfg, session_id="bob") as bob:
        await bob.add(BOB[0])
    not_a_tty = run_cli("forget", "--config", str(path), "--session", "bob")
    assert not_a_tty.returncode == 2 and "--yes" in not_a_tty.stderr
    bad = run_cli("forget", "--config", str(path), "--session", "b{o}b", "--yes")
    assert bad.returncode == 2 and "--session" in bad.stderr
    done = run_cli("forget", "--config", str(path), "--session", "bob", "--yes", "--json", "--reason", "ticket 9")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["erased_keys"] and out["position"]["offset"] == 2 and not out["already_erased"]
    again = run_cli("forget", "--config", str(path), "--session", "bob", "--yes")
    assert again.returncode == 0 and "already erased" in again.stdout
    (erasure,) = [r for r in await raw_session(tmp_path, ns, "bob") if isinstance(r.event.payload, SessionErased)]
    assert cast(SessionErased, erasure.event.payload).reason == "ticket 9"


# --- namespace-wide projections -------------------------------------------------------------------


def rec(ns: str, sid: str, offset: int, payload: Any, partition: int = 0) -> Record:
    at = T0 + timedelta(seconds=offset)
    return Record(Event(ns, sid, payload, timestamp=at), Position(f"helix.memory.{ns}", partition, offset))


def said(ns: str, sid: str, offset: int, text: str, partition: int = 0) -> Record:
    return rec(ns, sid, offset, MessageAdded(Message("user", text)), partition)


@pytest.fixture(params=["memory", "redis", "postgres"])
async def long_term(request: pytest.FixtureRequest) -> AsyncIterator[Projection]:
    projection: Projection
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        projection = LongTermRows(RedisRows(url, "long-term", tables(DEFAULT_TABLE)), DEFAULT_TABLE)
    elif request.param == "postgres":
        dsn = request.getfixturevalue("postgres_dsn")
        projection = LongTermRows(PostgresRows(dsn, "long-term", tables(DEFAULT_TABLE)), DEFAULT_TABLE)
    else:
        projection = LongTermRows.in_process()
    yield projection
    await projection.close()


async def test_long_term_drops_the_erased_sessions_rows_in_any_batching(long_term: Projection) -> None:
    ns = unique("lt-erase")
    key = SessionKey(ns, "any")
    history = [
        said(ns, "alice", 0, "alice one"),
        said(ns, "bob", 1, "bob one"),
        said(ns, "alice", 2, "alice two"),
        said(ns, "carol", 3, "carol on p1", partition=1),
        rec(ns, "alice", 4, SessionErased("asked")),
        said(ns, "alice", 5, "alice after"),
        said(ns, "bob", 6, "bob two"),
    ]
    p0 = [r for r in history if r.position.partition == 0]
    await long_term.apply([history[3]])
    await long_term.apply(p0[:2])  # alice one, bob one
    await long_term.apply(p0[2:])  # alice two and her erasure in one batch, then later messages
    want = ["bob one", "carol on p1", "alice after", "bob two"]
    assert contents(await long_term.get(key, p0[-1].position)) == want
    assert contents(await long_term.search(key, "alice", 10, None)) == ["alice after"]
    await long_term.apply(p0)  # re-delivered: nothing comes back
    assert contents(await long_term.get(key, None)) == want

    ns2 = unique("lt-erase")  # all at once
    again = [
        Record(
            Event(ns2, r.event.session_id, r.event.payload, timestamp=r.event.timestamp),
            Position(f"helix.memory.{ns2}", r.position.partition, r.position.offset),
        )
        for r in history
    ]
    await long_term.apply([r for r in again if r.position.partition == 0])
    await long_term.apply([r for r in again if r.position.partition == 1])
    assert contents(await long_term.get(SessionKey(ns2, "x"), None)) == want


@pytest.mark.parametrize("kind", ["memory", "postgres"])
async def test_vector_drops_the_erased_sessions_entries(request: pytest.FixtureRequest, kind: str) -> None:
    def store() -> Any:
        if kind == "postgres":
            return PostgresVectorStore(request.getfixturevalue("postgres_dsn"))
        return MemoryVectorStore()

    ns = unique("vec-erase")
    shared = store()
    writer = VectorProjection("vector-erasure-test", HashEmbedder(), shared)
    # Postgres: another process, with its own cache of the namespace's rows.
    reader = VectorProjection("vector-erasure-test", HashEmbedder(), shared if kind == "memory" else store())
    key = SessionKey(ns, "any")
    try:
        await writer.apply(
            [
                said(ns, "alice", 0, "alice likes oslo"),
                said(ns, "bob", 1, "bob likes oslo"),
                said(ns, "alice", 2, "alice flies to oslo"),
            ]
        )
        assert sorted(contents(await reader.search(key, "oslo", 10, None))) == [
            "alice flies to oslo",
            "alice likes oslo",
            "bob likes oslo",
        ]
        await writer.apply([rec(ns, "alice", 3, SessionErased()), said(ns, "alice", 4, "alice is back in oslo")])
        after = ["alice is back in oslo", "bob likes oslo"]
        assert sorted(contents(await reader.search(key, "oslo", 10, None))) == after
        assert sorted(contents(await writer.search(key, "oslo", 10, None))) == after
        # An erasure in the same batch as the messages it erases: they are never indexed.
        await writer.apply([said(ns, "dave", 5, "dave in oslo"), rec(ns, "dave", 6, SessionErased())])
        assert sorted(contents(await reader.search(key, "oslo", 10, None))) == after
        assert await writer.store.count(writer.name, ns) == 2
    finally:
        await writer.close()
        await reader.close()


# --- through Kafka, with a real projector and the CLI -------------------------------------------------


async def rows_of(dsn: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


async def test_forget_through_kafka_with_a_real_projector(
    tmp_path: Path,
    key_env: bytes,
    monkeypatch: pytest.MonkeyPatch,
    kafka_bootstrap: str,
    redis_url: str,
    postgres_dsn: str,
    procs: list[subprocess.Popen[str]],
) -> None:
    monkeypatch.setenv("HELIX_KEY_STORE", "postgres")
    monkeypatch.setenv("HELIX_KEY_STORE_URL", postgres_dsn)
    ns, prefix = unique("erase"), unique("erase")
    log = {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 2, "topic_prefix": prefix}
    client = {
        "log": log,
        "memory_middleware": ["encryption"],
        "memory": {
            "type": "conversation",
            "store": "redis",
            "redis_url": redis_url,
            "namespace": ns,
            "read_timeout": 60,
        },
    }
    projector = {
        "log": log,
        "memory": {
            "type": "composite",
            "namespace": ns,
            "backends": [
                {"type": "conversation", "store": "redis", "redis_url": redis_url},
                {"type": "long-term", "store": "postgres", "dsn": postgres_dsn},
                {"type": "vector", "store": "postgres", "dsn": postgres_dsn},
            ],
        },
    }
    client_path = tmp_path / "client.yaml"
    client_path.write_text(json.dumps(client))
    redis = aioredis.from_url(redis_url)

    async def counts(sid: str) -> tuple[int, int, int]:
        listed = await redis.llen(names.session_key(ns, sid))
        lt = await rows_of(
            postgres_dsn, "SELECT count(*) FROM agent_memory WHERE namespace = $1 AND session_id = $2", ns, sid
        )
        vec = await rows_of(
            postgres_dsn, "SELECT count(*) FROM helix_vectors WHERE namespace = $1 AND session_id = $2", ns, sid
        )
        return listed, lt[0][0], vec[0][0]

    try:
        procs.append(start_projector(projector, tmp_path))
        async with open_memory(client, session_id="alice") as alice, open_memory(client, session_id="bob") as bob:
            for m in ALICE:
                await alice.add(m)
            for m in BOB:
                await bob.add(m)
            assert await alice.get() == ALICE and await bob.get() == BOB  # waits for the projector
        await wait_for(lambda: _is(counts("alice"), (3, 3, 3)), what="alice in every view")
        await wait_for(lambda: _is(counts("bob"), (2, 2, 2)), what="bob in every view")
        stop(procs.pop())

        forgot = run_cli(
            "forget", "--config", str(client_path), "--session", "alice", "--yes", "--reason", "gdpr request 17"
        )
        assert forgot.returncode == 0, forgot.stderr
        assert "forgot" in forgot.stdout

        # The projector is down, so the views still hold alice's ciphertext: reads skip it, never raise.
        assert await counts("alice") == (3, 3, 3)
        monkeypatch.setenv("HELIX_KEY_CACHE_TTL", "0")  # a fresh provider in this process
        async with open_memory(client, session_id="alice") as alice, open_memory(client, session_id="bob") as bob:
            assert await alice.get() == [] and await alice.search("Alice") == []
            assert await bob.get() == BOB

        procs.append(start_projector(projector, tmp_path))
        await wait_for(lambda: _is(counts("alice"), (0, 0, 0)), what="alice dropped from every view")
        assert await counts("bob") == (2, 2, 2)
        async with open_memory(client, session_id="alice") as alice, open_memory(client, session_id="bob") as bob:
            assert await alice.get() == [] and await bob.get() == BOB
            assert contents(await bob.search("green")) == [m.content for m in BOB]
    finally:
        await redis.aclose()

    # The topic still holds every event: alice's sealed with a key that is gone, then her erasure.
    topic = names.topic(ns, prefix)
    values = await topic_values(kafka_bootstrap, topic, len(ALICE) + len(BOB) + 1)  # as another program reads it
    assert len(values) == len(ALICE) + len(BOB) + 1 == await count_events(kafka_bootstrap, prefix, ns)
    events = [Codec().decode(v) for v in values]
    mine = [e for e in events if e.session_id == "alice"]
    assert [type(e.payload).__name__ for e in mine] == ["MessageAdded"] * 3 + ["SessionErased"]
    erasure = cast(SessionErased, mine[-1].payload)
    key_rows = await rows_of(
        postgres_dsn,
        "SELECT session_id, key_id, wrapped_key, erased_at FROM helix_keys WHERE namespace = $1 ORDER BY session_id",
        ns,
    )
    assert [(r["session_id"], r["wrapped_key"] is None, r["erased_at"] is not None) for r in key_rows] == [
        ("alice", True, True),
        ("bob", False, False),
    ]
    assert list(erasure.key_ids) == [key_rows[0]["key_id"]] and erasure.reason == "gdpr request 17"
    fresh = StoredSessionKeys(PostgresKeyStore(postgres_dsn), KeyRing.of(key_env))
    try:
        for e in mine[:3]:
            message = cast(MessageAdded, e.payload).message
            assert b"Alice" not in json.dumps(message.to_record()).encode()
            await fresh.prepare(ns, "alice", key_ids=envelope_key_ids(message))
            assert isinstance(cannot_open(fresh, ns, "alice", message), KeyErased)
            assert not isinstance(cannot_open(DerivedSessionKeys(key_env), ns, "alice", message), KeyErased)
        # Through the middleware, with no view at all: the erased content reads as nothing.
        memory = encryption_middleware(fresh)(_Stored([cast(MessageAdded, e.payload).message for e in mine[:3]], ns))
        assert await memory.get() == []
    finally:
        await fresh.close()

    again = run_cli("forget", "--config", str(client_path), "--session", "alice", "--yes")
    assert again.returncode == 0 and "already erased" in again.stdout
    assert await count_events(kafka_bootstrap, prefix, ns) == len(values)


async def count_events(bootstrap: str, prefix: str, ns: str) -> int:
    log = KafkaLog(bootstrap, topic_prefix=prefix)
    try:
        return len([r async for r in log.read(ns)])
    finally:
        await log.close()


async def _is(value: Any, want: Any) -> bool:
    return await value == want


class _Stored:
    """A memory whose `get` returns stored (sealed) messages as a view would."""

    def __init__(self, stored: list[Message], namespace: str) -> None:
        self.stored, self.namespace, self.session_id = stored, namespace, "alice"

    async def add(self, message: Message) -> Position:
        raise AssertionError("read-only")

    async def get(self) -> list[Message]:
        return list(self.stored)

    async def search(self, query: str, limit: int = 10) -> list[Message]:
        return []

    async def clear(self) -> Position:
        raise AssertionError("read-only")


async def test_audit_shows_a_forgotten_session_as_erased(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key_env: bytes
) -> None:
    from helix_es import audit, forget

    use_file_keys(monkeypatch, tmp_path)
    ns = unique("aud-erase")
    cfg = embedded(tmp_path, ns, {"type": "conversation"})
    async with open_memory(cfg, session_id="alice") as mem:
        await mem.add(Message("user", "my address is 1 Main St"))
    await forget(cfg, session_id="alice", reason="erasure request 17")
    report = await audit(cfg, session_id="alice", as_of="now")
    assert report.erasure is not None and report.erasure.reason == "erasure request 17"
    added = [e for e in report.events if e.type == "MessageAdded"]
    assert added and all(e.erased for e in added)
    assert "content erased" in added[0].describe()
    doc = report.to_json()
    assert doc["erased"]["reason"] == "erasure request 17"
    assert "Main St" not in json.dumps(doc)
    assert report.views == {"conversation": []}

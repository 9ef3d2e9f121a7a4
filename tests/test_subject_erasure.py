"""Erasure of a person (`helix-es erase`, `POST /v1/{namespace}/erasures`): every session and view, a receipt.

The subject's own sessions are shredded (or, without a key store, dropped from every view and listed as
not shredded); messages naming the subject in other sessions and facts about it leave every view that
folds them; a check reads every view and the log after; the receipt is recorded on the log. Real
services from tests/conftest.py (embedded log, Kafka, Redis, PostgreSQL), never mocked.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from helix_es import Message, open_memory
from helix_es.client.encryption import KeyErased
from helix_es.client.runtime import Runtime
from helix_es.config import load_config
from helix_es.history.subject_erasure import erase_subject
from helix_es.history.subject_scan import Opener
from helix_es.log.embedded import EmbeddedLog
from helix_es.log.kafka import KafkaLog
from helix_es.log.port import EventLog
from helix_es.model.events import (
    Event,
    ExtractedFact,
    FactsExtracted,
    MemoryForgotten,
    MessageAdded,
    Position,
    Record,
    SessionErased,
    SourceTurn,
    SubjectErased,
)
from helix_es.model.facts import FactsAsk
from helix_es.model.message import decode_json
from helix_es.model.recall import Recall
from helix_es.projection.facts import facts_rows_of
from helix_es.projection.long_term import LongTermRows
from helix_es.projection.vector import VectorProjection
from helix_es.stores.ports import SessionKey
from helix_es.stores.ports.vector import RankAsk
from helix_es.views.base import View
from helix_es.views.facts import Facts
from helix_es.views.long_term import LongTerm
from helix_es.views.vector import Vector
from tests.conftest import cli, start_projector, stop, unique, wait_for

SUBJECT = "Caroline"
CAROLINE = {"user_id": SUBJECT}
SESSIONS: dict[str, list[Message]] = {
    "s-caro-1": [
        Message("user", "I live in Lisbon.", name="Caroline", metadata=CAROLINE),
        Message("assistant", "Lisbon is lovely."),
    ],
    "s-caro-2": [Message("user", "Book me a table for two.", metadata=CAROLINE), Message("assistant", "Friday 8pm.")],
    "s-bob": [
        Message("user", "I like green tea.", name="Bob"),
        Message("user", "I had lunch with caroline today.", name="Bob"),
        Message("assistant", "How is Caroline's new job?"),
    ],
    "s-dan": [Message("user", "We drove through Carolineville.", name="Dan"), Message("user", "I speak French.")],
}
KEPT = ["I like green tea.", "We drove through Carolineville.", "I speak French."]  # of other sessions


def embedded(tmp_path: Path, ns: str, backends: list[dict[str, Any]], *, encrypted: bool = False) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False},
        "memory": {"type": "composite", "namespace": ns, "read_timeout": 30, "backends": backends},
    }
    if encrypted:
        cfg["memory_middleware"] = ["encryption"]
    return cfg


FACTS: dict[str, Any] = {"type": "facts", "extract": {"provider": "rules"}, "batch": {"turns": 1, "idle": 0}}
EVERY_VIEW: list[dict[str, Any]] = [{"type": "conversation"}, {"type": "long-term"}, {"type": "vector"}, FACTS]


async def write(cfg: dict[str, Any], sessions: dict[str, list[Message]]) -> dict[str, list[Position]]:
    """Each session's messages, added through the config's memory; their positions."""
    written: dict[str, list[Position]] = {}
    for sid, messages in sessions.items():
        async with open_memory(cfg, session_id=sid) as mem:
            written[sid] = [await mem.add(m) for m in messages]
    return written


async def records(tmp_path: Path, ns: str) -> list[Record]:
    log = EmbeddedLog(tmp_path / "log", fsync=False)
    try:
        return [r async for r in log.read(ns, on_bad=lambda bad: None)]
    finally:
        await log.close()


async def views(cfg: dict[str, Any], ns: str, sessions: list[str]) -> dict[str, Any]:
    """Every view of the config as its store holds it now, messages opened (a destroyed key: `<erased>`)."""
    config = load_config(cfg)
    out: dict[str, Any] = {}
    async with Runtime() as runtime, runtime.backend(config.log) as backend:
        opener = Opener(ns, runtime.keys() if "encryption" in config.middleware else None)

        async def texts(sid: str, messages: list[Message]) -> list[str]:
            opened = await opener.session(sid, messages)
            found = []
            for m in messages:
                try:
                    found.append(opened(m).content)
                except KeyErased:
                    found.append("<erased>")
            return found

        for part in config.memory.parts:
            projection = await backend.attach(part, ns)
            await backend.current(projection, ns)
            view: Any = part.view
            inner: Any = getattr(projection, "current", projection)
            inner = getattr(inner, "inner", inner)
            if isinstance(view, View):
                got = {}
                for sid in sessions:
                    got[sid] = await texts(sid, await projection.get(SessionKey(ns, sid), None) or [])
                out[view.name] = got
            elif isinstance(view, LongTerm):
                assert isinstance(inner, LongTermRows)
                held = [(r["session_id"], decode_json(r["message"])) for r in await inner.rows(ns)]
                out[view.name] = sorted([(sid, (await texts(sid, [m]))[0]) for sid, m in held])
            elif isinstance(view, Vector):
                assert isinstance(inner, VectorProjection)
                n = max(await inner.store.count(inner.name, ns), 1)
                ranking = await inner.store.rank(inner.name, ns, RankAsk(Recall(" ", n), n, substring=""), None)
                assert ranking is not None
                held = [(f.session_id, f.message) for f in ranking.found.values()]
                out[view.name] = sorted([(sid, (await texts(sid, [m]))[0]) for sid, m in held])
            elif isinstance(view, Facts):
                facts = facts_rows_of(projection)
                assert facts is not None
                known = await facts.facts(ns, FactsAsk(history=True)) or []
                out[view.name] = sorted((f.subject, f.predicate, f.value, f.session_id) for f in known)
    return out


def texts_of(rows: list[tuple[str, str]]) -> list[str]:
    return sorted(text for _, text in rows)


# --- embedded, without encryption ----------------------------------------------------------------------


async def test_a_dry_run_writes_nothing_then_the_subject_leaves_every_view_with_a_receipt(tmp_path: Path) -> None:
    ns = unique("erase-subj")
    cfg = embedded(tmp_path, ns, EVERY_VIEW)
    written = await write(cfg, SESSIONS)
    async with open_memory(cfg, session_id="facts") as mem:
        await mem.extract_now()  # type: ignore[attr-defined]
        await mem.assert_fact("caroline", "works_at", "Globex")  # type: ignore[attr-defined]
        await mem.assert_fact("Bob", "knows", "Caroline")  # type: ignore[attr-defined]  # its value names her
        await mem.assert_fact("Dan", "lives_in", "Oslo")  # type: ignore[attr-defined]
    before = await views(cfg, ns, list(SESSIONS))
    assert ("Caroline", "lives_in", "Lisbon", "s-caro-1") in before["facts"]
    count = len(await records(tmp_path, ns))

    dry = await erase_subject(cfg, subject=SUBJECT, dry_run=True)
    assert len(await records(tmp_path, ns)) == count  # nothing written
    assert await views(cfg, ns, list(SESSIONS)) == before
    d = dry.to_json()
    assert d["dry_run"] and d["verification"] is None and dry.passed
    assert d["sessions"] == d["erased"] == ["s-caro-1", "s-caro-2"]
    bob = [p.offset for p in written["s-bob"]]
    assert d["messages"] == {"s-bob": bob[1:]}  # "carolineville" is not her name
    assert len(d["facts"]) == 3  # extracted in her session, asserted about her, a value naming her

    receipt = (await erase_subject(cfg, subject=SUBJECT)).to_json()
    after = await views(cfg, ns, list(SESSIONS))
    assert after["conversation"]["s-caro-1"] == after["conversation"]["s-caro-2"] == []
    # Bob's conversation keeps what he said but the messages naming her (named by their text).
    assert after["conversation"]["s-bob"] == [SESSIONS["s-bob"][0].content]
    assert texts_of(after["long-term"]) == texts_of(after["vector-hash-384"]) == sorted(KEPT)
    assert [f[:3] for f in after["facts"]] == [
        ("Bob", "likes", "green tea"),
        ("Dan", "lives_in", "Oslo"),
        ("user", "speaks", "French"),
    ]
    assert receipt["subject"] == SUBJECT and receipt["request"].startswith("er-") and not receipt["dry_run"]
    assert receipt["sessions"] == receipt["erased"] == receipt["not_shredded"] == ["s-caro-1", "s-caro-2"]
    assert receipt["shredded"] == [] and receipt["key_ids"] == [] and receipt["undecodable"] == []
    assert receipt["messages"] == {"s-bob": bob[1:]} and receipt["facts"] == d["facts"]
    assert receipt["log"].startswith("plaintext kept: encryption off")
    assert receipt["events"] == {"SessionErased": 2, "MemoryForgotten": 2}
    assert set(receipt["views"]) == {"conversation", "long-term", "vector-hash-384", "facts"}
    assert receipt["views"]["long-term"]["messages"] == 2 and receipt["views"]["facts"]["ids"] == d["facts"]
    assert receipt["views"]["conversation"]["messages"] == 2  # by their text: a session view keeps no positions
    check = receipt["verification"]
    assert check["passed"] and check["failures"] == [] and check["scanned"]["log"]["checked"] is False
    assert check["scanned"]["conversation"]["naming"] == 0 and check["scanned"]["long-term"]["naming"] == 0

    # On the log: the erasures, the forgettings after the messages they name, then the receipt.
    log = await records(tmp_path, ns)
    mine = [r for r in log if r.event.session_id == f"erasure:{receipt['request']}"]
    assert [type(r.event.payload) for r in mine] == [MemoryForgotten, SubjectErased]
    forgot = mine[0].event.payload
    assert isinstance(forgot, MemoryForgotten) and forgot.policy == "erasure" and forgot.views == ("facts",)
    recorded = mine[-1].event.payload
    assert isinstance(recorded, SubjectErased) and (recorded.subject, recorded.request) == (SUBJECT, receipt["request"])
    assert json.loads(recorded.receipt)["sessions"] == receipt["sessions"]
    (named,) = [
        r.event.payload for r in log if r.event.session_id == "s-bob" and isinstance(r.event.payload, MemoryForgotten)
    ]
    assert isinstance(named, MemoryForgotten) and list(named.offsets) == bob[1:] and named.reason == receipt["request"]
    assert set(named.views) == set(receipt["views"])
    assert sum(isinstance(r.event.payload, SessionErased) for r in log) == 2

    # Idempotent: nothing more goes, only the new receipt is recorded; the check still passes.
    again = (await erase_subject(cfg, subject=SUBJECT)).to_json()
    assert len(await records(tmp_path, ns)) == len(log) + 1
    assert again["sessions"] == receipt["sessions"] and again["erased"] == [] and again["messages"] == {}
    assert again["facts"] == [] and again["events"] == {"SessionErased": 0, "MemoryForgotten": 0}
    assert again["verification"]["passed"] and again["request"] != receipt["request"]
    assert await views(cfg, ns, list(SESSIONS)) == after


async def test_summaries_naming_the_subject_leave_with_the_messages_they_stand_for(tmp_path: Path) -> None:
    """A compaction's summary in a conversation and a summary view's running summary, written before the
    erasure from messages naming her, name her too: the erasure takes them out by their text, and the
    check (which reads what each view shows) passes."""
    ns = unique("erase-sum")
    cfg = embedded(tmp_path, ns, [{"type": "conversation"}, {"type": "summary", "max_messages": 4}])
    bob = [*SESSIONS["s-bob"], *(Message("user", f"Then errand {i}.") for i in range(4))]
    await write(cfg, {"s-bob": bob})
    async with open_memory(cfg, session_id="s-bob") as mem:
        await mem.compact(keep=2)  # type: ignore[attr-defined]
    before = await views(cfg, ns, ["s-bob"])
    assert all(any("caroline" in t.casefold() for t in texts["s-bob"]) for texts in before.values())
    assert any(t.startswith("Summary of the earlier conversation") for t in before["summary-4-pairs"]["s-bob"])

    receipt = (await erase_subject(cfg, subject=SUBJECT)).to_json()
    assert receipt["verification"]["passed"], receipt["verification"]["failures"]
    after = await views(cfg, ns, ["s-bob"])  # a fresh runtime: every view folded again from the log
    for texts in after.values():
        assert not any("caroline" in t.casefold() for t in texts["s-bob"])
    assert after["conversation"]["s-bob"] == [f"Then errand {i}." for i in (2, 3)]  # the summary went
    assert after["summary-4-pairs"]["s-bob"] == [m.content for m in bob[-len(after["summary-4-pairs"]["s-bob"]) :]]


async def test_the_cli_prints_the_receipt_and_exits_with_its_codes(tmp_path: Path) -> None:
    ns = unique("erase-cli")
    cfg = embedded(tmp_path, ns, [{"type": "sliding-window", "window_size": 10}, {"type": "long-term"}])
    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(cfg))
    await write(cfg, {k: SESSIONS[k] for k in ("s-caro-1", "s-bob")})
    count = len(await records(tmp_path, ns))
    code, out, err = await cli("erase", "--config", str(path), "--namespace", ns, "--subject", SUBJECT, "--dry-run")
    assert code == 0, err
    assert "would erase subject 'Caroline'" in out and "nothing was written" in out
    assert len(await records(tmp_path, ns)) == count
    for bad in (["--subject", "   "], ["--subject", "x" * 1001], ["--namespace", "no spaces"]):
        args = ["erase", "--config", str(path), "--namespace", ns, "--subject", SUBJECT]
        args[args.index(bad[0]) + 1] = bad[1]
        code, _, err = await cli(*args)
        assert code == 2 and bad[0] in err, (bad, err)
    code, out, err = await cli("erase", "--config", str(path), "--namespace", ns, "--subject", SUBJECT, "--json")
    assert code == 0, err
    receipt = json.loads(out)
    assert receipt["sessions"] == ["s-caro-1"] and receipt["verification"]["passed"]
    code, out, err = await cli("erase", "--config", str(path), "--namespace", ns, "--subject", SUBJECT)
    assert code == 0, err
    assert "0 session(s) of the subject (1 in all)" in out and "verification passed" in out
    code, out, _ = await cli("erase", "--help")
    assert code == 0 and "--subject" in out and "--dry-run" in out


# --- embedded, with encryption ----------------------------------------------------------------------


def use_file_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HELIX_KEY_STORE", "file")
    monkeypatch.setenv("HELIX_KEY_STORE_URL", str(tmp_path / "keys"))


async def test_with_encryption_her_keys_are_destroyed_and_a_bad_record_is_listed_not_fatal(
    tmp_path: Path, key_env: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_file_keys(monkeypatch, tmp_path)
    ns = unique("erase-enc")
    cfg = embedded(tmp_path, ns, [{"type": "sliding-window", "window_size": 10}, {"type": "long-term"}], encrypted=True)
    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(cfg))
    sessions = {k: v for k, v in SESSIONS.items() if k != "s-caro-2"}
    await write(cfg, sessions)
    log = EmbeddedLog(tmp_path / "log", fsync=False)
    garbage = log._file(ns).append(b"\x00not avro at all")  # a record no schema decodes, framed like any
    await log.close()
    stored = [r for r in await records(tmp_path, ns) if r.event.session_id == "s-caro-1"]
    assert all(r.event.payload.message.content.startswith("helix-enc:v1:") for r in stored)  # type: ignore[union-attr]

    code, out, err = await cli("erase", "--config", str(path), "--namespace", ns, "--subject", SUBJECT, "--json")
    assert code == 0, err + out
    receipt = json.loads(out)
    assert receipt["sessions"] == receipt["shredded"] == ["s-caro-1"] and receipt["not_shredded"] == []
    assert len(receipt["key_ids"]) == 1 and receipt["log"].startswith("sealed")
    assert [(u["partition"], u["offset"]) for u in receipt["undecodable"]] == [(0, garbage)]
    assert receipt["verification"]["scanned"]["log"] == {"checked": True, "messages": 2, "readable_sessions": 0}
    after = await views(cfg, ns, list(sessions))
    assert after["sliding-window-10-pairs"]["s-caro-1"] == []
    assert after["sliding-window-10-pairs"]["s-bob"] == [SESSIONS["s-bob"][0].content]  # sealed: named by sealed text
    assert texts_of(after["long-term"]) == sorted(KEPT)
    window = {**cfg, "memory": {**cfg["memory"], "type": "sliding-window", "window_size": 10}}
    del window["memory"]["backends"]
    async with open_memory(window, session_id="s-bob") as bob:  # his key stays
        assert [m.content for m in await bob.get()] == [SESSIONS["s-bob"][0].content]
    async with Runtime() as runtime:  # her messages on the log open no more, in a new process's eyes
        opened = await Opener(ns, runtime.keys()).session("s-caro-1", [r.event.payload.message for r in stored])  # type: ignore[union-attr]
        for r in stored:
            with pytest.raises(KeyErased):
                opened(r.event.payload.message)  # type: ignore[union-attr]

    # Run again: a shredded session's user ids no longer open; the earlier receipt names it.
    code, out, err = await cli("erase", "--config", str(path), "--namespace", ns, "--subject", SUBJECT, "--json")
    assert code == 0, err
    again = json.loads(out)
    assert again["sessions"] == ["s-caro-1"] and again["erased"] == [] and again["key_ids"] == []

    # A session of hers written before encryption was on: dropped from every view, but the log keeps it
    # readable, so the check fails (exit 1) and the receipt says so.
    plain = {k: v for k, v in cfg.items() if k != "memory_middleware"}
    await write(plain, {"s-old": [Message("user", "Old note.", metadata=CAROLINE)]})
    code, out, err = await cli("erase", "--config", str(path), "--namespace", ns, "--subject", SUBJECT, "--json")
    assert code == 1, err
    late = json.loads(out)
    assert late["not_shredded"] == ["s-old"] and late["erased"] == ["s-old"] and not late["verification"]["passed"]
    assert any(f.startswith("log: messages of 1") for f in late["verification"]["failures"])
    assert "readable on the log" in late["log"]
    assert (await views(plain, ns, ["s-old"]))["sliding-window-10-pairs"]["s-old"] == []


# --- REST -------------------------------------------------------------------------------------------


async def test_rest_erasures_are_for_admin_keys(tmp_path: Path) -> None:
    httpx = pytest.importorskip("httpx")
    from helix_es.service.app import Options, build_app
    from helix_es.service.keys import Keys

    ns = unique("ta")
    tenant, admin = "key-tenant-a-0123456789", "key-admin-0123456789ab"
    keys = Keys.parse({tenant: ["ta-*"], admin: {"namespaces": ["*"], "admin": True}})
    cfg = embedded(tmp_path, ns, [{"type": "conversation"}, {"type": "long-term"}])
    written = await write(cfg, {k: SESSIONS[k] for k in ("s-caro-1", "s-bob")})
    app = build_app(load_config(cfg), keys, Options(access_log=False))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://service", timeout=60) as http:
            url = f"/v1/{ns}/erasures"
            refused = await http.post(url, json={"subject": SUBJECT}, headers={"Authorization": f"Bearer {tenant}"})
            assert refused.status_code == 403 and "admin" in refused.json()["error"]
            assert (await http.post(url, json={"subject": SUBJECT})).status_code == 401
            admin_auth = {"Authorization": f"Bearer {admin}"}
            for body, field in (
                ({"subject": "  "}, "subject"),
                ({"who": "x"}, "body"),
                ({"subject": "x", "dry_run": 1}, "dry_run"),
            ):
                bad = await http.post(url, json=body, headers=admin_auth)
                assert (bad.status_code, bad.json()["field"]) == (422, field), bad.text
            dry = await http.post(url, json={"subject": SUBJECT, "dry_run": True}, headers=admin_auth)
            assert dry.status_code == 200 and dry.json()["dry_run"] and dry.json()["sessions"] == ["s-caro-1"]
            done = await http.post(url, json={"subject": SUBJECT}, headers=admin_auth)
            assert done.status_code == 201, done.text
            receipt = done.json()
            assert receipt["sessions"] == ["s-caro-1"] and receipt["verification"]["passed"]
            assert receipt["messages"] == {"s-bob": [p.offset for p in written["s-bob"][1:]]}
    recorded = [r for r in await records(tmp_path, ns) if isinstance(r.event.payload, SubjectErased)]
    assert [r.event.payload.request for r in recorded] == [receipt["request"]]  # type: ignore[union-attr]


# --- Kafka, Redis and PostgreSQL, with `helix-es project` -------------------------------------------


async def test_on_kafka_with_a_projector_and_a_rebuild_reproducing_the_erased_views(
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
    ns, prefix = unique("erase-k"), unique("erase-k")
    log_cfg = {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 2, "topic_prefix": prefix}
    projector = {
        "log": log_cfg,
        "memory": {
            "type": "composite",
            "namespace": ns,
            "read_timeout": 60,
            "backends": [
                {"type": "conversation", "store": "redis", "redis_url": redis_url},
                {"type": "long-term", "store": "postgres", "dsn": postgres_dsn},
                {"type": "vector", "store": "postgres", "dsn": postgres_dsn},
                {"type": "facts", "store": "postgres", "dsn": postgres_dsn},
            ],
        },
    }
    client = {**projector, "memory_middleware": ["encryption"]}
    path = tmp_path / "client.yaml"
    path.write_text(json.dumps(client))
    procs.append(start_projector(projector, tmp_path))
    written = await write(client, SESSIONS)
    kafka = KafkaLog(kafka_bootstrap, topic_prefix=prefix, partitions=2)
    try:
        await told(kafka, ns, "s-caro-1", written["s-caro-1"][0], ("Caroline", "lives_in", "Lisbon"))
        await told(kafka, ns, "s-bob", written["s-bob"][0], ("Bob", "likes", "green tea"))
    finally:
        await kafka.close()
    everyone = list(SESSIONS)

    async def folded() -> bool:
        seen = await views(client, ns, everyone)
        return len(seen["long-term"]) == 9 and len(seen["facts"]) == 2 and len(seen["conversation"]["s-dan"]) == 2

    await wait_for(folded, 60, "the projector to fold every view")

    code, out, err = await cli("erase", "--config", str(path), "--namespace", ns, "--subject", SUBJECT, "--json")
    assert code == 0, err + out
    receipt = json.loads(out)
    assert receipt["sessions"] == receipt["shredded"] == ["s-caro-1", "s-caro-2"] and len(receipt["key_ids"]) == 2
    assert receipt["verification"]["passed"], receipt["verification"]
    assert all(v.get("applied") for k, v in receipt["verification"]["scanned"].items() if k != "log")
    after = await views(client, ns, everyone)
    assert after["conversation"]["s-caro-1"] == after["conversation"]["s-caro-2"] == []
    assert after["conversation"]["s-dan"] == [m.content for m in SESSIONS["s-dan"]]
    assert texts_of(after["long-term"]) == texts_of(after["vector-hash-384"]) == sorted(KEPT)
    assert [f[:3] for f in after["facts"]] == [("Bob", "likes", "green tea")]

    # A rebuild of every view from the log (the projector running, as in a deployment) gives the same views.
    code, out, err = await cli("rebuild", "--config", str(path), "--json")
    assert code == 0, err
    assert await views(client, ns, everyone) == after
    code, out, err = await cli("erase", "--config", str(path), "--namespace", ns, "--subject", SUBJECT, "--json")
    assert code == 0, err
    assert json.loads(out)["erased"] == [] and json.loads(out)["verification"]["passed"]
    stop(procs.pop())


async def told(log: EventLog, ns: str, sid: str, turn: Position, fact: tuple[str, str, str]) -> None:
    """A model's extraction of one turn of the session, as the facts worker records it."""
    source = SourceTurn(f"turn-{turn.offset}", turn, datetime.now(UTC))
    await log.append(Event(ns, sid, FactsExtracted("facts", "rules/v1", "", (ExtractedFact(*fact),), (source,))))


# --- the vector stores erase many sessions of one batch together ------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "postgres"])
async def test_a_batch_erasing_many_sessions_drops_each_ones_entries_and_keeps_later_ones(
    request: pytest.FixtureRequest, kind: str
) -> None:
    from helix_es.providers.embed import HashEmbedder
    from helix_es.stores.memory.vector import MemoryVectorStore
    from helix_es.stores.postgres.vector import PostgresVectorStore

    ns = unique("vec-many")
    topic = f"helix.memory.{ns}"
    store: Any = (
        PostgresVectorStore(request.getfixturevalue("postgres_dsn")) if kind == "postgres" else MemoryVectorStore()
    )
    projection = VectorProjection("vector-erase-many-test", HashEmbedder(), store)

    def at(offset: int, sid: str, payload: Any) -> Record:
        return Record(Event(ns, sid, payload), Position(topic, 0, offset))

    def said(offset: int, sid: str, text: str) -> Record:
        return at(offset, sid, MessageAdded(Message("user", text)))

    try:
        batch = [said(0, "a", "a one"), said(1, "b", "b one"), said(2, "c", "c one"), said(3, "a", "a two")]
        batch += [at(4, "a", SessionErased()), at(5, "b", SessionErased()), said(6, "a", "a after")]
        await projection.apply(batch[:4])
        await projection.apply(batch[4:])
        key = SessionKey(ns, "any")
        left = await projection.search(key, "one two after", 10, None) or []
        assert sorted(m.content for m in left) == ["a after", "c one"]
        assert await store.count(projection.name, ns) == 2
    finally:
        await projection.close()

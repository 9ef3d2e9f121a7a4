"""Facts end to end on the embedded log: a rules or stand-in model extractor in the background,
`mem.facts` bi-temporal answers, corrections as events, a reopen that calls no model, bad input."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from helix_es import InvalidInput, Message, open_memory
from helix_es.config import load_config
from helix_es.history.facts_diff import diff_facts
from helix_es.model import names
from helix_es.model.errors import ConfigError
from projectors.lag import lag
from projectors.rebuild import rebuild
from tests.conftest import start_projector, stop, unique
from tests.model_server import ModelServer

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def facts_config(tmp_path: Path, namespace: str, store: str = "memory", **view: Any) -> dict[str, Any]:
    memory = {
        "type": "facts",
        "store": store,
        "namespace": namespace,
        "extract": {"provider": "rules"},
        "batch": {"turns": 100, "idle": 60},  # tests drain the worker themselves (`extracted`)
        **view,
    }
    return {"log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False}, "memory": memory}


async def extracted(mem: Any) -> int:
    """Run the background extraction to the end now (the backend's workers of this namespace)."""
    covered: int = await mem.backend.extract(mem.namespace)
    return covered


def said(text: str, days: int, name: str = "ana") -> Message:
    return Message(role="user", content=text, name=name, occurred_at=T0 + timedelta(days=days))


@pytest.mark.parametrize("store", ["memory", "redis", "postgres"])
async def test_the_rules_extractor_learns_and_a_move_supersedes(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    extra: dict[str, Any] = {}
    if store == "redis":
        extra["redis_url"] = request.getfixturevalue("redis_url")
    if store == "postgres":
        extra["dsn"] = request.getfixturevalue("postgres_dsn")
    ns = unique("facts")
    cfg = facts_config(tmp_path, ns, store, **extra)
    async with open_memory(cfg, session_id="s1") as mem:
        await mem.add(said("My name is Ana and I live in Lisbon.", 0))
        await mem.add(said("I like jazz.", 1))
        await mem.add(Message(role="assistant", content="Noted!"))
        assert await extracted(mem) == 3
        now = await mem.facts(subject="ana")  # type: ignore[attr-defined]
        expected = [("likes", "jazz"), ("lives_in", "Lisbon"), ("name", "Ana")]
        assert sorted((f.predicate, f.value) for f in now) == expected
    async with open_memory(cfg, session_id="s2") as mem:
        await mem.add(said("I moved to Porto.", 200))
        await extracted(mem)
        (where,) = await mem.facts(subject="ana", predicate="lives_in")  # type: ignore[attr-defined]
        assert where.value == "Porto" and where.valid_from == T0 + timedelta(days=200)
        history = await mem.facts(subject="ana", predicate="lives_in", history=True)  # type: ignore[attr-defined]
        assert [(f.value, f.valid_to) for f in history] == [("Lisbon", T0 + timedelta(days=200)), ("Porto", None)]
        old = await mem.facts(subject="ana", predicate="lives_in", as_of=T0 + timedelta(days=100))  # type: ignore[attr-defined]
        assert [f.value for f in old] == ["Lisbon"]
        assert old[0].source and old[0].model == "rules/v1"
        # the facts view's get: one system message an agent can put in its prompt
        (known,) = await mem.get()
        assert known.role == "system" and "lives in Porto" in known.content
    if store == "redis":  # the contract's key space: helix:facts:<namespace>:...
        import redis.asyncio as aioredis

        client = aioredis.from_url(extra["redis_url"])
        keys = [k.decode() async for k in client.scan_iter(match=f"helix:*{{{ns}}}*")]
        await client.aclose()
        assert keys and all(k.startswith(f"helix:facts:{{{ns}}}:facts:") for k in keys), keys


async def test_corrections_are_events_and_outrank_the_model(tmp_path: Path) -> None:
    cfg = facts_config(tmp_path, unique("facts"))
    async with open_memory(cfg, session_id="s") as mem:
        m: Any = mem
        await mem.add(said("I work at Acme.", 0))
        await extracted(mem)
        (acme,) = await m.facts(predicate="works_at")
        await m.retract_fact(acme.id, reason="misheard")
        assert await m.facts(predicate="works_at") == []
        fixed = await m.assert_fact("ana", "works_at", "Globex", valid_from=T0)
        assert fixed.offset > 0
        (globex,) = await m.facts(predicate="works_at")
        assert (globex.value, globex.model, globex.source) == ("Globex", None, [fixed])
        await mem.add(said("I speak Dutch.", 1))
        await mem.add(said("I speak Frisian.", 2))
        await extracted(mem)
        a, b = await m.facts(predicate="speaks")
        merged = await m.merge_facts([a.id, b.id])
        assert [f.id for f in await m.facts(predicate="speaks")] == [a.id]
        await m.unmerge_facts(merged)
        assert len(await m.facts(predicate="speaks")) == 2
        assert acme.id not in {f.id for f in await m.facts()}
        (gone,) = [f for f in await m.facts(history=True) if f.id == acme.id]
        assert gone.known_to is not None


async def test_extraction_runs_in_the_background(tmp_path: Path) -> None:
    cfg = facts_config(tmp_path, unique("facts"), batch={"turns": 2, "idle": 0.05})
    async with open_memory(cfg, session_id="s") as mem:
        await mem.add(said("I live in Lisbon.", 0))
        for _ in range(200):  # the worker asks once the session is quiet for 50 ms; add never waited for it
            if await mem.facts():  # type: ignore[attr-defined]
                break
            await asyncio.sleep(0.02)
        assert [f.value for f in await mem.facts()] == ["Lisbon"]  # type: ignore[attr-defined]


async def test_a_reopen_folds_the_recorded_facts_and_asks_no_model(tmp_path: Path, model_server: ModelServer) -> None:
    ns = unique("facts")
    model = {"provider": "openai", "base_url": model_server.base_url, "model": "stand-in"}
    cfg = facts_config(tmp_path, ns, extract=model)
    async with open_memory(cfg, session_id="s") as mem:
        await mem.add(said("I live in Lisbon.", 0))
        await mem.add(said("I like tea.", 1))
        await extracted(mem)
        first = await mem.facts()  # type: ignore[attr-defined]
    calls = model_server.count("/chat/completions")
    assert calls == 1 and len(first) == 2
    async with open_memory(cfg, session_id="s") as mem:
        await extracted(mem)
        assert await mem.facts() == first  # type: ignore[attr-defined]
    assert model_server.count("/chat/completions") == calls


async def test_a_failing_model_parks_the_turns_as_a_dead_letter(tmp_path: Path, model_server: ModelServer) -> None:
    model_server.extract_status = 400  # type: ignore[attr-defined]
    model = {"provider": "openai", "base_url": model_server.base_url, "model": "stand-in"}
    cfg = facts_config(tmp_path, unique("facts"), extract=model)
    async with open_memory(cfg, session_id="s") as mem:
        await mem.add(said("I live in Lisbon.", 0))
        assert await extracted(mem) == 0
        assert await mem.facts() == []  # type: ignore[attr-defined]
        assert await mem.get() == []
    (line,) = (tmp_path / "log" / "dead-letters.jsonl").read_text().splitlines()
    parked = json.loads(line)
    assert parked["kind"] == "extraction" and parked["status"] == 400 and len(parked["turns"]) == 1


@pytest.mark.parametrize(
    ("call", "field"),
    [
        ({"as_of": datetime(2025, 1, 1)}, "as_of"),
        ({"known_as_of": "yesterday"}, "known_as_of"),
        ({"subject": ""}, "subject"),
        ({"history": "yes"}, "history"),
    ],
)
async def test_bad_questions_name_the_argument(tmp_path: Path, call: dict[str, Any], field: str) -> None:
    async with open_memory(facts_config(tmp_path, unique("facts")), session_id="s") as mem:
        with pytest.raises(InvalidInput) as caught:
            await mem.facts(**call)  # type: ignore[attr-defined]
        assert caught.value.field == field


async def test_bad_corrections_write_nothing(tmp_path: Path) -> None:
    async with open_memory(facts_config(tmp_path, unique("facts")), session_id="s") as mem:
        m: Any = mem
        with pytest.raises(InvalidInput, match="value"):
            await m.assert_fact("ana", "lives_in", "  ")
        with pytest.raises(InvalidInput, match="fact_id"):
            await m.retract_fact("no-such-fact")
        with pytest.raises(InvalidInput, match="fact_ids"):
            await m.merge_facts(["one"])
        with pytest.raises(InvalidInput, match="position"):
            await m.unmerge_facts("0")
        assert await m.facts(history=True) == []


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    base = facts_config(tmp_path, "ns")
    for patch, key in [
        ({"batch": {"turns": 0}}, "memory.batch.turns"),
        ({"batch": {"idle": -1}}, "memory.batch.idle"),
        ({"multi_valued": "likes"}, "memory.multi_valued"),
        ({"table": "select"}, "memory.table"),
        ({"extract": {"provider": "oracle"}}, "memory.extract"),
    ]:
        with pytest.raises(ConfigError) as caught:
            load_config({**base, "memory": {**base["memory"], **patch}})
        assert caught.value.field.startswith(key), (patch, caught.value.field)


async def _poll(read: Any, until: Any, seconds: float = 60) -> Any:
    for _ in range(int(seconds / 0.2)):
        got = await read()
        if until(got):
            return got
        await asyncio.sleep(0.2)
    return await read()


def on_kafka(
    bootstrap: str, dsn: str, ns: str, base_url: str, model: str, prefix: str | None = None, **view: Any
) -> dict[str, Any]:
    """A facts view in PostgreSQL over a Kafka log of its own prefix, extracting with the stand-in."""
    memory = {
        "type": "facts",
        "store": "postgres",
        "dsn": dsn,
        "namespace": ns,
        "read_timeout": 60,
        "extract": {"provider": "openai", "base_url": base_url, "model": model},
        "batch": {"turns": 2, "idle": 0.2},
        **view,
    }
    prefix = prefix or f"helix.fx-{unique('p')}."
    return {
        "log": {"type": "kafka", "bootstrap_servers": bootstrap, "topic_prefix": prefix, "partitions": 2},
        "memory": memory,
    }


async def test_on_kafka_helix_es_project_extracts_into_postgres_and_parks_failures(
    tmp_path: Path, kafka_bootstrap: str, postgres_dsn: str, model_server: ModelServer
) -> None:
    ns = unique("fx")
    cfg = on_kafka(kafka_bootstrap, postgres_dsn, ns, model_server.base_url, "stand-in")
    model_server.facts_by_text["my name is nobody"] = [{"subject": "user", "predicate": "", "value": "x"}]  # bad
    projector = start_projector(cfg, tmp_path)
    try:
        async with open_memory(cfg, session_id="ana") as mem:
            m: Any = mem
            await mem.add(said("I live in Lisbon.", 0))
            await mem.add(said("I moved to Porto.", 10))
            found = await _poll(lambda: m.facts(subject="ana"), lambda f: [x.value for x in f] == ["Porto"])
            assert [(f.value, f.model) for f in found] == [("Porto", "openai/stand-in")]
            history = await m.facts(subject="ana", predicate="lives_in", history=True)
            assert [f.value for f in history] == ["Lisbon", "Porto"]
            assert await m.extract_now() == 0  # on Kafka the projector's worker extracts, not the client
        async with open_memory(cfg, session_id="bob") as mem:
            await mem.add(Message(role="user", content="my name is nobody"))
            dlq = names.dlq_topic(ns, load_config(cfg).log.topic_prefix)
            parked = await _poll(lambda: _dead_letters(kafka_bootstrap, dlq), bool)
            (note,) = [json.loads(v) for v in parked]
            assert (note["kind"], note["session_id"]) == ("extraction", "bob")
            assert "facts[0].predicate" in note["reason"]
        assert model_server.extractions >= 2
        path = tmp_path / "lag.yaml"
        path.write_text(json.dumps(cfg))
        report = await lag(str(path))  # the parked turn stays pending on the log: helix-es lag says so
        assert report.pending == {"facts": {ns: 1}} and report.dead_letters == {ns: 1}
    finally:
        stop(projector)


async def _dead_letters(bootstrap: str, topic: str) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None)
    await consumer.start()
    try:
        batch = await consumer.getmany(timeout_ms=1000)
        return [r.value for records in batch.values() for r in records if r.value is not None]
    finally:
        await consumer.stop()


async def test_recall_ranks_facts_for_a_question(tmp_path: Path) -> None:
    async with open_memory(facts_config(tmp_path, unique("facts")), session_id="s") as mem:
        m: Any = mem
        for text, day in [
            ("I live in Lisbon.", 0),
            ("I work at Acme.", 1),
            ("I moved to Porto.", 9),
            ("I like jazz.", 2),
        ]:
            await mem.add(said(text, day))
        await m.extract_now()
        hits = await m.recall("where does ana live?", limit=2, explain=True)
        assert [h.message.content for h in hits] == ["ana lives in Porto", "ana lives in Lisbon"]  # now first
        assert hits[0].occurred_at == T0 + timedelta(days=9) and hits[0].explain["fact"]["value"] == "Porto"
        assert hits[0].session_id == "s" and hits[0].score > hits[1].score
        assert [h.message.content for h in await m.recall("jazz")] == ["ana likes jazz"]
        with pytest.raises(InvalidInput, match="mode"):
            await m.recall("jazz", mode="vector")
        with pytest.raises(InvalidInput, match="where"):
            await m.recall("jazz", where={"k": "v"})


async def test_a_new_model_is_a_replay_rebuild_re_extract_with_a_dry_run_first(
    tmp_path: Path, kafka_bootstrap: str, postgres_dsn: str, model_server: ModelServer
) -> None:
    ns, prefix = unique("fr"), f"helix.fr-{unique('p')}."

    def cfg(model: str) -> dict[str, Any]:
        return on_kafka(kafka_bootstrap, postgres_dsn, ns, model_server.base_url, model, prefix, table="facts_replay")

    old, new = cfg("model-a"), cfg("model-b")
    projector = start_projector(old, tmp_path)
    try:
        async with open_memory(old, session_id="ana") as mem:
            m: Any = mem
            for text, day in [("I live in Lisbon.", 0), ("I like tea.", 1), ("I moved to Porto.", 9)]:
                await mem.add(said(text, day))
            await _poll(lambda: m.facts(subject="ana"), lambda f: len(f) == 2)
    finally:
        stop(projector)
    calls = model_server.extractions
    plain = await rebuild(old, view="facts-facts_replay", handover=0)  # the recorded facts: no model
    assert model_server.extractions == calls and plain.extracted is None
    dry = await rebuild(new, view="facts-facts_replay", re_extract=True, dry_run=True, handover=0)
    assert model_server.extractions == calls and dry.extracted is not None and not dry.switched
    assert (dry.extracted["turns"], dry.extracted["calls"]) == (3, 2) and dry.extracted["prompt_tokens"] > 0
    model_server.facts_by_text["I like tea."] = [{"subject": "ana", "predicate": "likes", "value": "green tea"}]
    done = await rebuild(new, view="facts-facts_replay", re_extract=True, handover=0)
    assert done.switched and done.extracted is not None and done.extracted["calls"] == 2
    assert model_server.extractions == calls + 2
    async with open_memory(new, session_id="ana") as mem:
        now = await mem.facts(subject="ana")  # type: ignore[attr-defined]
        assert sorted((f.value, f.model) for f in now) == [("Porto", "openai/model-b"), ("green tea", "openai/model-b")]
    # what the new model knows differently: helix-es facts diff OLD NEW
    (diff,) = await diff_facts(load_config(new).memory, done.old_target, done.target, [ns])
    assert [f.value for f in diff.added] == ["green tea"] and [f.value for f in diff.removed] == ["tea"]
    assert diff.same == 2  # Lisbon, then Porto
    path = tmp_path / "new.yaml"
    path.write_text(json.dumps(new))
    cli = [sys.executable, "-m", "helix_es.cli", "facts", "diff", "--config", str(path), "--json"]
    shown = subprocess.run([*cli, done.old_target, done.target], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    (told,) = json.loads(shown.stdout)
    assert [f["value"] for f in told["added"]] == ["green tea"] and told["same"] == 2

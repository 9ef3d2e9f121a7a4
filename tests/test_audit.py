"""audit: a session's history read from the log, and what its views returned at a time or an offset."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from helix_es import ConfigError, InvalidInput, Message, ToolCall, load_config, open_memory
from helix_es.history.audit import AuditedEvent, audit, parse_time
from helix_es.log.codec import Codec, load_schemas, schema_version
from helix_es.log.embedded import LogFile
from helix_es.log.tolerant import AuditCodec, UnknownPayload
from helix_es.model.events import Position, Record
from tests.conftest import unique, wait_for
from tests.model_server import ModelServer

ROOT = Path(__file__).resolve().parent.parent


def turn(i: int) -> Message:
    return Message("user" if i % 2 == 0 else "assistant", f"Fact {i}: the sky is colour {i}. Extra words follow.")


@dataclass
class Seen:
    """What the live views returned after one step, and where the log stood then."""

    at: datetime  # taken after the reads: every event of the step is stamped before it
    offset: int  # the session's partition's last offset then
    views: dict[str, list[Message]]


def now() -> datetime:
    return datetime.now(UTC)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "helix_es.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


# --- times -----------------------------------------------------------------------------------------


def test_times_are_iso_8601_naive_meaning_utc_or_relative() -> None:
    base = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert parse_time("2024-05-01T12:00:00") == base
    assert parse_time("2024-05-01 12:00") == base
    assert parse_time("2024-05-01T12:00:00Z") == base
    assert parse_time("2024-05-01T14:00:00+02:00") == base
    assert parse_time(datetime(2024, 5, 1, 12)) == base  # naive datetime: UTC
    assert parse_time(datetime(2024, 5, 1, 14, tzinfo=timezone(timedelta(hours=2)))) == base
    assert parse_time("-10m", now=base) == base - timedelta(minutes=10)
    assert parse_time("-1h30m", now=base) == base - timedelta(minutes=90)
    assert parse_time("2d ago", now=base) == base - timedelta(days=2)
    assert parse_time("now", now=base) == base
    with pytest.raises(InvalidInput, match="ISO-8601") as err:
        parse_time("yesterday-ish")
    assert err.value.field == "as_of"


# --- the embedded log ------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["extractive", "openai"])
async def test_summary_history_and_every_cut_match_what_get_returned(
    tmp_path: Path, provider: str, model_server: ModelServer
) -> None:
    summariser = (
        {"provider": "openai", "model": "m", "base_url": model_server.base_url}
        if provider == "openai"
        else {"provider": "extractive"}
    )
    ns = unique("aud")
    cfg = {
        "log": {"path": str(tmp_path)},
        "memory": {
            "type": "summary",
            "max_messages": 4,
            "tool_pairs": "split",
            "namespace": ns,
            "summariser": summariser,
        },
    }
    seen: list[Seen] = []
    adds: list[Position] = []
    async with open_memory(cfg, session_id="s") as mem:

        async def step(write: Any) -> None:
            adds.append(await write)
            got = await mem.get()
            end = (await audit(cfg, session_id="s")).events[-1].position.offset  # read from the log, in process
            seen.append(Seen(now(), end, {"summary-4": got}))

        for i in range(9):
            await step(mem.add(turn(i)))
        await step(mem.clear())
        for i in range(9, 15):
            await step(mem.add(turn(i)))
    calls = model_server.count("/chat/completions")

    report = await audit(cfg, session_id="s")
    kinds = [e.type for e in report.events]
    assert kinds.count("MessageAdded") == 15 and kinds.count("MemoryCleared") == 1
    assert kinds.count("SummaryRecorded") >= 4  # three before the clear, one after
    assert report.views is None  # no cut, no views
    assert [e.position.offset for e in report.events] == list(range(len(report.events)))
    assert [e.position for e in report.events if e.type != "SummaryRecorded"] == adds
    assert all(e.time.tzinfo is UTC for e in report.events)
    assert len({e.event_id for e in report.events}) == len(report.events)

    for k, s in enumerate(seen):
        by_time = await audit(cfg, session_id="s", as_of=s.at)
        by_offset = await audit(cfg, session_id="s", offset=s.offset)
        assert by_time.views == s.views, f"as of step {k}"
        assert by_offset.views == s.views, f"at offset {s.offset} (step {k})"
        assert by_time.events == by_offset.events == report.events[: s.offset + 1]
    assert model_server.count("/chat/completions") == calls  # folding from the log never asks the model

    # The cut is exact: at the add that asked for a summary, the summary is not on the log yet.
    asked = next(i for i, p in enumerate(adds) if seen[i].offset > p.offset)
    before = await audit(cfg, session_id="s", offset=adds[asked].offset)
    assert before.views is not None and before.views != seen[asked].views
    assert before.events[-1].type == "MessageAdded"
    assert sum(1 for m in before.views["summary-4"] if not m.metadata) == 5  # max_messages + 1 not yet folded


async def test_a_composite_shows_each_part_and_view_picks_one(tmp_path: Path) -> None:
    ns = unique("aud")
    parts = [{"type": "sliding-window", "window_size": 2, "tool_pairs": "split"}, {"type": "conversation"}]
    cfg = {"log": {"path": str(tmp_path)}, "memory": {"type": "composite", "namespace": ns, "backends": parts}}
    seen: list[Seen] = []
    async with open_memory(cfg, session_id="s") as mem:
        texts = ["one", "two", "three", None, "four", "five"]
        for text in texts:
            pos = await (mem.clear() if text is None else mem.add(Message("user", text)))
            views = {"sliding-window-2": await mem.parts[0].get(), "conversation": await mem.parts[1].get()}
            seen.append(Seen(now(), pos.offset, views))
    for s in seen:
        assert (await audit(cfg, session_id="s", as_of=s.at)).views == s.views
        assert (await audit(cfg, session_id="s", offset=s.offset)).views == s.views
    last = seen[2]
    by_type = await audit(cfg, session_id="s", as_of=last.at, view="sliding-window")
    assert by_type.views == {"sliding-window-2": last.views["sliding-window-2"]}
    assert [m.content for m in by_type.views["sliding-window-2"]] == ["two", "three"]
    by_name = await audit(cfg, session_id="s", offset=last.offset, view="conversation")
    assert by_name.views == {"conversation": last.views["conversation"]}
    with pytest.raises(ConfigError, match=r"no view 'nope'.*sliding-window-2 \(sliding-window\), conversation"):
        await audit(cfg, session_id="s", as_of="now", view="nope")


async def test_long_term_as_of_sees_the_other_sessions_of_the_namespace(tmp_path: Path) -> None:
    ns = unique("aud")
    cfg = {"log": {"path": str(tmp_path)}, "memory": {"type": "long-term", "namespace": ns}}
    seen: list[Seen] = []
    async with open_memory(cfg, session_id="alice") as alice, open_memory(cfg, session_id="bob") as bob:
        script = [(alice, "a1"), (bob, "b1"), (alice, "a2"), (bob, None), (bob, "b2"), (alice, "a3"), (bob, "b3")]
        for mem, text in script:
            pos = await (mem.clear() if text is None else mem.add(Message("user", text)))
            seen.append(Seen(now(), pos.offset, {"long-term": await alice.get()}))
    assert [m.content for m in seen[2].views["long-term"]] == ["a1", "b1", "a2"]
    assert [m.content for m in seen[-1].views["long-term"]] == ["b2", "a3", "b3"]  # bob's clear cleared them all
    for k, s in enumerate(seen):
        by_time = await audit(cfg, session_id="alice", as_of=s.at)
        assert by_time.views == s.views, f"as of step {k}"
        assert by_time.events and {e.session_id for e in by_time.events} == {"alice"}  # alice's history only
        assert (await audit(cfg, session_id="alice", offset=s.offset)).views == s.views, f"offset, step {k}"


async def test_events_of_types_this_version_does_not_know_are_shown_not_fatal(tmp_path: Path) -> None:
    ns = unique("aud")
    cfg = {"log": {"path": str(tmp_path)}, "memory": {"type": "conversation", "namespace": ns}}
    async with open_memory(cfg, session_id="s") as mem:
        await mem.add(Message("user", "hi"))
        await mem.add(Message("assistant", "", tool_calls=(ToolCall("c1", "lookup", '{"q": "x"}'),)))

    # A newer writer: the newest schema in schemas/ plus a payload type this version has never seen.
    newest = load_schemas()[-1]
    raw = json.loads((ROOT / "schemas" / f"envelope.v{newest.version}.avsc").read_text())
    payload = next(f for f in raw["fields"] if f["name"] == "payload")
    payload["type"].append({"type": "record", "name": "NoteRecorded", "fields": [{"name": "note", "type": "string"}]})
    newer = schema_version(newest.version + 1, raw)
    stamped = now()
    record = {
        "event_id": uuid.uuid4(),
        "namespace": ns,
        "session_id": "s",
        "timestamp": stamped,
        "payload": ("helix.memory.NoteRecorded", {"note": "from the future"}),
    }
    data = Codec([*load_schemas(), newer]).encode_record(record)
    log = LogFile(tmp_path / f"helix.memory.{ns}.log")
    try:
        offset = log.append(data)
    finally:
        log.close()

    report = await audit(cfg, session_id="s", as_of="now")
    assert [e.type for e in report.events] == ["MessageAdded", "MessageAdded", "Unknown"]
    unknown = report.events[-1]
    assert not unknown.known and unknown.position.offset == offset and unknown.time == stamped
    assert unknown.to_json()["payload"] == {
        "avro_type": "unknown",
        "fields": {},
        "schema_fingerprint": newer.fingerprint.hex(),
        "union_branch": len(payload["type"]) - 1,
    }
    assert report.views is not None and [m.role for m in report.views["conversation"]] == ["user", "assistant"]

    # A reader that has the schema but not the type shows the type's name and its fields.
    decoded = AuditCodec([*load_schemas(), newer]).decode(data)
    event = AuditedEvent.from_record(Record(decoded, Position("t", 0, 7)))
    assert isinstance(event.payload, UnknownPayload)
    assert event.type == "NoteRecorded" and event.session_id == "s"
    assert event.to_json()["payload"]["fields"] == {"note": "from the future"}
    assert "unknown event type helix.memory.NoteRecorded" in event.describe()

    cfg_path = tmp_path / "helix.yaml"
    cfg_path.write_text(json.dumps(cfg))
    out = run("audit", "--config", str(cfg_path), "--session", "s")
    assert out.returncode == 0, out.stderr
    assert "not in schemas/" in out.stdout and "calls lookup" in out.stdout


async def test_recorded_embeddings_are_listed_and_the_paid_model_is_not_called(
    tmp_path: Path, model_server: ModelServer
) -> None:
    ns = unique("aud")
    embed = {"provider": "openai", "model": "m", "dims": 8, "base_url": model_server.base_url}
    cfg = {
        "log": {"path": str(tmp_path)},
        "memory": {
            "type": "composite",
            "namespace": ns,
            "backends": [{"type": "conversation"}, {"type": "vector", "embed": embed}],
        },
    }
    vector = load_config(cfg).memory.parts[1].view.name
    async with open_memory(cfg, session_id="s") as mem:
        for text in ["the flight to Oslo", "a hotel in Bergen", "green tea"]:
            await mem.add(Message("user", text))
        got = await mem.parts[0].get()
    calls = model_server.count("/embeddings")
    report = await audit(cfg, session_id="s", as_of="now")
    embedded = [e for e in report.events if e.type == "EmbeddingRecorded"]
    assert len(embedded) == 3 and embedded[0].to_json()["payload"]["dims"] == 8
    assert embedded[0].to_json()["payload"]["model"] == "openai/m"
    assert 'embedding by "openai/m", 8 dims' in embedded[0].describe()
    assert report.views == {"conversation": got, vector: []}  # vector is search-only: get() is []
    assert model_server.count("/embeddings") == calls


def test_later_event_types_print_their_fields() -> None:
    @dataclass(frozen=True)
    class KeysRotated:  # a payload type added to helix_es.events after this module was written
        key_ids: tuple[str, ...]
        blob: bytes

    later: Any = KeysRotated(("k1", "k2"), b"\x00")
    event = AuditedEvent(Position("t", 0, 3), "e-1", "ns", "s", now(), "KeysRotated", later)
    assert event.to_json()["payload"] == {"key_ids": ["k1", "k2"], "blob": "AA=="}
    assert event.known and event.describe() == '{"key_ids": ["k1", "k2"], "blob": "AA=="}'


async def test_audit_is_exported_and_checks_its_arguments(tmp_path: Path) -> None:
    from helix_es import audit as exported

    assert exported is audit and callable(exported)
    cfg = {"log": {"path": str(tmp_path)}, "memory": {"type": "conversation", "namespace": unique("aud")}}
    report = await exported(cfg, session_id="nobody", as_of="now")
    assert report.events == [] and report.views == {"conversation": []}
    assert not list(tmp_path.iterdir())  # auditing a namespace with no log creates none
    with pytest.raises(InvalidInput, match="not both"):
        await audit(cfg, session_id="s", as_of="now", offset=3)
    with pytest.raises(InvalidInput, match=">= 0"):
        await audit(cfg, session_id="s", offset=-1)
    with pytest.raises(InvalidInput, match="give `as_of` or `offset` too"):
        await audit(cfg, session_id="s", view="conversation")
    with pytest.raises(InvalidInput, match="session_id"):
        await audit(cfg, session_id="")


# --- Kafka, Redis and a real projector ---------------------------------------------------------------


async def test_through_kafka_audit_reads_the_topic_and_matches_the_projected_views(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str
) -> None:
    ns, prefix = unique("aud"), unique("aud")  # a topic prefix of its own: its own consumer groups
    parts = [
        {"type": "sliding-window", "window_size": 3, "tool_pairs": "split", "store": "redis"},
        {"type": "long-term", "store": "redis"},
    ]
    cfg: dict[str, Any] = {
        "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 3, "topic_prefix": prefix},
        "memory": {"type": "composite", "namespace": ns, "read_timeout": 60, "backends": parts},
    }
    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(cfg))
    proc = subprocess.Popen(
        [sys.executable, "-m", "helix_es.cli", "project", "--config", str(path)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    seen: list[Seen] = []
    mine: list[Position] = []
    theirs: list[Position] = []
    try:
        async with open_memory(cfg, session_id="a") as a, open_memory(cfg, session_id="b") as b:
            window, long_term = a.parts
            kept = 0  # long-term messages since the last clear, all sessions

            async def holds(n: int) -> bool:
                return len(await long_term.get()) == n

            script = [(a, "a1"), (b, "b1"), (a, "a2"), (a, "a3"), (b, None), (a, "a4"), (b, "b2"), (a, "a5")]
            for mem, text in script:
                pos = await (mem.clear() if text is None else mem.add(Message("user", text)))
                kept = 0 if text is None else kept + 1
                (mine if mem is a else theirs).append(pos)
                await wait_for(lambda n=kept: holds(n), 60, "the long-term view to hold every session's writes")
                views = {"sliding-window-3": await window.get(), "long-term": await long_term.get()}
                seen.append(Seen(now(), pos.offset if mem is a else -1, views))
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert {p.partition for p in theirs} != {mine[0].partition}  # the cuts cross partitions
    assert [m.content for m in seen[3].views["sliding-window-3"]] == ["a1", "a2", "a3"]
    assert [m.content for m in seen[-1].views["long-term"]] == ["a4", "b2", "a5"]

    report = await audit(cfg, session_id="a")
    assert [e.position for e in report.events] == mine  # read from Kafka: topic, partition and offset
    assert {e.position.topic for e in report.events} == {f"{prefix}.{ns}"}
    for k, s in enumerate(seen):
        assert (await audit(cfg, session_id="a", as_of=s.at)).views == s.views, f"as of step {k}"
        if s.offset >= 0:
            at = await audit(cfg, session_id="a", offset=s.offset)
            assert at.views == s.views, f"at offset {s.offset}, step {k}"
            assert at.partition == mine[0].partition and at.events[-1].position.offset == s.offset


# --- the command line --------------------------------------------------------------------------------


@pytest.fixture
async def summary_log(tmp_path: Path) -> tuple[Path, str, list[Seen]]:
    ns = unique("aud")
    memory = {"type": "summary", "max_messages": 4, "tool_pairs": "split", "namespace": ns}
    cfg = {"log": {"path": str(tmp_path / "log")}, "memory": memory}
    seen: list[Seen] = []
    async with open_memory(cfg, session_id="s-1") as mem:
        for i in range(7):
            await mem.add(turn(i))
            got = await mem.get()
            end = (await audit(cfg, session_id="s-1")).events[-1].position.offset  # past its summaries
            seen.append(Seen(now(), end, {"summary-4": got}))
    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(cfg))
    return path, ns, seen


def test_cli_text_is_aligned_and_readable(summary_log: tuple[Path, str, list[Seen]]) -> None:
    path, ns, seen = summary_log
    help_ = run("--help")
    assert "audit" in help_.stdout
    out = run("audit", "--config", str(path), "--session", "s-1", "--as-of", seen[3].at.isoformat())
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"session s-1 of namespace {ns}, from the log (topic helix.memory.{ns})"
    assert lines[1].startswith("cut: events at or before ")
    header = next(line for line in lines if line.startswith("TIME (UTC)"))
    rows = lines[lines.index(header) + 1 : lines.index(header) + 5]
    assert len(rows) == 4 and all(r[header.index("TYPE")] != " " for r in rows)  # columns line up
    assert [r[header.index("EVENT ID") :].split()[0] for r in rows] == [
        json.loads(run("audit", "--config", str(path), "--session", "s-1", "--json").stdout)["events"][i]["event_id"]
        for i in range(4)
    ]
    assert 'user: "Fact 0: the sky is colour 0. Extra words follow."' in out.stdout
    assert "view summary-4 at the cut: get() returns 4 messages" in out.stdout

    later = run("audit", "--config", str(path), "--session", "s-1")  # past max_messages: a recorded summary
    assert "SummaryRecorded" in later.stdout and "summary for view summary-4 covering 2 messages" in later.stdout
    assert "at the cut" not in later.stdout  # no cut: the history only


def test_cli_json_is_one_document(summary_log: tuple[Path, str, list[Seen]]) -> None:
    path, _, seen = summary_log
    out = run("audit", "--config", str(path), "--session", "s-1", "--offset", str(seen[-1].offset), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    # The fields every earlier version printed, and those added since: skipped records (none here),
    # and whether messages were opened (nothing is sealed without the encryption middleware).
    assert set(doc) == {"namespace", "session_id", "topic", "cut", "erased", "events", "views"} | {
        "skipped",
        "skipped_records",
        "opened",
        "sealed",
    }
    assert doc["skipped"] == 0 and doc["skipped_records"] == []
    assert doc["opened"] is False and doc["sealed"] is None
    assert doc["cut"] == {"as_of": None, "offset": seen[-1].offset, "partition": 0, "time": None}
    first = doc["events"][0]
    assert set(first) == {
        "time",
        "topic",
        "partition",
        "offset",
        "event_id",
        "session_id",
        "type",
        "known",
        "erased",
        "payload",
    } | {"idempotency_key", "duplicate_of"} | {"left"}  # added with idempotency keys; with forgetting
    assert first["idempotency_key"] is None and first["duplicate_of"] is None
    assert first["payload"] == {"message": {"role": "user", "content": turn(0).content}}
    summary = next(e for e in doc["events"] if e["type"] == "SummaryRecorded")
    assert set(summary["payload"]) == {"view", "epoch", "covers", "text", "model"}
    expected = [json.loads(m.to_json()) for m in seen[-1].views["summary-4"]]
    assert doc["views"] == {"summary-4": expected}


def test_cli_usage_errors_exit_2_and_say_what_to_do(summary_log: tuple[Path, str, list[Seen]]) -> None:
    path, _, _ = summary_log
    base = ["audit", "--config", str(path), "--session", "s-1"]
    both = run(*base, "--as-of", "now", "--offset", "3")
    assert both.returncode == 2 and "--as-of: give --as-of or --offset, not both" in both.stderr
    bad_time = run(*base, "--as-of", "last tuesday")
    assert bad_time.returncode == 2 and "--as-of" in bad_time.stderr and "ISO-8601" in bad_time.stderr
    relative = run(*base, "--as-of=-1d")  # a day before the log began: no events
    assert relative.returncode == 0 and "0 events" in relative.stdout
    no_view = run(*base, "--as-of", "now", "--view", "window")
    assert no_view.returncode == 2 and "--view" in no_view.stderr and "summary-4 (summary)" in no_view.stderr
    view_alone = run(*base, "--view", "summary")
    assert view_alone.returncode == 2 and "--view: picks the view folded at a cut" in view_alone.stderr
    assert "(--as-of now folds the whole log)" in view_alone.stderr
    assert run("audit", "--config", str(path)).returncode == 2  # --session is required
    assert run(*base, "--offset", "x").returncode == 2


def test_cli_agent_picks_the_memory_of_an_agents_document(summary_log: tuple[Path, str, list[Seen]]) -> None:
    path, ns, _ = summary_log
    log = json.loads(path.read_text())["log"]
    doc = {
        "log": log,
        "agents": [
            {"id": "other-agent", "memory": {"type": "conversation"}},
            {"id": ns, "memory": {"type": "sliding-window", "window_size": 2, "tool_pairs": "split"}},
        ],
    }
    agents = path.parent / "agents.yaml"
    agents.write_text(json.dumps(doc))
    out = run("audit", "--config", str(agents), "--agent", ns, "--session", "s-1", "--as-of", "now", "--json")
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["namespace"] == ns and len(got["events"]) > 7  # the agent id is the namespace
    assert [m["content"] for m in got["views"]["sliding-window-2"]] == [turn(5).content, turn(6).content]
    first = run("audit", "--config", str(agents), "--session", "s-1")  # the first agent: another namespace
    assert first.returncode == 0 and "0 events" in first.stdout


def test_cli_runtime_failure_exits_1(summary_log: tuple[Path, str, list[Seen]]) -> None:
    path, ns, _ = summary_log
    log = path.parent / "log" / f"helix.memory.{ns}.log"
    data = bytearray(log.read_bytes())
    data[len(data) // 3] ^= 0xFF  # damage before the tail: refused, never skipped
    log.write_bytes(bytes(data))
    out = run("audit", "--config", str(path), "--session", "s-1")
    assert out.returncode == 1 and "damaged" in out.stderr

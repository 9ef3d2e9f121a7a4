"""summary: a running summary past max_messages, recorded on the log so a rebuild never asks the model again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from helix_es import Event, MemoryCleared, Message, MessageAdded, open_memory
from helix_es.config import load_config
from helix_es.model.events import SummaryRecorded
from helix_es.projection.factory import open_log
from helix_es.views.summary import Summary, split
from projectors.lag import lag
from tests.conftest import unique, wait_for
from tests.model_server import ModelServer

ROOT = Path(__file__).resolve().parent.parent


def turn(i: int) -> Message:
    return Message("user" if i % 2 == 0 else "assistant", f"Fact {i}: the sky is colour {i}. Extra words follow.")


def test_fold_ignores_summaries_from_before_a_clear_and_repeats() -> None:
    view = Summary(4)
    state: tuple[Message, ...] = ()
    for i in range(5):
        state = view.fold(state, Event("ns", "s", MessageAdded(turn(i))))
    header, _ = split(state)
    summary = Event("ns", "s", SummaryRecorded(view.name, header.epoch, 2, "first two"))
    summarised = view.fold(state, summary)
    assert [m.content for m in view.render(summarised)][1:] == [turn(i).content for i in (2, 3, 4)]
    assert view.fold(summarised, summary) == summarised  # a re-recorded summary changes nothing
    cleared = view.fold(summarised, Event("ns", "s", MemoryCleared()))
    assert view.render(cleared) == []
    assert view.fold(cleared, summary) == cleared  # from before the clear: void
    other_view = Event("ns", "s", SummaryRecorded("summary-99", header.epoch, 2, "not mine"))
    assert view.fold(state, other_view) == state


async def test_embedded_summary_keeps_context_bounded(tmp_path: Path) -> None:
    cfg = {"log": {"path": str(tmp_path)}, "memory": {"type": "summary", "max_messages": 4, "namespace": "n"}}
    async with open_memory(cfg, session_id="s") as mem:
        for i in range(9):
            await mem.add(turn(i))
            got = await mem.get()
            assert len([m for m in got if m.metadata.get("helix.summary") != "true"]) <= 5
        got = await mem.get()
        assert got[0].role == "system" and got[0].content.startswith("Summary of the earlier conversation")
        assert "Fact 0" in got[0].content  # earlier facts survive in the summary
        assert [m.content for m in got[1:]] == [turn(i).content for i in (6, 7, 8)]
        assert (await mem.search("fact 1:", limit=5))[0].metadata == {"helix.summary": "true"}


@pytest.mark.parametrize("store", ["memory", "redis", "postgres"])
async def test_a_summary_asked_while_catching_up_reaches_the_view_caught_up(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    """Found by the crash stress loop: a writer on the embedded log died after adding a turn that made a
    summary due and before asking for it. The next process's catch-up asked for it and recorded it on the
    log, past where its read ended, and folded it into every view attached before, but not into the one
    catching up: that view never held the summary the log records, not even after later adds."""
    where = {"redis": {"redis_url": "redis_url"}, "postgres": {"dsn": "postgres_dsn"}}.get(store, {})
    memory = {"type": "summary", "max_messages": 4, "namespace": unique("sumcatch"), "store": store}
    memory.update({key: request.getfixturevalue(fixture) for key, fixture in where.items()})
    cfg = {"log": {"path": str(tmp_path)}, "memory": memory}
    ns = memory["namespace"]
    log = open_log(load_config(cfg).log)
    try:
        for i in range(6):  # due past 4 messages; the writer died before asking
            await log.append(Event(ns, "s", MessageAdded(turn(i))))
    finally:
        await log.close()
    async with open_memory(cfg, session_id="s") as mem:
        async with open_memory(cfg, session_id="t") as other:
            await other.add(turn(6))  # another session's add moves the checkpoint past the recorded summary
        got = await mem.get()
    log = open_log(load_config(cfg).log)
    try:
        events = [r.event async for r in log.read(ns, session_id="s")]
    finally:
        await log.close()
    assert [type(e.payload).__name__ for e in events].count("SummaryRecorded") == 1
    view = load_config(cfg).memory.view
    state: tuple[Message, ...] = ()
    for event in events:
        state = view.fold(state, event)
    assert got == view.render(state)
    assert got[0].content.startswith("Summary of the earlier conversation")


async def test_openai_summariser_is_called_live_and_never_on_rebuild(
    tmp_path: Path, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_MODEL_KEY", "sk-test-123")
    summariser = {
        "provider": "openai",
        "model": "tiny-summary",
        "base_url": model_server.base_url,
        "api_key_env": "TEST_MODEL_KEY",
    }
    cfg = {
        "log": {"path": str(tmp_path)},
        "memory": {"type": "summary", "max_messages": 4, "namespace": "n", "summariser": summariser},
    }
    async with open_memory(cfg, session_id="s") as mem:
        for i in range(9):
            await mem.add(turn(i))
        before = await mem.get()
    calls = model_server.count("/chat/completions")
    assert calls == 3
    _, body, headers = model_server.calls[0]
    assert body["model"] == "tiny-summary" and body["temperature"] == 0
    assert headers["Authorization"] == "Bearer sk-test-123"
    assert before[0].content.endswith("summary #3 of " + before[0].content.rsplit(" of ", 1)[1])

    async with open_memory(cfg, session_id="s") as mem:  # a new process's memory store: rebuilt from the file
        assert await mem.get() == before
    assert model_server.count("/chat/completions") == calls

    log = open_log(load_config(cfg).log)
    kinds = [type(r.event.payload).__name__ async for r in log.read("n", session_id="s")]
    await log.close()
    assert kinds.count("SummaryRecorded") == 3 and kinds.count("MessageAdded") == 9


async def test_kafka_projector_records_summaries_in_postgres_and_rebuilds_without_the_model(
    tmp_path: Path, kafka_bootstrap: str, postgres_dsn: str, model_server: ModelServer
) -> None:
    ns, prefix = unique("sum"), unique("sum")
    cfg: dict[str, Any] = {
        "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 2, "topic_prefix": prefix},
        "memory": {
            "type": "summary",
            "tool_pairs": "split",  # asserts the seed-cut view by its name
            "max_messages": 4,
            "store": "postgres",
            "dsn": postgres_dsn,
            "namespace": ns,
            "read_timeout": 60,
            "summariser": {"provider": "openai", "model": "m", "base_url": model_server.base_url},
        },
    }
    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(cfg))

    def projector() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "helix_es.cli", "project", "--config", str(path)],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ},
        )

    async def summarised(mem: Any) -> bool:
        got = await mem.get()
        return bool(got) and got[0].metadata.get("helix.summary") == "true" and "summary #2" in got[0].content

    proc = projector()
    try:
        async with open_memory(cfg, session_id="s") as mem:
            for i in range(7):
                await mem.add(turn(i))
            await wait_for(lambda: summarised(mem), 60, "two recorded summaries")
            before = await mem.get()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    calls = model_server.count("/chat/completions")

    conn = await asyncpg.connect(postgres_dsn)
    try:
        rows = await conn.fetch(
            "SELECT message->>'content' AS content FROM helix_summary "
            "WHERE view = 'summary-4' AND namespace = $1 ORDER BY seq",
            ns,
        )
        assert rows[0]["content"].startswith("summary #2")
        # Throw the view away: the next projector rebuilds it from the log alone.
        await conn.execute("DELETE FROM helix_summary WHERE namespace = $1", ns)
        await conn.execute("DELETE FROM helix_summary_sessions WHERE namespace = $1", ns)
        await conn.execute("DELETE FROM helix_checkpoints WHERE topic LIKE $1", f"{prefix}.%")
    finally:
        await conn.close()
    proc = projector()
    try:
        cfg["memory"]["consistency"] = "eventual"
        async with open_memory(cfg, session_id="s") as mem:
            await wait_for(lambda: _equals(mem, before), 60, "the rebuilt view")
        # Past the point where it would have asked the model: its checkpoints cover the whole log,
        # the recorded summaries included (a summary it made now would be a new record, and lag).
        await wait_for(lambda: _caught_up(path), 60, "the rebuilding projector to reach the log's end")
        assert await mem_get(cfg) == before
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert model_server.count("/chat/completions") == calls


async def _caught_up(path: Path) -> bool:
    report = await lag(str(path))
    return bool(report.partitions) and report.total() == 0


async def mem_get(cfg: dict[str, Any]) -> list[Message]:
    async with open_memory(cfg, session_id="s") as mem:
        return await mem.get()


async def _equals(mem: Any, expected: list[Message]) -> bool:
    return await mem.get() == expected


async def _drive(batches: list[list[Message]], live: list[bool] | None = None) -> tuple[list[int], list[Message]]:
    """Feed batches through a summary projection, appending its derived events like a driver does.

    `live[i]` says whether batch i reaches the end of the log (a driver catching up folds batches that do not)."""
    from helix_es.model.events import Position, Record
    from helix_es.projection.summary import SummaryProjection
    from helix_es.providers.summarise import ExtractiveSummariser
    from helix_es.stores.memory.views import MemoryStore
    from helix_es.stores.ports import SessionKey

    projection = SummaryProjection(Summary(4), MemoryStore(), summariser=ExtractiveSummariser())
    offset, covers, pending = 0, [], []
    for i, batch in enumerate(batches):
        records = []
        for msg in batch:
            records.append(Record(Event("ns", "s", MessageAdded(msg)), Position("t", 0, offset)))
            offset += 1
        if live is not None and not live[i]:
            assert not (await projection.apply(records, live=False)).derived
            continue
        pending.append(records)
        while pending:
            applied = await projection.apply(pending.pop(0))
            derived = []
            for event in applied.derived:
                covers.append(event.payload.covers)  # type: ignore[union-attr]
                derived.append(Record(event, Position("t", 0, offset)))
                offset += 1
            if derived:
                pending.append(derived)
    view = await projection.get(SessionKey("ns", "s"), None)
    return covers, view or []


async def test_summaries_do_not_depend_on_how_events_are_batched() -> None:
    turns = [turn(i) for i in range(11)]
    one_by_one = await _drive([[t] for t in turns])
    all_at_once = await _drive([turns])
    in_threes = await _drive([turns[i : i + 3] for i in range(0, 11, 3)])
    assert one_by_one[0] == [2, 4, 6, 8]
    assert all_at_once == one_by_one
    assert in_threes[0] == one_by_one[0]


async def test_a_summary_owed_by_a_catch_up_batch_keeps_its_cut_when_the_next_batch_adds_more() -> None:
    """Found by the property test under load: a summary fell due in a batch folded while catching up, and
    the partition's next (live) batch added to the session: it planned afresh from the stored view, so
    the owed summary covered three messages instead of the two it covers when folded one by one."""
    turns = [turn(i) for i in range(11)]
    one_by_one = await _drive([[t] for t in turns])
    caught_up = await _drive([turns[:5], turns[5:6], turns[6:]], live=[False, True, True])
    behind_twice = await _drive([turns[:5], turns[5:7], turns[7:]], live=[False, False, True])
    assert caught_up == one_by_one
    assert behind_twice == one_by_one

"""composite: one event per add, every part folds it; reads merge the parts, deduplicated."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helix_es import ConfigError, InvalidInput, Message, ToolCall, load_config, open_memory
from helix_es.client.composite import merge
from helix_es.projection.factory import open_log
from tests.conftest import unique

ROOT = Path(__file__).resolve().parent.parent
PARTS = [{"type": "sliding-window", "window_size": 2}, {"type": "conversation"}]


def test_merge_dedups_on_role_and_content_keeping_part_order() -> None:
    a, b, c = Message("user", "a"), Message("assistant", "b"), Message("user", "c")
    call_1 = Message("assistant", "", tool_calls=(ToolCall("1", "f"),))
    call_2 = Message("assistant", "", tool_calls=(ToolCall("2", "f"),))
    assert merge([[b, c], [a, b, c, Message("user", "a", metadata={"x": "y"})]]) == [b, c, a]
    assert merge([[call_1], [call_2]]) == [call_1, call_2]  # empty content: the calls tell them apart
    assert merge([[a, b], [c]], limit=2) == [a, b]


async def history(cfg: dict[str, Any], ns: str, session: str) -> list[str]:
    log = open_log(load_config(cfg).log)
    try:
        return [type(r.event.payload).__name__ async for r in log.read(ns, session_id=session)]
    finally:
        await log.close()


async def test_embedded_composite_writes_one_event_and_merges(tmp_path: Path) -> None:
    ns = unique("comp")
    cfg = {"log": {"path": str(tmp_path)}, "memory": {"type": "composite", "namespace": ns, "backends": PARTS}}
    async with open_memory(cfg, session_id="s") as mem:
        for text in ["one", "two", "three"]:
            await mem.add(Message("user", text))
        # window [two, three] first, then the conversation's remaining [one]; duplicates dropped
        assert [m.content for m in await mem.get()] == ["two", "three", "one"]
        assert [m.content for m in await mem.search("T", limit=5)] == ["two", "three"]
        assert [m.content for m in await mem.search("e", limit=2)] == ["three", "one"]
        await mem.clear()
        assert await mem.get() == []
    assert await history(cfg, ns, "s") == ["MessageAdded"] * 3 + ["MemoryCleared"]


async def test_a_composite_reads_and_corrects_facts_through_its_facts_part(tmp_path: Path) -> None:
    ns = unique("comp")
    # batches never come due by themselves: extract() alone asks (a background round beside it would ask again)
    facts = {"type": "facts", "extract": {"provider": "rules"}, "batch": {"turns": 100, "idle": 3600}}
    backends = [{"type": "sliding-window", "window_size": 2}, facts]
    cfg = {"log": {"path": str(tmp_path)}, "memory": {"type": "composite", "namespace": ns, "backends": backends}}
    async with open_memory(cfg, session_id="s") as mem:
        await mem.add(Message("user", "I live in Lisbon", name="ana"))
        assert await mem.extract_now() == 1  # type: ignore[attr-defined]
        found = await mem.facts(subject="ANA")  # type: ignore[attr-defined]
        assert [(f.subject, f.predicate, f.value, f.model) for f in found] == [
            ("ana", "lives_in", "Lisbon", "rules/v1")
        ]
        asserted = await mem.assert_fact("ana", "works at", "Acme", reason="she said so")  # type: ignore[attr-defined]
        assert mem.pending() == asserted  # every part's reads wait for it, as for an add
        now = {f.predicate: f for f in await mem.facts()}  # type: ignore[attr-defined]
        assert now["works_at"].value == "Acme" and now["works_at"].model is None
        gone = await mem.retract_fact(now["lives_in"].id, "moved away")  # type: ignore[attr-defined]
        assert gone.offset > asserted.offset
        assert [f.predicate for f in await mem.facts()] == ["works_at"]  # type: ignore[attr-defined]
        past = await mem.facts(predicate="lives_in", history=True)  # type: ignore[attr-defined]
        assert [f.known_to is not None for f in past] == [True]
        # the window's turn, then the facts part's answer: what holds now
        assert [m.content for m in await mem.get()] == ["I live in Lisbon", "Known facts:\n- ana works at Acme"]
    assert await history(cfg, ns, "s") == [
        "MessageAdded",
        "FactsExtracted",
        "FactAsserted",
        "FactRetracted",
    ]


async def test_a_composite_without_a_facts_part_says_so(tmp_path: Path) -> None:
    ns = unique("comp")
    cfg = {"log": {"path": str(tmp_path)}, "memory": {"type": "composite", "namespace": ns, "backends": PARTS}}
    async with open_memory(cfg, session_id="s") as mem:
        with pytest.raises(InvalidInput) as err:
            await mem.facts()  # type: ignore[attr-defined]
        assert err.value.field == "memory" and "(sliding-window-2-pairs, conversation)" in err.value.problem
        with pytest.raises(InvalidInput):
            await mem.assert_fact("ana", "likes", "tea")  # type: ignore[attr-defined]
    assert await history(cfg, ns, "s") == []


def test_composite_config_errors_name_the_part() -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"memory": {"type": "composite", "backends": [{"type": "sliding-window", "window_size": 0}]}})
    assert err.value.field == "memory.backends[0].window_size"
    with pytest.raises(ConfigError) as err:
        load_config({"memory": {"type": "composite", "backends": [{"type": "conversation", "namespace": "x"}]}})
    assert err.value.field == "memory.backends[0].namespace"
    with pytest.raises(ConfigError, match="non-empty list"):
        load_config({"memory": {"type": "composite", "backends": []}})


async def test_composite_over_kafka_with_one_projector_process(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, postgres_dsn: str
) -> None:
    ns, prefix = unique("comp"), unique("comp")
    cfg: dict[str, Any] = {
        "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 2, "topic_prefix": prefix},
        "memory": {
            "type": "composite",
            "namespace": ns,
            "read_timeout": 60,
            "backends": [
                {
                    "type": "sliding-window",
                    "window_size": 2,
                    "tool_pairs": "split",
                    "store": "redis",
                    "redis_url": redis_url,
                },
                {"type": "conversation", "store": "postgres", "dsn": postgres_dsn},
            ],
        },
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
    try:
        async with open_memory(cfg, session_id="s") as mem:
            for text in ["one", "two", "three"]:
                await mem.add(Message("user", text))
            assert [m.content for m in await mem.get()] == ["two", "three", "one"]  # both parts caught up
            await mem.clear()
            await mem.add(Message("user", "four"))
            assert [m.content for m in await mem.get()] == ["four"]
        assert await history(cfg, ns, "s") == ["MessageAdded"] * 3 + ["MemoryCleared", "MessageAdded"]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "view sliding-window-2 (redis store)" in err and "view conversation (postgres store)" in err

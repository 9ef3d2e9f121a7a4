"""Compaction: `mem.compact()` records a summary standing for a session's oldest messages; views show it
as one system message, `mem.expand` returns what it stood for, a reopen (a rebuild from the log) shows
the same without asking the summariser, and `compact_at_tokens:` compacts in the background."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helix_es import Message, open_memory
from helix_es.config import load_config
from helix_es.model.errors import ConfigError, InvalidInput
from helix_es.model.events import SessionCompacted
from helix_es.views.base import parse_position
from tests.conftest import unique


def config(tmp_path: Path, ns: str, memory: dict[str, Any]) -> dict[str, Any]:
    return {"log": {"path": str(tmp_path), "fsync": False}, "memory": {"namespace": ns, **memory}}


def said(n: int) -> list[Message]:
    return [Message("user" if i % 2 == 0 else "assistant", f"turn {i}. More words here.") for i in range(n)]


async def test_compact_replaces_the_oldest_messages_with_one_summary_and_expand_returns_them(tmp_path: Path) -> None:
    ns = unique("cp")
    cfg = config(tmp_path, ns, {"type": "conversation"})
    async with open_memory(cfg, session_id="s") as mem:
        m: Any = mem
        await mem.add_many(said(10))
        position = await m.compact(keep=4)
        got = await mem.get()
        assert [x.content for x in got[1:]] == [f"turn {i}. More words here." for i in range(6, 10)]
        summary = got[0]
        assert summary.role == "system" and parse_position(summary.metadata["compacted"]) == position
        assert "user: turn 0." in summary.content and "assistant: turn 5." in summary.content  # extractive
        assert await m.expand(position) == said(10)[:6]
        assert await m.expand(summary.metadata["compacted"]) == said(10)[:6]  # the metadata's text works too
        await mem.add_many(said(12)[10:])
        again = await m.compact(keep=2)  # the first summary is covered too: expand goes through it
        got = await mem.get()
        assert len(got) == 3 and parse_position(got[0].metadata["compacted"]) == again
        assert await m.expand(again) == said(12)[:10]
        assert await m.compact(keep=2) is None  # one summary and the newest two: nothing more to go
    async with open_memory(cfg, session_id="s") as mem:  # folded again from the log: no summariser asked
        assert [x.content for x in await mem.get()] == [x.content for x in got]
    from helix_es.log.embedded import EmbeddedLog

    log = EmbeddedLog(tmp_path)
    try:
        events = [r.event.payload async for r in log.read(ns)]
    finally:
        await log.close()
    compactions = [p for p in events if isinstance(p, SessionCompacted)]
    assert [(c.view, c.first, c.last, c.covers, c.model, c.reason) for c in compactions] == [
        ("conversation", 0, 5, 6, "extractive", "request"),
        ("conversation", 0, 9, 5, "extractive", "request"),  # the first summary (adds 0-5) and adds 6-9
    ]


async def test_a_window_keeps_its_system_prompt_and_evicts_past_the_summary(tmp_path: Path) -> None:
    ns = unique("cp")
    cfg = config(tmp_path, ns, {"type": "sliding-window", "window_size": 6})
    async with open_memory(cfg, session_id="s") as mem:
        m: Any = mem
        await mem.add(Message("system", "You are terse."))
        await mem.add_many(said(5))
        position = await m.compact(keep=2)
        got = await mem.get()
        assert got[0].content == "You are terse." and "compacted" in got[1].metadata
        assert [x.content for x in got[2:]] == ["turn 3. More words here.", "turn 4. More words here."]
        assert await m.expand(position) == said(3)
        await mem.add_many(said(9)[5:])  # the window evicts the summary first; the prompt stays pinned
        assert [x.content for x in await mem.get()][:1] == ["You are terse."]


async def test_a_window_that_evicts_while_the_summariser_runs_is_summarised_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adds land while the summariser runs (a background compaction, an agent going on) and the window
    evicts: the summary it wrote no longer stands for the view's oldest messages, so it asks again for
    the ones now oldest instead of replacing newer messages than it read."""
    from helix_es.providers.summarise import ExtractiveSummariser

    ns = unique("cp")
    cfg = config(tmp_path, ns, {"type": "sliding-window", "window_size": 6})
    async with open_memory(cfg, session_id="s") as mem:
        m: Any = mem
        await mem.add_many(said(6))
        asked: list[list[str]] = []
        summarise = ExtractiveSummariser.summarise

        async def racing(self: Any, previous: str, messages: Any) -> str:
            asked.append([x.content for x in messages])
            if len(asked) == 1:
                await mem.add_many(said(8)[6:])  # the window evicts turns 0 and 1
            return await summarise(self, previous, messages)

        monkeypatch.setattr(ExtractiveSummariser, "summarise", racing)
        position = await m.compact(keep=2)
        assert asked == [[x.content for x in said(4)], [x.content for x in said(6)[2:]]]
        got = await mem.get()
        assert "turn 2." in got[0].content and "turn 0." not in got[0].content
        assert [x.content for x in got[1:]] == ["turn 6. More words here.", "turn 7. More words here."]
        assert await m.expand(position) == said(6)[2:]


async def test_compact_at_tokens_compacts_in_the_background(tmp_path: Path) -> None:
    ns = unique("cp")
    cfg = config(tmp_path, ns, {"type": "conversation", "compact_at_tokens": 60})
    async with open_memory(cfg, session_id="s") as mem:
        m: Any = mem
        for message in said(12):
            await mem.add(message)
            await m.compacted()
        got = await mem.get()
        assert "compacted" in got[0].metadata and len(got) < 12
        assert [m.metadata.get("compacted") is None for m in got[1:]] == [True] * (len(got) - 1)  # one summary
        assert await m.expand(got[0].metadata["compacted"]) + got[1:] == said(12)  # nothing lost


async def test_views_that_do_not_compact_say_so() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({"memory": {"type": "long-term", "compact_at_tokens": 10}})
    assert caught.value.field == "memory.compact_at_tokens"
    with pytest.raises(ConfigError) as caught:
        load_config({"memory": {"type": "conversation", "compact_at_tokens": 0}})
    assert caught.value.field == "memory.compact_at_tokens"


async def test_bad_compaction_input_is_refused(tmp_path: Path) -> None:
    async with open_memory(config(tmp_path, unique("cp"), {"type": "conversation"}), session_id="s") as mem:
        m: Any = mem
        await mem.add(Message("user", "hi"))
        with pytest.raises(InvalidInput, match="keep"):
            await m.compact(keep=-1)
        with pytest.raises(InvalidInput, match="position"):
            await m.expand("nonsense")
        with pytest.raises(InvalidInput, match="no compaction"):
            await m.expand("helix.memory.x:0:0")
    async with open_memory(config(tmp_path, unique("cp"), {"type": "smart"}), session_id="s") as mem:
        with pytest.raises(InvalidInput, match="does not compact"):
            await mem.compact()  # type: ignore[attr-defined]


@pytest.mark.parametrize("store", ["redis", "postgres"])
async def test_on_kafka_a_compaction_is_folded_by_the_projector_and_a_rebuild_shows_the_same(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, postgres_dsn: str, store: str
) -> None:
    from helix_es.config import load_config as load
    from helix_es.projection.aliases import current_target
    from tests.conftest import cli, start_projector, stop
    from tests.test_rebuild import write_config

    ns, prefix = unique("kcp"), unique("kcp")
    where = {"redis_url": redis_url} if store == "redis" else {"dsn": postgres_dsn}
    cfg = {
        "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 2, "topic_prefix": prefix},
        "memory": {"type": "conversation", "store": store, **where, "namespace": ns, "read_timeout": 30},
    }
    path = write_config(tmp_path, cfg)
    projector = start_projector(cfg, tmp_path)
    try:
        async with open_memory(cfg, session_id="s") as mem:
            m: Any = mem
            await mem.add_many(said(8))
            position = await m.compact(keep=3)
            before = await mem.get()
            assert len(before) == 4 and parse_position(before[0].metadata["compacted"]) == position
            assert await m.expand(position) == said(8)[:5]
        code, _, err = await cli("rebuild", "--config", str(path), "--json")
        assert code == 0, err
        assert await current_target(load(cfg).memory, prefix) == "conversation@v2"
        async with open_memory(cfg, session_id="s") as mem:  # reads the rebuilt target
            assert await mem.get() == before
    finally:
        stop(projector)


async def test_an_encrypted_memory_summarises_opened_text_and_seals_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summariser reads what was said, not ciphertext; the summary on the log is sealed with the
    session's key like the messages it stands for; `expand` opens the originals."""
    import base64
    import os

    monkeypatch.setenv("HELIX_ENCRYPTION_KEY", base64.b64encode(os.urandom(32)).decode())
    ns = unique("cp")
    cfg = {**config(tmp_path, ns, {"type": "conversation"}), "memory_middleware": ["encryption"]}
    async with open_memory(cfg, session_id="s") as mem:
        m: Any = mem
        await mem.add_many(said(6))
        position = await m.compact(keep=2)
        got = await mem.get()
        assert "user: turn 0." in got[0].content and "compacted" in got[0].metadata  # opened, readable
        assert await m.expand(position) == said(6)[:4]
    from helix_es.log.embedded import EmbeddedLog

    log = EmbeddedLog(tmp_path)
    try:
        (compaction,) = [r.event.payload async for r in log.read(ns) if isinstance(r.event.payload, SessionCompacted)]
    finally:
        await log.close()
    assert compaction.summary.startswith("helix-enc:") and "turn 0" not in compaction.summary

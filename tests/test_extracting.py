"""The embedded extraction worker (helix_es.client.extracting) in a memory's life: it stops when the memory closes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from helix_es import Message, open_memory
from helix_es.model.errors import EventTooLarge
from helix_es.model.events import Event, ExtractedFact, FactsExtracted
from tests.conftest import unique


def facts_config(tmp_path: Path, ns: str) -> dict[str, Any]:
    return {
        "log": {"path": str(tmp_path), "fsync": False},
        "memory": {"type": "composite", "namespace": ns, "backends": [{"type": "conversation"}, {"type": "facts"}]},
    }


def extracted(ns: str, value: str) -> Event:
    return Event(ns, "s", FactsExtracted("facts", "rules/v1", "", (ExtractedFact("ana", "likes", value),), ()))


@pytest.mark.timeout(30)
async def test_a_memory_closes_right_after_a_turn_woke_its_extraction(tmp_path: Path) -> None:
    """A cancel that met the worker's wake-up was lost in asyncio.wait_for on 3.11: close waited for ever."""
    ns = unique("ex")
    cfg = {
        "log": {"path": str(tmp_path), "fsync": False},
        "memory": {"type": "facts", "namespace": ns, "extract": {"provider": "rules"}},
    }

    async def session(text: str) -> None:
        async with open_memory(cfg, session_id="s") as mem:
            await mem.add(Message("user", text, name="ana"))  # wakes the worker
            await mem.backend.extract(ns)  # type: ignore[attr-defined]

    for text in ("I live in Lisbon", "I speak Portuguese"):
        started = time.monotonic()
        await session(text)
        assert time.monotonic() - started < 10  # the pytest timeout ends a close that never returns
    async with open_memory(cfg, session_id="s") as mem:
        assert sorted(f.value for f in await mem.facts()) == ["Lisbon", "Portuguese"]  # type: ignore[attr-defined]


async def test_an_add_does_not_fold_the_facts_view_its_reads_catch_it_up(tmp_path: Path) -> None:
    """The facts view lags by design: an add writes the log and folds the conversation only; a read of
    facts (or the worker's next round) folds what the log holds, asserted facts included."""
    from helix_es.projection.facts import facts_rows_of

    ns = unique("ex")
    async with open_memory(facts_config(tmp_path, ns), session_id="s") as mem:
        await mem.add(Message("user", "I live in Lisbon", name="ana"))
        await mem.add(Message("user", "I speak Dutch", name="ana"))
        backend = mem.backend  # type: ignore[attr-defined]
        facts_view = next(p for p in backend._projections.values() if facts_rows_of(p) is not None)
        rows = facts_rows_of(facts_view)
        assert rows is not None and await rows.pending(ns) == []  # not folded by the adds
        conversation = next(p for p in backend._projections.values() if p is not facts_view)
        topic = f"helix.memory.{ns}"
        assert await conversation.checkpoint(topic, 0) == 1  # the conversation is: both adds
        await mem.assert_fact("ana", "lives_in", "Porto", reason="she moved")  # type: ignore[attr-defined]
        assert [f.value for f in await mem.facts("ana")] == ["Porto"]  # type: ignore[attr-defined]
        pending = await rows.pending(ns) or []
        assert [r["content"] for r in pending] == ["I live in Lisbon", "I speak Dutch"]  # the read caught it up


async def test_the_workers_events_ride_on_the_next_add_and_a_bad_one_fails_alone(tmp_path: Path) -> None:
    """What the worker derived is written with the next add (one write, one sync), not in a sync of its own
    that an add would wait behind; an event that cannot be written fails the worker's call, never the add."""
    # (A rider the log refuses in the write itself fails alone too: Backend._append_locked_many writes the add again.)
    ns = unique("ex")
    async with open_memory(facts_config(tmp_path, ns), session_id="s") as mem:
        backend = mem.backend  # type: ignore[attr-defined]
        riding = asyncio.ensure_future(backend.append_derived([extracted(ns, "tea")]))
        while not backend._riders.get(ns):
            await asyncio.sleep(0)  # encoded, then queued: waiting for an add
        added = await mem.add(Message("user", "hello"))
        (position,) = await asyncio.wait_for(riding, 0.1)  # with the add, before its 0.2 s wait for one ran out
        assert position.offset == added.offset - 1  # written just before the add, in the same write

        with pytest.raises(EventTooLarge):  # refused when it is encoded, before it could ride on an add
            await backend.append_derived([extracted(ns, "x" * 1_000_000)])
        again = await mem.add(Message("user", "still here"))
        assert again.offset == added.offset + 1  # the add landed alone, nothing of the rider
        # the conversation, then what the facts view knows: the rider that landed, not the one refused
        assert [m.content for m in await mem.get()] == ["hello", "still here", "Known facts:\n- ana likes tea"]

        alone = await backend.append_derived([extracted(ns, "jazz")])  # no add comes: written on its own
        assert alone[0].offset == again.offset + 1

"""The embedded extraction worker (helix_es.client.extracting) in a memory's life: it stops when the memory closes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from helix_es import Message, open_memory
from tests.conftest import unique


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

"""The eval through the product: each dialogue imported into a namespace, each question asked with
`Memory.recall` in every `search:` mode (bench/recall.py's `--product` rows).

A dialogue is one namespace (a session per dated session, each turn a message named by its
speaker and dated by `occurred_at`), added with `add_many` on the embedded log into a vector view
with `search: hybrid`; every mode is asked of that one view (`mode=`). A hit is mapped back to its
turn by its log position. The embedder is the view's: `local` (MiniLM) when installed, else `hash`.
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from typing import Any

from helix_es import Message, open_memory
from helix_es.model.events import Position
from helix_es.model.recall import SEARCH_MODES


def config(path: str, namespace: str, embed: str, store: dict[str, Any]) -> dict[str, Any]:
    memory = {"type": "vector", "search": "hybrid", "namespace": namespace, "embed": {"provider": embed}, **store}
    return {"log": {"type": "embedded", "path": path, "fsync": False}, "memory": memory}


async def _load(dialogues: Any, embed: str, store: dict[str, Any]) -> tuple[dict[str, Any], dict[Position, str]]:
    """Every dialogue added through the product: its namespace's config, and turn ids by log position."""
    path = tempfile.mkdtemp(prefix="helix-recall-")
    configs: dict[str, Any] = {}
    turns: dict[Position, str] = {}
    for name, dialogue in dialogues.items():
        cfg = config(path, f"recall-{name}-{uuid.uuid4().hex[:6]}", embed, store)
        configs[name] = cfg
        sessions: dict[str, list[Any]] = {}
        for turn in dialogue.turns:
            sessions.setdefault(turn.id.rsplit("-", 1)[0], []).append(turn)
        for session, said in sessions.items():
            async with open_memory(cfg, session_id=session) as mem:
                messages = [Message("user", t.text, name=t.speaker, occurred_at=_when(t.time_us)) for t in said]
                positions = await mem.add_many(messages)
                turns.update(zip(positions, (t.id for t in said), strict=True))
    return configs, turns


def _when(us: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)


def rows(
    dialogues: Any, questions: list[dict[str, Any]], evaluate: Any, embed: str, store: dict[str, Any]
) -> list[Any]:
    """One row per `search:` mode, `product/<mode>/<embed>`; each query's time is the product's own
    (the question embedded, read-your-writes checked, ranked, fused, hits made)."""
    loop = asyncio.new_event_loop()
    stack = AsyncExitStack()
    try:
        configs, turns = loop.run_until_complete(_load(dialogues, embed, store))
        opened = {
            name: loop.run_until_complete(stack.enter_async_context(open_memory(cfg, session_id="asker")))
            for name, cfg in configs.items()
        }
        out = []
        for mode in SEARCH_MODES:

            def rank(q: dict[str, Any], mode: str = mode) -> list[str]:
                hits = loop.run_until_complete(opened[q["dialogue"]].recall(q["question"], limit=50, mode=mode))
                return [turns[h.position] for h in hits]

            out.append(evaluate(f"product/{mode}/{embed}", rank, questions))
        return out
    finally:
        loop.run_until_complete(stack.aclose())
        loop.close()

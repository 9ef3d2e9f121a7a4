"""The facts eval (bench/facts_eval) through the product: each dialogue's turns added on the embedded log,
a stand-in model answering each turn as scripted, people's corrections through the memory's API, and
every current fact, every history and every as-of answer exactly as expected, on every store."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AsyncExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from helix_es import Message, open_memory
from helix_es.client.runtime import Runtime
from tests.conftest import unique
from tests.model_server import ModelServer

DATA = json.loads((Path(__file__).parent.parent / "bench" / "facts_eval" / "dialogues.json").read_text())
DIALOGUES = {d["dialogue"]: d for d in DATA["dialogues"]}


def _at(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


async def play(dialogue: dict[str, Any], cfg: Callable[[str], dict[str, Any]]) -> Any:
    """Add the dialogue's turns session by session, make its corrections, extract; the last memory."""
    corrections: dict[int, list[dict[str, Any]]] = {}
    for c in dialogue["corrections"]:
        corrections.setdefault(c["after_turn"], []).append(c)
    async with Runtime() as runtime, AsyncExitStack() as stack:
        memories: dict[str, Any] = {}
        mem: Any = None
        for i, turn in enumerate(dialogue["turns"]):
            sid = turn["session_id"]
            if sid not in memories:
                memories[sid] = await stack.enter_async_context(open_memory(cfg(sid), runtime=runtime))
            mem = memories[sid]
            message = Message(
                role=turn["role"], content=turn["content"], name=turn["name"], occurred_at=_at(turn["said_at"])
            )
            await mem.add(message)
            for c in corrections.get(i, []):
                if "retract" in c:  # a person retracts a fact they see: it was extracted by then
                    await mem.backend.extract(mem.namespace)
                    r = c["retract"]
                    (fact,) = [
                        f
                        for f in await mem.facts(subject=r["subject"], predicate=r["predicate"])
                        if f.value == r["value"]
                    ]
                    await mem.retract_fact(fact.id, reason=r["reason"])
                else:
                    a = c["assert"]  # made at `at`: with no valid time of its own, it holds from then
                    valid = _at(a["valid_from"]) or _at(c["at"])
                    await mem.assert_fact(a["subject"], a["predicate"], a["value"], valid_from=valid)
        await mem.backend.extract(mem.namespace)
        return {
            "current": sorted(
                (f.subject, f.predicate, f.value) for f in await mem.facts(as_of=datetime.now().astimezone())
            ),
            "history": sorted(
                (f.subject, f.predicate, f.value, f.valid_from, f.valid_to)
                for f in await mem.facts(history=True)
                if f.known_to is None
            ),
            "as_of": [
                sorted(
                    f.value
                    for f in await mem.facts(subject=q["subject"], predicate=q["predicate"], as_of=_at(q["as_of"]))
                )
                for q in dialogue["expect"]["as_of"]
            ],
        }


@pytest.mark.parametrize("store", ["memory", "redis", "postgres"])
@pytest.mark.parametrize("name", sorted(DIALOGUES))
async def test_every_fact_and_every_as_of_answer_is_exact(
    tmp_path: Path, store: str, name: str, model_server: ModelServer, request: pytest.FixtureRequest
) -> None:
    dialogue = DIALOGUES[name]
    for turn in dialogue["turns"]:
        model_server.facts_by_text[turn["content"]] = turn["facts"]
    ns = unique("eval")
    where: dict[str, Any] = {}
    if store == "redis":
        where["redis_url"] = request.getfixturevalue("redis_url")
    if store == "postgres":
        where["dsn"] = request.getfixturevalue("postgres_dsn")

    def cfg(session: str) -> dict[str, Any]:
        memory = {
            "type": "facts",
            "store": store,
            "namespace": ns,
            "session_id": session,
            "extract": {"provider": "openai", "base_url": model_server.base_url, "model": "stand-in"},
            "batch": {"turns": 100, "idle": 3600},  # extraction only when the test asks: a slow model
            **where,
        }
        return {"log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False}, "memory": memory}

    got = await play(dialogue, cfg)
    expect = dialogue["expect"]
    assert got["current"] == sorted((c["subject"], c["predicate"], c["value"]) for c in expect["current"])
    history = sorted(
        (h["subject"], h["predicate"], v["value"], _at(v["valid_from"]), _at(v["valid_to"]))
        for h in expect["history"]
        for v in h["values"]
    )
    assert got["history"] == history
    assert got["as_of"] == [sorted(q["values"]) for q in expect["as_of"]]
    # one model call per batch of a session's turns, never one per add
    assert model_server.extractions <= len({t["session_id"] for t in dialogue["turns"]}) + len(dialogue["corrections"])

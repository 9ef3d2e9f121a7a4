"""`fold_batch` starts a session's batch at its last clear: the same states, guards and counts as folding
every event, whatever the batch holds (clears, retries, events the guard covers already)."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace

import pytest

from helix_es.model.events import Event, MemoryCleared, MessageAdded, Position, Record, SessionErased
from helix_es.model.message import Message, ToolCall
from helix_es.projection.fold import fold_batch
from helix_es.stores.memory.views import MemoryStore
from helix_es.stores.ports import SessionKey
from helix_es.views.base import State, View
from helix_es.views.conversation import Conversation
from helix_es.views.sliding_window import SlidingWindow
from helix_es.views.summary import Summary
from helix_es.views.token_window import TokenWindow

VIEWS: list[View] = [SlidingWindow(3), TokenWindow(60), Conversation(), Summary(4)]


def _events(rng: random.Random, n: int) -> list[Record]:
    out = []
    for offset in range(n):
        sid = rng.choice("ab")
        r = rng.random()
        if r < 0.15:
            payload: object = MemoryCleared()
        elif r < 0.18:
            payload = SessionErased()
        elif r < 0.25:
            payload = MessageAdded(Message("assistant", "", tool_calls=(ToolCall(f"c{offset}", "f", "{}"),)))
        elif r < 0.3:
            payload = MessageAdded(Message("system", "be brief"))
        else:
            payload = MessageAdded(Message(rng.choice(["user", "assistant"]), "word " * rng.randint(1, 9)))
        event = Event("ns", sid, payload, uuid.UUID(int=offset))  # type: ignore[arg-type]
        record = Record(event, Position("t", 0, offset))
        if rng.random() < 0.25:
            record = replace(record, duplicate_of=max(0, offset - 1))
        out.append(record)
    return out


def _naive(view: View, records: list[Record], guards: dict[str, int | None]) -> tuple[dict[str, State], int]:
    states: dict[str, State] = {"a": (), "b": ()}
    applied = 0
    for r in records:
        sid = r.event.session_id
        guard = guards[sid]
        if guard is not None and r.position.offset <= guard:
            continue
        applied += 1
        if r.duplicate_of is None:
            states[sid] = view.fold(states[sid], r.event)
    return states, applied


@pytest.mark.parametrize("view", VIEWS, ids=lambda v: v.name)
@pytest.mark.parametrize("seed", range(40))
async def test_a_batch_folded_from_its_last_clear_is_every_event_folded(view: View, seed: int) -> None:
    rng = random.Random(seed)
    records = _events(rng, rng.randint(2, 40))
    store = MemoryStore()
    # The guards: some events of the batch applied already (a batch read again).
    cut = rng.randint(-1, len(records) // 2)
    guards: dict[str, int | None] = {"a": None, "b": None}
    if cut >= 0:
        await fold_batch(view, store, records[: cut + 1])
        for r in records[: cut + 1]:
            guards[r.event.session_id] = r.position.offset
    folded = await fold_batch(view, store, records)
    states, applied = _naive(view, records, guards)
    if cut >= 0:  # what the first call applied, folded from empty states
        states = _naive(view, records, {"a": None, "b": None})[0]
    assert folded.applied == applied
    for sid in "ab":
        key = SessionKey("ns", sid)
        snap = (await store.load(view, [key]))[key]
        if any(r.event.session_id == sid for r in records):
            assert snap.state == states[sid]
            assert snap.applied == max(r.position.offset for r in records if r.event.session_id == sid)

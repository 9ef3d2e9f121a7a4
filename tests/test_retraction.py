"""`MessageRetracted` in every session view: the newest message the view holds is taken back.

Pure folds first (conversation = undo of the add; windows one message fewer, never an evicted one
back; tool exchanges stay valid; smart's file map; summary), then `fold_batch` whatever the batch
holds, then through stores: embedded (memory, Redis, PostgreSQL) and Kafka with a real projector
(Redis, PostgreSQL), each compared with the pure fold and with the audit, which names the add each
retraction took back.
"""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path
from typing import Any

import pytest

from helix_es import Event, Message, MessageAdded, ToolCall, open_memory
from helix_es.client.memory import retract
from helix_es.history.audit import audit
from helix_es.model.errors import InvalidInput
from helix_es.model.events import MemoryCleared, MessageRetracted, Position, Record, SummaryRecorded
from helix_es.projection.fold import fold_batch
from helix_es.projection.vector import follow
from helix_es.stores.memory.views import MemoryStore
from helix_es.stores.ports import SessionKey
from helix_es.stores.ports.vector import TAIL, Tail
from helix_es.views.base import State, View
from helix_es.views.conversation import Conversation
from helix_es.views.sliding_window import SlidingWindow, pinned_index
from helix_es.views.smart import FILES, ROLE, Smart
from helix_es.views.summary import Summary
from helix_es.views.summary import split as summary_split
from helix_es.views.token_window import TokenWindow
from projectors.rebuild import rebuild
from tests.conftest import start_projector, stop, unique
from tests.test_idempotency import store_config
from tests.test_tool_pairs import agent_turns, invalid

RETRACT = Event("ns", "s", MessageRetracted())
VIEWS: list[View] = [Conversation(), SlidingWindow(7), TokenWindow(300), Conversation(max_length=9), Smart(1500)]


def added(m: Message) -> Event:
    return Event("ns", "s", MessageAdded(m))


def script(seed: int) -> list[Event]:
    """An agent's turns with retractions among them: now and then, between exchanges, one to three
    of the newest messages go and are added again (an edit), so the history stays valid chat input."""
    rng = random.Random(seed)
    messages = agent_turns(seed)
    out: list[Event] = []
    for i, m in enumerate(messages):
        out.append(added(m))
        boundary = i + 1 == len(messages) or messages[i + 1].role != "tool"
        if boundary and i >= 3 and rng.random() < 0.3:
            k = rng.randint(1, 3)
            out += [RETRACT] * k + [added(again) for again in messages[i + 1 - k : i + 1]]
    return out


def fold(view: View, events: list[Event]) -> State:
    return fold_from(view, (), events)


def fold_from(view: View, state: State, events: list[Event]) -> State:
    for e in events:
        state = view.fold(state, e)
    return state


def test_a_retraction_is_no_restart_and_the_payload_is_as_released() -> None:
    for view in [*VIEWS, Summary(8)]:
        assert MessageRetracted not in view.restarts
    assert MessageRetracted() == MessageRetracted(None, None)


@pytest.mark.parametrize("seed", range(8))
def test_the_conversation_takes_back_exactly_the_newest_add(seed: int) -> None:
    held: list[Message] = []  # what a list with append and pop holds
    state: State = ()
    for e in script(seed):
        state = Conversation().fold(state, e)
        if isinstance(e.payload, MessageAdded):
            held.append(e.payload.message)
        elif held:
            held.pop()
        assert list(state) == held
    assert Conversation().fold((), RETRACT) == ()  # nothing to take back: nothing changes


def held_messages(state: State) -> list[Message]:
    """What a window's retraction may take: not the pinned system message, not smart's notes or map."""
    pin = pinned_index(state)
    return [m for i, m in enumerate(state) if i != pin and ROLE not in m.metadata]


@pytest.mark.parametrize("view", VIEWS[1:], ids=lambda v: v.name)
@pytest.mark.parametrize("seed", range(6))
def test_windows_lose_the_newest_stay_valid_and_bring_nothing_back(view: View, seed: int) -> None:
    state: State = ()
    took = 0
    for e in script(seed):
        before = state
        state = view.fold(state, e)
        # Valid even after a retraction found nothing to take: results added again whose call the
        # window no longer holds are not kept.
        assert invalid(view.render(state)) is None, (view.name, state)
        if isinstance(e.payload, MessageAdded):
            continue
        real = held_messages(before)
        if not real:
            assert state == before  # nothing of its own left to take back: the pinned message stays
            continue
        assert held_messages(state) == real[:-1], view.name  # exactly its newest message went
        # Nothing evicted comes back: the window holds only what it held before (smart: notes aside).
        assert set(held_messages(state)) <= set(before)
        took += 1
    assert took > 5


def test_smart_takes_back_the_file_map_entry_of_a_retracted_result() -> None:
    view = Smart(100_000)
    call = Message("assistant", tool_calls=(ToolCall("c1", "read_file", '{"path": "a.py"}'),))
    events = [added(Message("system", "s")), added(Message("user", "read a.py")), added(call)]
    events.append(added(Message("tool", "print('a')", tool_call_id="c1")))
    state = fold(view, events)
    files = [m for m in state if m.metadata.get(ROLE) == "files"]
    assert files and '"a.py"' in files[0].metadata[FILES]
    state = view.fold(state, RETRACT)
    assert [m.role for m in state] == ["system", "user", "assistant"]  # the map went with its only entry
    # The pinned system message is never taken back by a view that evicts.
    assert view.fold(view.fold(view.fold(state, RETRACT), RETRACT), RETRACT) == (Message("system", "s"),)


def test_summary_takes_back_recent_messages_never_the_summary() -> None:
    view = Summary(4)
    state = fold(view, [added(Message("user", f"u{i}")) for i in range(6)])
    header, _ = summary_split(state)
    state = view.fold(state, Event("ns", "s", SummaryRecorded(view.name, header.epoch, 5, "five")))
    assert [m.content for m in view.render(state)][1:] == ["u5"]
    state = view.fold(state, RETRACT)
    assert [m.content for m in view.render(state)] == ["Summary of the earlier conversation:\nfive"]
    assert view.fold(state, RETRACT) == state


def call_and_results(call_id: str) -> list[Message]:
    call = Message("assistant", tool_calls=(ToolCall(call_id, "read_file", '{"path": "a.py"}'),))
    return [call, Message("tool", f"{call_id} done", tool_call_id=call_id)]


@pytest.mark.parametrize("view", [*VIEWS[1:], Summary(4), SlidingWindow(7, tool_pairs="split")], ids=lambda v: v.name)
def test_a_result_added_again_after_its_call_was_evicted_is_not_kept(view: View) -> None:
    """Eight long messages after a tool exchange evict it from every window. Nine retractions take
    them back and the result, then the result is added again (an edit): the log holds its call,
    the window does not, so the result would lead with no call before it."""
    call, result = call_and_results("c1")
    later = [Message("user", f"u{i} " + "word " * 400) for i in range(8)]
    events = [added(m) for m in (Message("system", "s"), Message("user", "u"), call, result, *later)]
    state = fold(view, events)
    if isinstance(view, Summary):  # a summary covers all but the newest message
        header, recent = summary_split(state)
        state = view.fold(state, Event("ns", "s", SummaryRecorded(view.name, header.epoch, len(recent) - 1, "sum")))
    assert call not in state
    state = fold_from(view, state, [RETRACT] * 9)
    again = view.fold(state, added(result))
    if view.name.endswith("-pairs") or isinstance(view, Smart):
        assert again == state, view.name
        assert invalid(view.render(again)) is None
    else:  # split: the seed's cut keeps what it is given, orphans and all
        assert again == (*state, result)
    # The uncapped conversation held the call all along: the result answers it there.
    conversation = fold(Conversation(), [*events, *[RETRACT] * 9, added(result)])
    assert conversation[2:] == (call, result) and invalid(list(conversation)) is None


@pytest.mark.parametrize("view", [*VIEWS[1:], Summary(8)], ids=lambda v: v.name)
def test_parallel_calls_each_in_its_own_message_keep_their_results(view: View) -> None:
    """The Agents SDK writes parallel calls as one message each, then the results: each result
    finds its call among the newest calls, so no view drops it."""
    a, b = call_and_results("a"), call_and_results("b")
    history = [Message("user", "go"), a[0], b[0], a[1], b[1]]
    state = fold(view, [added(m) for m in history])
    assert [m.tool_call_id for m in view.render(state) if m.role == "tool"] == ["a", "b"], view.name


@pytest.mark.parametrize("seed", range(30))
async def test_fold_batch_gives_every_batching_the_same_state(seed: int) -> None:
    rng = random.Random(seed)
    events = script(seed)[: rng.randint(5, 60)]
    events.insert(rng.randrange(len(events)), Event("ns", "s", MemoryCleared()))
    records = [Record(Event("ns", "s", e.payload, uuid.UUID(int=i)), Position("t", 0, i)) for i, e in enumerate(events)]
    for view in [*VIEWS, Summary(8)]:
        store = MemoryStore()
        i = 0
        while i < len(records):
            n = rng.randint(1, 12)
            await fold_batch(view, store, records[i : i + n])
            i += n
        key = SessionKey("ns", "s")
        assert (await store.load(view, [key]))[key].state == fold(view, [r.event for r in records]), view.name


# --- through stores ---------------------------------------------------------------------------------

PARTS: list[dict[str, Any]] = [
    {"type": "conversation"},
    {"type": "sliding-window", "window_size": 7},
    {"type": "token-window", "max_tokens": 300},
    {"type": "conversation", "max_length": 9},
    {"type": "summary", "max_messages": 8},
    {"type": "long-term"},
]
# What each part must show: the pure fold of a view (long-term: one session, so the conversation's).
EXPECTED: dict[str, View] = {
    "conversation": Conversation(),
    "sliding-window-7-pairs": SlidingWindow(7),
    "token-window-300-est3-pairs": TokenWindow(300),
    "conversation-max9-pairs": Conversation(max_length=9),
    "long-term": Conversation(),
}


def composite(ns: str, store: dict[str, Any], log: dict[str, Any]) -> dict[str, Any]:
    parts = [{**p, **store} for p in PARTS]
    memory = {"type": "composite", "namespace": ns, "read_timeout": 60, "backends": parts}
    return {"log": log, "memory": memory, "memory_middleware": ["logging"]}


async def run_agent(cfg: dict[str, Any], seed: int) -> list[Event]:
    """Adds the script's messages and retracts where it says (through the middleware); after each
    write every part is valid and the folded views are the pure fold."""
    done: list[Event] = []
    async with open_memory(cfg, session_id="s") as mem:
        for e in script(seed):
            if isinstance(e.payload, MessageAdded):
                await mem.add(e.payload.message)
            else:
                await retract(mem)
            done.append(e)
            parts = mem.inner.parts  # type: ignore[attr-defined]
            views = {p.projection.name.split("@")[0]: await p.get() for p in parts}
            assert all(invalid(v) is None for v in views.values())
            for name, view in EXPECTED.items():
                assert views[name] == list(fold(view, done)), (name, len(done))
    return done


async def assert_audited(cfg: dict[str, Any], done: list[Event]) -> None:
    report = await audit(cfg, session_id="s", as_of="now")
    assert report.views is not None
    for name, view in EXPECTED.items():
        assert report.views[name] == list(fold(view, done)), name
    written = [e.type for e in report.events if e.type != "SummaryRecorded"]  # derived: the summary view's
    assert written == [type(e.payload).__name__ for e in done]
    by_offset = {e.position.offset: e for e in report.events}
    held: list[int] = []
    retractions = 0
    for e in report.events:
        if e.type == "MessageAdded":
            held.append(e.position.offset)
        elif e.type == "MessageRetracted":
            assert isinstance(e.payload, MessageRetracted)
            taken = held.pop()
            assert e.retracts == taken and f"retracted the message at @{taken}" in e.describe()
            # The writer made every add, so it named the add it took back.
            assert e.payload.retracted == by_offset[taken].event_id
            assert e.payload_json()["retracts_offset"] == taken
            retractions += 1
    assert retractions > 5


@pytest.mark.parametrize("store", ["memory", "redis", "postgres"])
async def test_embedded_every_store_retracts_as_the_fold(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    log = {"type": "embedded", "path": str(tmp_path / "log"), "topic_prefix": unique("retract")}
    cfg = composite(unique("retract"), store_config(store, request), log)
    done = await run_agent(cfg, seed=5)
    await assert_audited(cfg, done)
    async with open_memory(cfg, session_id="s") as mem:  # a new process: the views rebuilt from the log file
        assert (await mem.inner.parts[0].get()) == list(fold(Conversation(), done))  # type: ignore[attr-defined]
    if store == "memory":
        return
    for part in PARTS:  # a rebuild of each view from the log folds the same
        if part["type"] == "summary":
            continue
        part_cfg = {
            "log": log,
            "memory": {**part, **store_config(store, request), "namespace": cfg["memory"]["namespace"]},
        }
        report = await rebuild(part_cfg)
        assert report.switched
        async with open_memory(part_cfg, session_id="s") as mem:
            name = mem.projection.name.split("@")[0]  # type: ignore[attr-defined]
            assert await mem.get() == list(fold(EXPECTED[name], done)), name


@pytest.mark.parametrize("store", ["redis", "postgres"])
async def test_kafka_with_a_real_projector_retracts_as_the_fold(
    store: str, tmp_path: Path, kafka_bootstrap: str, request: pytest.FixtureRequest
) -> None:
    log = {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 1, "topic_prefix": unique("retract")}
    cfg = composite(unique("retract"), store_config(store, request), log)
    proc = start_projector(cfg, tmp_path)
    try:
        done = await run_agent(cfg, seed=9)
    finally:
        stop(proc)
    assert proc.returncode == 0, proc.stderr
    await assert_audited(cfg, done)


async def test_retract_refuses_what_is_no_helix_memory() -> None:
    class Plain:
        async def add(self, message: Message, *, idempotency_key: str | None = None) -> Position:
            raise AssertionError("not called")

        async def get(self) -> list[Message]:
            return []

        async def search(self, query: str, limit: int = 10) -> list[Message]:
            return []

        async def clear(self, *, idempotency_key: str | None = None) -> Position:
            raise AssertionError("not called")

    with pytest.raises(InvalidInput, match="memory"):
        await retract(Plain())


async def test_a_bad_reason_writes_nothing(tmp_path: Path) -> None:
    cfg = {"log": {"type": "embedded", "path": str(tmp_path / "log")}, "memory": {"namespace": unique("retract")}}
    async with open_memory(cfg, session_id="s") as mem:
        await mem.add(Message("user", "keep me"))
        with pytest.raises(InvalidInput, match="reason"):
            await retract(mem, reason="nul \x00")
        assert [m.content for m in await mem.get()] == ["keep me"]


async def test_a_retried_retraction_with_its_key_takes_back_one_message(tmp_path: Path) -> None:
    cfg = {"log": {"type": "embedded", "path": str(tmp_path / "log")}, "memory": {"namespace": unique("retract")}}
    async with open_memory(cfg, session_id="s") as mem:
        for text in ("one", "two", "three"):
            await mem.add(Message("user", text))
        await retract(mem, idempotency_key="pop-1")
        await retract(mem, idempotency_key="pop-1")  # the same write again: shows once
        assert [m.content for m in await mem.get()] == ["one", "two"]
        await retract(mem, idempotency_key="pop-2")
        assert [m.content for m in await mem.get()] == ["one"]
    report = await audit(cfg, session_id="s")
    retractions = [e for e in report.events if e.type == "MessageRetracted"]
    assert [e.duplicate_of is not None for e in retractions] == [False, True, False]
    adds = [e.event_id for e in report.events if e.type == "MessageAdded"]
    # Each names the add it took back, the one after the retry too (the retry moved nothing).
    named = [e.payload.retracted for e in retractions]  # type: ignore[union-attr]
    assert (named[0], named[2]) == (adds[2], adds[1])
    assert [e.retracts for e in retractions] == [2, None, 1]


async def test_the_file_store_exports_after_a_retraction(tmp_path: Path) -> None:
    path = tmp_path / "memory.json"
    cfg = {"memory": {"type": "conversation", "store": "file", "file_path": str(path), "namespace": unique("rf")}}
    async with open_memory(cfg, session_id="s") as mem:
        await mem.add(Message("user", "keep"))
        await mem.add(Message("user", "take back"))
        await retract(mem)
    exported = json.loads(path.read_text())
    assert [m["content"] for m in exported["messages"]] == ["keep"]


# --- the vector view: search never finds a retracted message ------------------------------------------


async def vector_script(cfg: dict[str, Any]) -> list[list[str]]:
    """Adds and retractions (one of a bare tool call, which has no entry); what search finds after each."""
    found: list[list[str]] = []
    call = Message("assistant", tool_calls=(ToolCall("c1", "ls"),))
    steps: list[Message | None] = [Message("user", "apple pie"), Message("user", "banana bread"), call]
    steps += [None, None, Message("user", "cherry tart"), None, Message("user", "date cake"), None, None, None]
    steps.append(Message("user", "egg flan"))
    async with open_memory(cfg, session_id="s") as mem:
        for step in steps:
            if step is None:
                await retract(mem)
            else:
                await mem.add(step)
            found.append(sorted(m.content for m in await mem.search("pie", limit=10)))
    return found


VECTOR_SEEN = [
    ["apple pie"],
    ["apple pie", "banana bread"],
    ["apple pie", "banana bread"],
    ["apple pie", "banana bread"],  # the tool call went: it had no entry
    ["apple pie"],
    ["apple pie", "cherry tart"],
    ["apple pie"],
    ["apple pie", "date cake"],
    ["apple pie"],
    [],
    [],  # nothing left to take back
    ["egg flan"],
]


@pytest.mark.parametrize("store", ["memory", "postgres"])
async def test_vector_search_loses_what_was_retracted(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    log = {"type": "embedded", "path": str(tmp_path / "log"), "topic_prefix": unique("rv")}
    memory = {"type": "vector", "namespace": unique("rv"), "top_k": 10, **store_config(store, request)}
    cfg = {"log": log, "memory": memory}
    assert await vector_script(cfg) == VECTOR_SEEN
    async with open_memory(cfg, session_id="s") as mem:  # read back (memory: folded again from the log)
        assert [m.content for m in await mem.search("pie", limit=10)] == ["egg flan"]
    if store == "postgres":
        assert (await rebuild(cfg)).switched  # replayed from the log in one batch into a fresh target
        async with open_memory(cfg, session_id="s") as mem:
            assert [m.content for m in await mem.search("pie", limit=10)] == ["egg flan"]


async def test_kafka_vector_search_loses_what_was_retracted(
    tmp_path: Path, kafka_bootstrap: str, postgres_dsn: str
) -> None:
    log = {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 2, "topic_prefix": unique("rv")}
    memory = {"type": "vector", "namespace": unique("rv"), "top_k": 10, "store": "postgres", "dsn": postgres_dsn}
    cfg = {"log": log, "memory": {**memory, "read_timeout": 60}}
    proc = start_projector(cfg, tmp_path)
    try:
        assert await vector_script(cfg) == VECTOR_SEEN
    finally:
        stop(proc)
    assert proc.returncode == 0, proc.stderr


def test_a_vector_tail_knows_what_it_took_back_when_history_is_read_again() -> None:
    def rec(offset: int, payload: object) -> Record:
        return Record(Event("ns", "s", payload), Position("t", 0, offset))  # type: ignore[arg-type]

    add, back = MessageAdded(Message("user", "x")), MessageRetracted()
    tail = Tail()
    taken = []
    for offset, payload in enumerate([add, add, back, add, back, back, back]):
        tail, gone, _ = follow(tail, rec(offset, payload))
        taken.append(gone)
    assert taken == [None, None, 1, None, 3, 0, None] and tail == Tail(6, ())
    tail = follow(follow(follow(Tail(), rec(0, add))[0], rec(1, add))[0], rec(2, back))[0]
    assert [follow(tail, rec(o, add))[2] for o in (0, 1)] == [True, False]  # 1 was retracted: not again
    many = Tail()
    for offset in range(TAIL + 5):
        many = follow(many, rec(offset, add))[0]
    assert len(many.offsets) == TAIL and follow(many, rec(2, add))[2]  # fell off the tail: still there
    assert follow(many, rec(TAIL + 5, MemoryCleared()))[0] == Tail(TAIL + 5, ())

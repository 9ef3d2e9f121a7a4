"""Tool exchanges stay whole in every view (docs/views/index.md, "Tool calls in views").

A seeded agent conversation with 0-3 tool calls per assistant turn is added message by message;
after every add, each view's `get()` must be valid OpenAI and Anthropic input: every tool message
right after the assistant message holding its call id (other results of that call between), every
call with all its results unless it is the newest exchange, still waiting. Embedded in every
store, through Kafka with a real projector, rebuilt, and audited as of an offset.
`tool_pairs: split` keeps the seed's literal cut, orphans included, under the old view name.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from helix_es import ConfigError, Event, Message, MessageAdded, ToolCall, load_config, open_memory
from helix_es.history.audit import audit
from helix_es.model.events import SummaryRecorded
from helix_es.model.tokens import message_tokens
from helix_es.views.base import State, View
from helix_es.views.conversation import Conversation
from helix_es.views.sliding_window import SlidingWindow, pinned_index
from helix_es.views.summary import Summary
from helix_es.views.summary import split as summary_split
from helix_es.views.token_window import TokenWindow
from helix_es.views.units import front_cut, newest_unit, units
from projectors.rebuild import rebuild
from tests.conftest import start_projector, stop, unique

# The four view kinds that evict, at the sizes the issue measured them with.
PARTS: list[dict[str, Any]] = [
    {"type": "sliding-window", "window_size": 7},
    {"type": "token-window", "max_tokens": 300},
    {"type": "summary", "max_messages": 8},
    {"type": "conversation", "max_length": 9},
]
NAMES = ["sliding-window-7-pairs", "token-window-300-est3-pairs", "summary-8-pairs", "conversation-max9-pairs"]
FOLDED = [n for n in NAMES if not n.startswith("summary")]  # a pure fold of the messages alone


def agent_turns(seed: int, turns: int = 16) -> list[Message]:
    """A system message, then user turns each answered by 0-3 tool calls (results right after),
    sometimes followed by a plain assistant answer."""
    rng = random.Random(seed)
    out = [Message("system", "You are a coding agent. Use the tools.")]
    for t in range(turns):
        out.append(Message("user", f"step {t}: " + "please look " * rng.randint(1, 12)))
        for r in range(rng.randint(1, 2)):
            calls = tuple(
                ToolCall(f"call-{t}-{r}-{j}", "read_file", f'{{"path": "src/m{t}_{j}.py"}}')
                for j in range(rng.randint(0, 3))
            )
            out.append(Message("assistant", "" if calls else f"answer {t}.{r}", tool_calls=calls))
            for call in rng.sample(calls, len(calls)):  # results in any order
                out.append(
                    Message("tool", f"{call.id}: " + "line of code\n" * rng.randint(1, 15), tool_call_id=call.id)
                )
    return out


def invalid(got: list[Message]) -> str | None:
    """Why `got` is not valid chat API input, or None."""
    for i, m in enumerate(got):
        if m.role == "tool":
            j = i
            while j > 0 and got[j - 1].role == "tool":
                j -= 1
            if j == 0 or m.tool_call_id not in {c.id for c in got[j - 1].tool_calls}:
                return f"tool result {m.tool_call_id} at {i} without its call before it"
        if m.tool_calls:
            end = i + 1
            while end < len(got) and got[end].role == "tool":
                end += 1
            answered = {r.tool_call_id for r in got[i + 1 : end]}
            if end < len(got) and not {c.id for c in m.tool_calls} <= answered:
                return f"call at {i} without all its results"
    return None


def unpinned(got: list[Message]) -> list[Message]:
    pin = pinned_index(tuple(got))
    return [m for i, m in enumerate(got) if i != pin]


def assert_bounded(name: str, got: list[Message]) -> None:
    """Each view holds at most its size (fewer when an exchange would not fit whole)."""
    if name.startswith("sliding-window-7"):
        assert len(unpinned(got)) <= 7
    elif name.startswith("token-window-300"):
        rest = unpinned(got)
        # over the budget only when the newest exchange alone is (the newest always stays)
        assert sum(map(message_tokens, rest)) <= 300 or all(m.role == "tool" for m in rest[1:]), name
    elif name.startswith("conversation-max9"):
        assert len(got) <= 9
    else:
        assert len([m for m in got if m.metadata.get("helix.summary") != "true"]) <= 8 + 1


def fold(view: View, messages: list[Message]) -> State:
    state: State = ()
    for m in messages:
        state = view.added(state, m)
    return state


WINDOWS: list[View] = [SlidingWindow(7), TokenWindow(300), Conversation(max_length=9)]


@pytest.mark.parametrize("seed", range(5))
def test_whole_folds_keep_every_exchange_and_split_cuts_them(seed: int) -> None:
    messages = agent_turns(seed)
    for view in WINDOWS:
        split = replace(view, tool_pairs="split")  # type: ignore[type-var]
        state: State = ()
        split_state: State = ()
        orphans = 0
        for m in messages:
            state, split_state = view.added(state, m), split.added(split_state, m)
            assert invalid(list(state)) is None, (view.name, state)
            assert_bounded(view.name, list(state))
            orphans += invalid(list(split_state)) is not None
        assert orphans > 0, f"{split.name}: the seed's cut should orphan results in this conversation"
        assert split.name == view.name.removesuffix("-pairs")


def test_the_units_found_from_either_end_agree() -> None:
    """`newest_unit` reads from the back what `units` reads from the front, orphans and unanswered
    calls included; `front_cut` always lands on a unit boundary, never past the newest unit."""
    rng = random.Random(7)
    ids = [f"c{i}" for i in range(4)]
    for _ in range(3000):
        items: list[Message] = []
        for _ in range(rng.randint(1, 8)):
            roll = rng.random()
            if roll < 0.3:
                calls = tuple(ToolCall(i, "ls") for i in rng.sample(ids, rng.randint(1, 3)))
                items.append(Message("assistant", tool_calls=calls))
            elif roll < 0.7:
                items.append(Message("tool", "r", tool_call_id=rng.choice(ids)))
            else:
                items.append(Message("user", "u"))
        starts = [start for start, _ in units(items)]
        assert newest_unit(items) == starts[-1], items
        for at_least in range(len(items) + 1):
            cut = front_cut(items, at_least)
            assert cut in starts and cut <= starts[-1]
            assert cut >= at_least or cut == starts[-1]
            assert cut == 0 or cut == starts[-1] or items[cut].role != "tool"


def test_an_exchange_goes_whole_and_the_window_may_hold_fewer() -> None:
    call = Message("assistant", tool_calls=(ToolCall("a", "ls"), ToolCall("b", "ls")))
    history = [
        Message("system", "s"),
        call,
        Message("tool", "1", tool_call_id="a"),
        Message("tool", "2", tool_call_id="b"),
    ]
    state = fold(SlidingWindow(3), [*history, Message("user", "next")])
    assert [m.content for m in state] == ["s", "next"]  # 1 message in a window of 3: the exchange went whole
    split = fold(SlidingWindow(3, tool_pairs="split"), [*history, Message("user", "next")])
    assert [m.role for m in split] == ["system", "tool", "tool", "user"]  # the seed's cut


def test_the_newest_exchange_stays_even_over_the_size() -> None:
    calls = tuple(ToolCall(f"c{i}", "ls") for i in range(3))
    msgs = [Message("user", "u"), Message("assistant", tool_calls=calls)]
    msgs += [Message("tool", "r", tool_call_id=c.id) for c in calls]
    assert [m.role for m in fold(SlidingWindow(2), msgs)] == ["assistant", "tool", "tool", "tool"]
    assert [m.role for m in fold(Conversation(max_length=1), msgs)] == ["assistant", "tool", "tool", "tool"]
    # mid-turn: the call waits for its results; it is the newest unit and stays
    assert [m.role for m in fold(SlidingWindow(1), msgs[:3])] == ["assistant", "tool"]
    big = Message("tool", "x " * 400, tool_call_id="c2")
    assert [m.role for m in fold(TokenWindow(50), [*msgs[:4], big])] == ["assistant", "tool", "tool", "tool"]


def test_an_orphan_result_never_leads_the_window() -> None:
    orphan = Message("tool", "who asked?", tool_call_id="gone")
    got = fold(SlidingWindow(2), [Message("system", "s"), Message("user", "u"), orphan, Message("user", "v")])
    assert [m.content for m in got] == ["s", "u", "v"]  # no call before it: the orphan never entered
    held = (Message("system", "s"), orphan, Message("user", "v"))  # one folded before orphans stayed out
    assert [m.content for m in SlidingWindow(1).added(held, Message("user", "w"))] == ["s", "w"]
    split = fold(SlidingWindow(2, tool_pairs="split"), [Message("system", "s"), Message("user", "u"), orphan])
    assert [m.content for m in split] == ["s", "u", "who asked?"]  # nothing evicted: nothing changes


def test_summaries_of_one_rule_are_not_applied_to_the_other() -> None:
    assert Summary(8).name == "summary-8-pairs" and Summary(8, tool_pairs="split").name == "summary-8"
    # the oldest half ends on an exchange boundary, and never takes the newest exchange
    calls = (ToolCall("a", "ls"), ToolCall("b", "ls"))
    recent = [Message("user", "0"), Message("user", "1"), Message("assistant", tool_calls=calls)]
    recent += [Message("tool", "r", tool_call_id=c) for c in "ab"] + [Message("user", str(i)) for i in range(4)]
    assert Summary(8).oldest_half(recent) == 5 and Summary(8, tool_pairs="split").oldest_half(recent) == 4


def test_a_summary_recorded_for_one_rule_is_ignored_by_the_other() -> None:
    whole, split = Summary(2), Summary(2, tool_pairs="split")
    state: State = ()
    for i in range(3):
        state = whole.fold(state, Event("ns", "s", MessageAdded(Message("user", f"u{i}"))))
    header, _ = summary_split(state)
    for view, other in ((whole, split), (split, whole)):
        recorded = Event("ns", "s", SummaryRecorded(other.name, header.epoch, 1, "the other rule's"))
        assert view.fold(state, recorded) == state
    mine = Event("ns", "s", SummaryRecorded(whole.name, header.epoch, 1, "mine"))
    assert whole.fold(state, mine) != state  # the test can fail: its own summary applies


async def test_split_through_a_store_still_serves_the_orphans(tmp_path: Path) -> None:
    memory = {"type": "sliding-window", "window_size": 7, "tool_pairs": "split", "namespace": unique("pairs")}
    cfg = {"log": {"type": "embedded", "path": str(tmp_path / "log")}, "memory": memory}
    async with open_memory(cfg, session_id="s") as mem:
        assert mem.projection.name == "sliding-window-7"  # the seed's view, as stored before
        bad = 0
        for m in agent_turns(11):
            await mem.add(m)
            bad += invalid(await mem.get()) is not None
    assert bad > 0


def test_config_names_and_checks_tool_pairs() -> None:
    def view(**memory: Any) -> Any:
        return load_config({"memory": memory}).memory.view

    assert view(type="sliding-window", window_size=30).name == "sliding-window-30-pairs"
    assert view(type="sliding-window", window_size=30, tool_pairs="split").name == "sliding-window-30"
    assert view(type="token-window", max_tokens=300, max_length=5).name == "token-window-300-est3-max5-pairs"
    assert view(type="conversation", max_length=9).name == "conversation-max9-pairs"
    assert view(type="conversation", tool_pairs="split").name == view(type="conversation").name == "conversation"
    with pytest.raises(ConfigError, match=r"memory\.tool_pairs.*whole, split"):
        view(type="conversation", tool_pairs="halves")


def composite(ns: str, store: dict[str, Any], log: dict[str, Any]) -> dict[str, Any]:
    parts = [{**p, **store} for p in PARTS]
    return {"log": log, "memory": {"type": "composite", "namespace": ns, "read_timeout": 60, "backends": parts}}


Seen = list[tuple[int, dict[str, list[Message]]]]


async def run_agent(cfg: dict[str, Any], session: str, seed: int, *, summaries_now: bool = True) -> Seen:
    """Adds the conversation; after every add checks every part; returns (offset, views) per add."""
    seen = []
    messages = agent_turns(seed)
    async with open_memory(cfg, session_id=session) as mem:
        assert [p.projection.name for p in mem.parts] == NAMES
        for n, m in enumerate(messages, 1):
            pos = await mem.add(m)
            views = {}
            for name, part in zip(NAMES, mem.parts, strict=True):
                got = await part.get()
                assert invalid(got) is None, (name, n, got)
                if summaries_now or name in FOLDED:  # a projector's summaries land on the log later
                    assert_bounded(name, got)
                views[name] = got
            for view in WINDOWS:  # the stores and the log agree with the pure fold
                assert views[view.name] == list(fold(view, messages[:n])), (view.name, n)
            seen.append((pos.offset, views))
    if summaries_now:  # the summary's cut was exercised, not just its window
        assert seen[-1][1]["summary-8-pairs"][0].metadata == {"helix.summary": "true"}
    return seen


@pytest.mark.parametrize("store", ["memory", "redis", "postgres"])
async def test_every_store_embedded_returns_valid_lists(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    cfg_store: dict[str, Any] = {"store": store}
    if store == "redis":
        cfg_store["redis_url"] = request.getfixturevalue("redis_url")
    elif store == "postgres":
        cfg_store["dsn"] = request.getfixturevalue("postgres_dsn")
    ns = unique("pairs")
    # A prefix of its own: a rebuild moves the view's alias, which is per view name and prefix.
    log = {"type": "embedded", "path": str(tmp_path / "log"), "topic_prefix": unique("pairs")}
    cfg = composite(ns, cfg_store, log)
    seen = await run_agent(cfg, "s", seed=11)
    await assert_audited(cfg, seen, every=9, summaries_now=True)
    if store == "redis":  # a rebuild of each new view reads the same lists from the log
        last = seen[-1][1]
        for i, name in enumerate(NAMES):
            part_cfg = {"log": cfg["log"], "memory": {**PARTS[i], **cfg_store, "namespace": ns, "read_timeout": 60}}
            report = await rebuild(part_cfg)
            assert report.switched and report.target == f"{name}@v2"
            async with open_memory(part_cfg, session_id="s") as mem:
                assert mem.projection.name == f"{name}@v2"
                got = await mem.get()
                assert got == last[name] and invalid(got) is None


async def test_kafka_with_a_real_projector_returns_valid_lists(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str
) -> None:
    ns, prefix = unique("pairs"), unique("pairs")
    log = {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 1, "topic_prefix": prefix}
    cfg = composite(ns, {"store": "redis", "redis_url": redis_url}, log)
    proc = start_projector(cfg, tmp_path)
    try:
        seen = await run_agent(cfg, "s", seed=23, summaries_now=False)
    finally:
        stop(proc)
    assert proc.returncode == 0, proc.stderr
    await assert_audited(cfg, seen, every=15, summaries_now=False)


async def assert_audited(cfg: dict[str, Any], seen: Seen, *, every: int, summaries_now: bool) -> None:
    """Audit as of an add's offset folds the same valid lists from the log. A summary is recorded
    on the log after the add that made it due, so the summary view is compared as of now."""
    for offset, views in seen[::every] + seen[-1:]:
        audited = (await audit(cfg, session_id="s", offset=offset)).views
        assert audited is not None and all(invalid(got) is None for got in audited.values()), offset
        assert {n: audited[n] for n in FOLDED} == {n: views[n] for n in FOLDED}, offset
    now = (await audit(cfg, session_id="s", as_of="now")).views
    assert now is not None and invalid(now["summary-8-pairs"]) is None
    assert now == seen[-1][1] if summaries_now else {n: now[n] for n in FOLDED} == {n: seen[-1][1][n] for n in FOLDED}

"""Forgetting policies (`forget:`) end to end on the embedded log: the worker records `MemoryForgotten`,
the views fold it, a reopen (a rebuild from the log file) forgets the same, and the log keeps the content."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from helix_es import Message, open_memory
from helix_es.config import load_config
from helix_es.model.errors import ConfigError
from helix_es.model.events import MemoryForgotten, MessageAdded
from tests.conftest import unique, wait_for

LONG_AGO = datetime.now(UTC) - timedelta(days=60)


def config(tmp_path: Path, ns: str, memory: dict[str, Any]) -> dict[str, Any]:
    return {"log": {"path": str(tmp_path), "fsync": False}, "memory": {"namespace": ns, **memory}}


def on_kafka(
    bootstrap: str, redis_url: str, ns: str, prefix: str, forget: dict[str, Any], *, partitions: int = 2
) -> dict[str, Any]:
    """A conversation in Redis on Kafka with `forget:`; `helix-es project` runs its policy."""
    return {
        "log": {"type": "kafka", "bootstrap_servers": bootstrap, "partitions": partitions, "topic_prefix": prefix},
        "memory": {
            "type": "conversation",
            "store": "redis",
            "redis_url": redis_url,
            "namespace": ns,
            "read_timeout": 30,
            "forget": forget,
        },
    }


async def events_of(tmp_path: Path, ns: str) -> list[Any]:
    from helix_es.log.embedded import EmbeddedLog

    log = EmbeddedLog(tmp_path)
    try:
        return [r async for r in log.read(ns)]
    finally:
        await log.close()


async def test_max_age_forgets_old_sessions_of_a_conversation_and_a_reopen_forgets_the_same(tmp_path: Path) -> None:
    ns = unique("fg")
    cfg = config(tmp_path, ns, {"type": "conversation", "forget": {"max_age": "720h"}})
    async with open_memory(cfg, session_id="old") as old:
        await old.add(Message("user", "I moved to Porto", occurred_at=LONG_AGO))
        await old.add(Message("assistant", "Noted", occurred_at=LONG_AGO + timedelta(minutes=1)))
    async with open_memory(cfg, session_id="new") as new:
        await new.add(Message("user", "hello"))
        assert await new.forget_now() == 1  # type: ignore[attr-defined]
        assert await new.forget_now() == 0  # type: ignore[attr-defined]
        assert [m.content for m in await new.get()] == ["hello"]
    async with open_memory(cfg, session_id="old") as old:
        assert await old.get() == []  # folded again from the log: forgotten again, no policy asked
        await old.add(Message("user", "back again"))  # forgetting is not a tombstone
        assert [m.content for m in await old.get()] == ["back again"]
    records = await events_of(tmp_path, ns)
    forgotten = [r.event.payload for r in records if isinstance(r.event.payload, MemoryForgotten)]
    assert forgotten == [MemoryForgotten(("conversation",), "max_age", "max_age=720h", session=True)]
    said = [r.event.payload.message.content for r in records if isinstance(r.event.payload, MessageAdded)]
    assert "I moved to Porto" in said  # the log keeps what was forgotten


async def test_budget_keeps_the_most_recently_used_sessions_reads_count(tmp_path: Path) -> None:
    ns = unique("fg")
    cfg = config(tmp_path, ns, {"type": "sliding-window", "window_size": 5, "forget": {"budget": 2}})
    for sid in ("a", "b", "c"):
        async with open_memory(cfg, session_id=sid) as mem:
            await mem.add(Message("user", f"I am {sid}"))
    async with open_memory(cfg, session_id="a") as a:
        assert [m.content for m in await a.get()] == ["I am a"]  # a read: "a" is now the most recently used
        assert await a.forget_now() == 1  # type: ignore[attr-defined]
    kept = {}
    for sid in ("a", "b", "c"):
        async with open_memory(cfg, session_id=sid) as mem:
            kept[sid] = [m.content for m in await mem.get()]
    assert kept == {"a": ["I am a"], "b": [], "c": ["I am c"]}


async def test_inactive_for_forgets_sessions_nobody_used(tmp_path: Path) -> None:
    ns = unique("fg")
    cfg = config(tmp_path, ns, {"type": "conversation", "forget": {"inactive_for": "1s", "every": "1h"}})
    async with open_memory(cfg, session_id="idle") as idle, open_memory(cfg, session_id="busy") as busy:
        await idle.add(Message("user", "once"))
        await busy.add(Message("user", "often"))
        await __import__("asyncio").sleep(1.2)
        await busy.get()  # used just now
        assert await busy.forget_now() == 1  # type: ignore[attr-defined]
        assert await idle.get() == []
        assert [m.content for m in await busy.get()] == ["often"]
    forgotten = [r.event for r in await events_of(tmp_path, ns) if isinstance(r.event.payload, MemoryForgotten)]
    assert [(e.session_id, e.payload.policy) for e in forgotten] == [("idle", "inactive_for")]


@pytest.mark.parametrize(
    ("forget", "key"),
    [
        ({"max_age": "soon"}, "memory.forget.max_age"),
        ({"budget": -1}, "memory.forget.budget"),
        ({"budget": True}, "memory.forget.budget"),
        ({"every": 0}, "memory.forget.every"),
        ({"maxage": "1h"}, "memory.forget.maxage"),
        ({}, "memory.forget"),
        ("1h", "memory.forget"),
        ({"keep": "relevant", "max_age": "1h"}, "memory.forget.keep"),
        ({"budget": 3, "keep": "loud"}, "memory.forget.keep"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_key(forget: object, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({"memory": {"type": "conversation", "forget": forget}})
    assert caught.value.field == key


def test_the_langgraph_views_refuse_a_policy_their_ttls_sweep_them() -> None:
    from helix_es.config import load_section

    for section in ("store", "checkpoints"):
        with pytest.raises(ConfigError) as caught:
            load_section({section: {"namespace": "x", "forget": {"budget": 3}}}, section)
        assert caught.value.field == f"{section}.forget"


async def test_a_facts_budget_keeps_the_most_recently_learned_or_read_facts(tmp_path: Path) -> None:
    ns = unique("fg")
    cfg = config(
        tmp_path, ns, {"type": "facts", "extract": {"provider": "rules"}, "forget": {"budget": 2, "every": "1h"}}
    )
    async with open_memory(cfg, session_id="ana") as mem:
        m: Any = mem
        for text in ("I live in Lisbon.", "I work at Acme.", "I like jazz."):
            await mem.add(Message("user", text, name="ana"))
            await m.extract_now()
        # Unread, a fact was last used when it was learned: works_at before likes. A read of lives_in (the
        # oldest) makes it the most recently used, so the budget lets works_at go.
        assert [f.value for f in await m.facts(predicate="lives_in")] == ["Lisbon"]
        assert await m.forget_now() == 1
        assert sorted(f.predicate for f in await m.facts()) == ["likes", "lives_in"]
        assert await m.forget_now() == 0
    async with open_memory(cfg, session_id="ana") as mem:  # folded again from the log
        assert sorted(f.predicate for f in await mem.facts()) == ["likes", "lives_in"]  # type: ignore[attr-defined]
    forgotten = [r.event for r in await events_of(tmp_path, ns) if isinstance(r.event.payload, MemoryForgotten)]
    assert [(e.session_id, e.payload.policy, len(e.payload.ids)) for e in forgotten] == [("ana", "budget", 1)]


async def test_on_kafka_the_projector_forgets_and_a_rebuild_forgets_the_same(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str
) -> None:
    """`helix-es project` runs the policy beside the view's projector; `helix-es rebuild` folds the
    recorded forgetting into a new target without asking the policy, and both targets agree."""
    from helix_es.stores.ports import SessionKey
    from helix_es.views.base import View
    from tests.conftest import cli, start_projector, stop
    from tests.test_rebuild import snapshots, write_config

    ns, prefix = unique("kfg"), unique("kfg")
    cfg = on_kafka(kafka_bootstrap, redis_url, ns, prefix, {"max_age": "720h", "every": "0.5s"}, partitions=3)
    path = write_config(tmp_path, cfg)
    view = load_config(cfg).memory.view
    assert isinstance(view, View)
    sessions = [f"s{i}" for i in range(6)]
    projector = start_projector(cfg, tmp_path)
    try:
        async with open_memory(cfg, session_id="s0") as first:
            mems = [first.__class__(first.backend, first.source, ns, s) for s in sessions]  # type: ignore[call-arg]
            for i, m in enumerate(mems):
                said = LONG_AGO if i % 2 == 0 else datetime.now(UTC)
                await m.add(Message("user", f"{m.session_id} says hi", occurred_at=said))

            async def forgotten() -> bool:
                return all([await m.get() == [] for m in mems[::2]])

            await wait_for(forgotten, 30, "the projector's policy to forget the old sessions")
            assert [[x.content for x in await m.get()] for m in mems[1::2]] == [
                ["s1 says hi"],
                ["s3 says hi"],
                ["s5 says hi"],
            ]
        code, _, err = await cli("rebuild", "--config", str(path), "--json")
        assert code == 0, err
        keys = [SessionKey(ns, s) for s in sessions]
        old = await snapshots(redis_url, view, "conversation", keys)
        new = await snapshots(redis_url, view, "conversation@v2", keys)
        assert [s.state for s in new.values()] == [s.state for s in old.values()]
        assert [len(s.state) for s in new.values()] == [0, 1, 0, 1, 0, 1]
    finally:
        stop(projector)


async def test_a_long_term_budget_forgets_the_least_recently_used_messages_from_rows_and_index(
    tmp_path: Path,
) -> None:
    """Messages are the items of a long-term view: the policy names their offsets, and its recall index
    (a part of the same memory) forgets them too. A recall hit counts as a use."""
    ns = unique("fg")
    cfg = config(tmp_path, ns, {"type": "long-term", "search": "keyword", "forget": {"budget": 3, "every": "1h"}})
    texts = ["alpha lives in Porto", "beta likes jazz", "gamma plays chess", "delta reads poems", "epsilon runs"]
    async with open_memory(cfg, session_id="s") as mem:
        m: Any = mem
        for i, text in enumerate(texts):
            async with open_memory(cfg, session_id=f"w{i}") as writer:
                await writer.add(Message("user", text))
        hits = await m.recall("Porto")  # the oldest message, used just now: the budget keeps it
        assert [h.message.content for h in hits] == ["alpha lives in Porto"]
        assert await m.forget_now() == 2
        assert [x.content for x in await mem.get()] == [texts[0], texts[3], texts[4]]
        assert await m.recall("jazz") == [] and await m.recall("chess") == []
    async with open_memory(cfg, session_id="s") as mem:  # reopened: rows and index folded from the log again
        assert [x.content for x in await mem.get()] == [texts[0], texts[3], texts[4]]
        assert await mem.recall("jazz") == []  # type: ignore[attr-defined]
    forgotten = [r.event for r in await events_of(tmp_path, ns) if isinstance(r.event.payload, MemoryForgotten)]
    assert sorted((e.session_id, e.payload.policy, e.payload.offsets) for e in forgotten) == [
        ("w1", "budget", (1,)),
        ("w2", "budget", (2,)),
    ]
    assert all(e.payload.views == ("long-term", "vector-hash-384") for e in forgotten)  # rows and index


@pytest.mark.parametrize("keep", ["recent", "relevant"])
async def test_a_budget_keeps_the_most_recently_used_or_the_most_often_found(tmp_path: Path, keep: str) -> None:
    """`keep: relevant` keeps what reads returned most often: two old messages found again and again
    outlast newer ones written or found once; `keep: recent` keeps the newest uses."""
    ns = unique("fg")
    forget = {"budget": 2, "keep": keep, "every": "1h"}
    cfg = config(tmp_path, ns, {"type": "long-term", "search": "keyword", "forget": forget})
    texts = ["alpha lives in Porto", "beta likes jazz", "gamma plays chess", "delta reads poems"]
    async with open_memory(cfg, session_id="s") as mem:
        m: Any = mem
        for text in texts:
            await mem.add(Message("user", text))
        for query in ("Porto", "Porto", "Porto", "jazz", "jazz", "chess"):  # chess: found last, once
            assert len(await m.recall(query)) == 1
        await mem.add(Message("user", "epsilon runs"))  # written last
        assert await m.forget_now() == 3
        kept = {"relevant": [texts[0], texts[1]], "recent": [texts[2], "epsilon runs"]}[keep]
        assert [x.content for x in await mem.get()] == kept
    reasons = {
        r.event.payload.reason for r in await events_of(tmp_path, ns) if isinstance(r.event.payload, MemoryForgotten)
    }
    assert reasons == {"budget=2" if keep == "recent" else "budget=2 keep=relevant"}


async def test_audit_says_why_each_message_left(tmp_path: Path) -> None:
    from helix_es.history.audit import audit

    ns = unique("fg")
    cfg = config(tmp_path, ns, {"type": "conversation", "forget": {"max_age": "720h"}})
    async with open_memory(cfg, session_id="old") as old:
        await old.add(Message("user", "I moved to Porto", occurred_at=LONG_AGO))
        await old.add(Message("user", "and my dog", occurred_at=LONG_AGO))
        assert await old.forget_now() == 1  # type: ignore[attr-defined]
        await old.add_many([Message("user", f"new {i}") for i in range(4)])
        at = await old.compact(keep=1)  # type: ignore[attr-defined]
    report = await audit(cfg, session_id="old")
    left = [(e.position.offset, e.type, e.left) for e in report.events]
    assert left == [
        (0, "MessageAdded", "forgotten from conversation by max_age at @2"),
        (1, "MessageAdded", "forgotten from conversation by max_age at @2"),
        (2, "MemoryForgotten", None),
        (3, "MessageAdded", f"compacted into the summary at @{at.offset}"),
        (4, "MessageAdded", f"compacted into the summary at @{at.offset}"),
        (5, "MessageAdded", f"compacted into the summary at @{at.offset}"),
        (6, "MessageAdded", None),
        (7, "SessionCompacted", None),
    ]
    assert "[forgotten from conversation by max_age at @2]" in report.events[0].describe()


async def test_a_session_view_forgets_messages_named_by_their_text_and_the_results_of_their_calls(
    tmp_path: Path,
) -> None:
    """An erasure names messages of other sessions by their text (`content_id`): session views hold no
    positions. A tool result whose call went goes too (no orphan is ever returned)."""
    from helix_es.model.events import Event, content_id
    from helix_es.model.message import ToolCall

    ns = unique("fg")
    cfg = config(tmp_path, ns, {"type": "sliding-window", "window_size": 10})
    call = ToolCall("c1", "lookup", '{"who": "Alice"}')
    async with open_memory(cfg, session_id="s") as mem:
        await mem.add(Message("user", "Alice lives in Porto"))
        await mem.add(Message("assistant", "Looking her up", tool_calls=(call,)))
        await mem.add(Message("tool", "found", tool_call_id="c1"))
        await mem.add(Message("user", "thanks"))
        gone = (content_id("Alice lives in Porto"), content_id("Looking her up"), "f-unrelated")
        other = MemoryForgotten(("conversation",), "erasure", "e-1", ids=gone)  # another view: nothing
        await mem.backend.append(Event(ns, "s", other))  # type: ignore[attr-defined]
        assert len(await mem.get()) == 4
        mine = MemoryForgotten(("sliding-window-10-pairs",), "erasure", "e-1", ids=gone)
        await mem.backend.append(Event(ns, "s", mine))  # type: ignore[attr-defined]
        assert [m.content for m in await mem.get()] == ["thanks"]
    async with open_memory(cfg, session_id="s") as mem:  # folded again from the log
        assert [m.content for m in await mem.get()] == ["thanks"]


async def test_on_kafka_the_projector_forgets_facts_by_budget(
    tmp_path: Path, kafka_bootstrap: str, postgres_dsn: str
) -> None:
    from tests.conftest import start_projector, stop

    ns, prefix = unique("kff"), unique("kff")
    cfg = {
        "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 2, "topic_prefix": prefix},
        "memory": {
            "type": "facts",
            "store": "postgres",
            "dsn": postgres_dsn,
            "namespace": ns,
            "read_timeout": 30,
            "extract": {"provider": "rules"},
            "batch": {"turns": 1, "idle": 0.1},
            "forget": {"budget": 1, "every": "0.5s"},
        },
    }
    projector = start_projector(cfg, tmp_path)
    try:
        async with open_memory(cfg, session_id="ana") as mem:
            m: Any = mem
            await mem.add(Message("user", "I live in Lisbon.", name="ana"))
            await mem.add(Message("user", "I work at Acme.", name="ana"))

            async def one_left() -> bool:
                found = await m.facts(history=True)
                return len(found) == 1 and found[0].predicate == "works_at"

            await wait_for(one_left, 60, "the extraction, then the budget's forgetting")
    finally:
        stop(projector)


def test_a_paced_decision_forgets_what_one_pass_over_the_items_would() -> None:
    """`PolicyIndex.deciding` pauses every `STEP` items (a worker lets adds run there): its events name
    exactly the items a plain reading of the rules names, the least recently used over the budget
    first, and a clear noted between two steps only drops items from what is left to decide."""
    from helix_es.model.events import Event, MemoryCleared, Position, Record
    from helix_es.projection.forgetting import STEP, PolicyIndex
    from helix_es.views.forgetting import Forget

    now = datetime(2026, 12, 1, tzinfo=UTC)
    records = []
    for i in range(3 * STEP + 10):  # said 0..n hours ago, in 7 sessions
        said = now - timedelta(hours=i % 200)
        event = Event("ns", f"s{i % 7}", MessageAdded(Message("user", f"m{i}", occurred_at=said)), timestamp=said)
        records.append(Record(event, Position("t", 0, i)))

    def index() -> PolicyIndex:
        made = PolicyIndex("ns", ("long-term",), Forget(max_age=150 * 3600, budget=1000), whole_sessions=False)
        for r in records:
            made.note(r)
        return made

    def named(events: list[Event]) -> dict[tuple[str, int], str]:
        out = {}
        for e in events:
            assert isinstance(e.payload, MemoryForgotten) and list(e.payload.offsets) == sorted(e.payload.offsets)
            out.update({(e.session_id, o): e.payload.policy for o in e.payload.offsets})
        return out

    old = {(r.event.session_id, r.position.offset) for r in records if now - r.event.timestamp > timedelta(hours=150)}
    young = sorted(
        (r.event.timestamp, r.event.session_id, r.position.offset)
        for r in records
        if (r.event.session_id, r.position.offset) not in old
    )
    over = {(sid, o) for _, sid, o in young[: len(young) - 1000]}
    expected = {k: "max_age" for k in old} | {k: "budget" for k in over}

    steps = index().deciding(now)
    pauses = 0
    while True:
        try:
            next(steps)
            pauses += 1
        except StopIteration as done:
            assert named(done.value) == expected
            break
    assert pauses > 3
    cleared = index()
    steps = cleared.deciding(now)
    next(steps)  # one step in, the namespace is cleared
    cleared.note(Record(Event("ns", "s0", MemoryCleared(), timestamp=now), Position("t", 0, len(records))))
    while True:
        try:
            next(steps)
        except StopIteration as done:
            assert set(named(done.value)) <= set(expected) and len(cleared) == 0
            break


async def test_on_kafka_reads_by_clients_count_as_uses(tmp_path: Path, kafka_bootstrap: str, redis_url: str) -> None:
    """The policy runs beside `helix-es project`, not where the reads happen: a client sends what its reads
    returned to the namespace's uses topic, and the worker counts them. A session read all along stays;
    one nobody read is forgotten by `inactive_for` (both were written at the same time)."""
    from helix_es.log.kafka import KafkaLog
    from tests.conftest import start_projector, stop

    ns, prefix = unique("kfu"), unique("kfu")
    cfg = on_kafka(kafka_bootstrap, redis_url, ns, prefix, {"inactive_for": "4s", "every": "0.5s"})
    projector = start_projector(cfg, tmp_path)
    try:
        async with open_memory(cfg, session_id="read") as read, open_memory(cfg, session_id="idle") as idle:
            async with open_memory(cfg, session_id="warm") as warm:  # the projector is up: reads start at once
                await warm.add(Message("user", "hello"))
                assert len(await warm.get()) == 1
            await read.add(Message("user", "I read this often"))
            await idle.add(Message("user", "nobody reads me"))
            assert [m.content for m in await idle.get()] == ["nobody reads me"]  # once, then never again
            log = KafkaLog(kafka_bootstrap, topic_prefix=prefix)  # the log, read without reading the views

            async def forgotten() -> list[str]:
                found = [r async for r in log.read(ns)]
                return [r.event.session_id for r in found if isinstance(r.event.payload, MemoryForgotten)]

            async def idle_forgotten() -> bool:
                assert [m.content for m in await read.get()] == ["I read this often"]  # a use, every look
                return "idle" in await forgotten()

            try:
                await wait_for(idle_forgotten, 60, "the idle session to be forgotten")
                for _ in range(12):  # three more of its inactive_for: still read, still kept
                    assert [m.content for m in await read.get()] == ["I read this often"]
                    await asyncio.sleep(0.5)
                assert sorted(await forgotten()) == ["idle", "warm"] and await idle.get() == []
            finally:
                await log.close()
    finally:
        stop(projector)


def test_uses_gather_one_record_per_view_and_session() -> None:
    from helix_es.log.kafka_uses import LISTED, decode, encode, gathered
    from helix_es.model.forget_events import Use

    uses = [
        Use("long-term", "s", 5, messages=(("a", 0, 1),)),
        Use("long-term", "s", 9, messages=(("a", 0, 1), ("b", 1, 7))),
        Use("conversation", "s", 3, whole=True),
        Use("facts", "facts", 4, facts=tuple(f"f{i}" for i in range(LISTED + 1))),
    ]
    out = gathered(uses)
    assert out[0] == Use("long-term", "s", 9, messages=(("a", 0, 1), ("a", 0, 1), ("b", 1, 7)))  # found twice
    assert out[1] == Use("conversation", "s", 3, whole=True)
    assert [len(u.facts) for u in out[2:]] == [LISTED, 1]
    assert [decode(encode(u)) for u in out] == out

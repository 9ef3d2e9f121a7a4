"""Forgetting, compaction and erasure (schema v10) and the knowledge events on the console's timeline,
in a real headless Chromium against a real `helix-es serve` process.

The log is seeded with the Python client: a conversation and a long-term view that forget after 720 h
(`forget_now` on messages said 60 days ago), a compaction (`compact`), a facts view's extraction, an
erased session (a `SessionErased` appended as `forget` appends it; tests/test_console.py shreds a
session for real) and an erasure's own events (`MemoryForgotten` with policy erasure, `SubjectErased`
receipts) and a person's corrections of facts. The test reads what people see: each message marked
with what became of it (forgotten by which policy, when, from which views; compacted into which
summary; erased), and each of those events as a sentence, the summary and the receipt under it.
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from helix_es import Message, open_memory
from helix_es.model.events import (
    Event,
    FactAsserted,
    FactRetracted,
    FactsMerged,
    FactsUnmerged,
    MemoryForgotten,
    Payload,
    Position,
    SessionErased,
    SubjectErased,
)
from helix_es.model.names import topic
from tests.browser import Browser, Page
from tests.conftest import unique
from tests.test_console import KEY, MARKUP, browser, contents, page, real_problems, serve, wait_contents, wait_cut

__all__ = ["browser"]  # the module's Chromium, shared with tests/test_console.py's fixture

LONG_AGO = datetime.now(UTC) - timedelta(days=60)
STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"

ROWS = """[...document.querySelectorAll('#timeline li.ev')].map(li => ({
  offset: Number(li.dataset.offset), kind: li.dataset.kind,
  badge: li.querySelector('.badge').textContent, text: li.querySelector('.ev-text').textContent,
  detail: li.querySelector('.ev-detail')?.innerText ?? null,
  fates: [...li.querySelectorAll('.fate')].map(f => f.textContent),
  later: [...li.querySelectorAll('.fate.later')].map(f => f.textContent),
}))"""


def config(tmp_path: Path, ns: str) -> dict[str, Any]:
    old = {"max_age": "720h"}
    facts = {"type": "facts", "extract": {"provider": "rules"}, "batch": {"turns": 100, "idle": 3600}}
    backends = [{"type": "conversation", "forget": old}, {"type": "long-term", "forget": old}, facts]
    return {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False},
        "memory": {"type": "composite", "namespace": ns, "backends": backends},
    }


async def seed(cfg: dict[str, Any], ns: str) -> None:
    async with open_memory(cfg, session_id="s-old") as mem:  # said 60 days ago only: the whole session goes
        await mem.add(Message("user", "I live in Lisbon.", name="Ana", occurred_at=LONG_AGO))
        await mem.add(Message("assistant", "Noted: Lisbon.", occurred_at=LONG_AGO + timedelta(minutes=1)))
    async with open_memory(cfg, session_id="s-trip") as mem:
        m: Any = mem  # a composite: forget_now, compact and extract_now go to the parts that have them
        await mem.add(Message("user", "I lived in Lisbon.", name="Ana", occurred_at=LONG_AGO))
        await mem.add(Message("assistant", "Noted: Lisbon.", occurred_at=LONG_AGO + timedelta(minutes=1)))
        await m.add_many([Message("user" if i % 2 == 0 else "assistant", f"turn {i}") for i in range(6)])
        assert await m.forget_now() == 5  # s-old from the conversation, the four old adds from long-term
        assert await m.compact(keep=2) is not None  # the oldest six of the conversation: one summary
        await m.extract_now()
    async with open_memory(cfg, session_id="s-gone") as mem:
        for i in range(3):
            await mem.add(Message("user", f"my IBAN NO93 {i}"))
        log: Any = mem  # its backend appends events to the log as the library's own writers do
        await log.backend.append(Event(ns, "s-gone", SessionErased("ticket 9")))
    # Receipts as helix_es.history.subject_erasure writes them.
    views = {
        "conversation": {"kind": "conversation", "sessions": ["s-gone"], "messages": 0, "ids": [], "kept": 2},
        "long-term": {"kind": "long-term", "sessions": ["s-gone"], "messages": 2, "ids": []},
        "facts": {"kind": "facts", "sessions": ["s-gone"], "messages": 0, "ids": ["f-1", "f-2"]},
    }
    passed = {
        "subject": "alice",
        "request": "erase-1",
        "sessions": ["s-gone"],
        "shredded": ["s-gone"],
        "not_shredded": [],
        "messages": {"s-trip": [2, 3]},
        "facts": ["f-1", "f-2"],
        "key_ids": ["dk-1"],
        "views": views,
        "undecodable": [],
        "log": "sealed",
        "verification": {"passed": True, "scanned": {}, "failures": []},
    }
    bad = [{"topic": topic(ns), "partition": 0, "offset": 1, "error": "no key"}] * 2
    named = "long-term: 1 messages of other sessions name the subject"
    check = {"passed": False, "scanned": {}, "failures": [named, MARKUP]}
    failed = {**passed, "not_shredded": ["s-gone"], "undecodable": bad, "verification": check}
    sid = "erasure:alice"
    async with open_memory(cfg, session_id=sid) as mem:
        forgot = MemoryForgotten(("facts",), "erasure", "erase-1", ids=("f-1", "f-2"))
        log = mem
        for _ in range(2):  # the erasure's forgetting, and its retry (one idempotency key): folded once
            await log.backend.append(Event(ns, sid, forgot, idempotency_key="erase-1/facts"))
        payloads: list[Payload] = [
            SubjectErased("alice", "erase-1", json.dumps(passed)),
            SubjectErased("alice", "erase-2", json.dumps(failed)),
            SubjectErased("alice", "erase-3", "not json"),
            FactAsserted("Ana", "works_at", "Acme", datetime(2024, 1, 1, tzinfo=UTC), reason="she said so"),
            FactRetracted("f-9", "Bo", "likes", "chess", reason="not any more"),
            FactsMerged(("f-1", "f-2")),
            FactsUnmerged(Position(topic(ns), 0, 0)),  # a merge elsewhere on the partition: named by its offset
        ]
        for payload in payloads:
            await log.backend.append(Event(ns, sid, payload))


def rows(tab: Page) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = tab.evaluate(ROWS)
    return found


def open_session(tab: Page, base: str, ns: str, sid: str, events: int) -> list[dict[str, Any]]:
    tab.goto(f"{base}/ui/?namespace={ns}&session={sid}&key={KEY}")
    tab.wait_for(f"document.querySelectorAll('#timeline li.ev').length === {events}", what=f"the events of {sid}")
    tab.wait_for("document.querySelectorAll('.view').length === 3", what="the views")
    return rows(tab)


def test_forgetting_compaction_erasure_and_facts_read_as_sentences(browser: Browser, tmp_path: Path) -> None:
    ns = unique("console")
    cfg = config(tmp_path, ns)
    asyncio.run(seed(cfg, ns))
    with serve(cfg, ns, tmp_path) as base, page(browser) as tab:
        # A session a policy forgot whole (the conversation) and message by message (long-term).
        old = open_session(tab, base, ns, "s-old", 5)
        assert [r["kind"] for r in old] == ["add", "add", "forget", "forget", "facts"]
        at = [r["offset"] for r in old]
        for add in old[:2]:
            (fate,) = add["fates"]  # one round of the policy: one mark naming both views
            assert re.fullmatch(rf"forgotten by max_age \(max_age=720h\) at {STAMP} · left .+", fate), fate
            assert sorted(fate.split(" · left ")[1].split(", ")) == ["conversation", "long-term"]
        by_view = {r["text"].split(" out of ")[1].split(";")[0]: r for r in old[2:4]}
        assert by_view["conversation"]["text"] == (
            "max_age (max_age=720h) took the whole session out of conversation; the log keeps them"
        )
        assert by_view["long-term"]["text"] == (
            f"max_age (max_age=720h) took 2 messages (turn 1 (@{at[0]}), turn 2 (@{at[1]})) out of long-term;"
            " the log keeps them"
        )
        assert all(r["badge"] == "forgotten" for r in old[2:4])
        assert old[4]["text"].startswith("rules/v1 read 2 turns and found 1 fact: Ana lives_in Lisbon (since ")
        wait_contents(tab, "conversation", [])
        # At a cut before the forgetting, the mark is there but not yet (dimmed); the view still holds both.
        tab.click(f'#timeline li[data-offset="{at[1]}"]')
        wait_cut(tab, at[1])
        wait_contents(tab, "conversation", ["I live in Lisbon.", "Noted: Lisbon."])
        assert [len(r["later"]) for r in rows(tab)[:2]] == [1, 1]

        # A compaction: the six oldest messages marked with the summary that stands for them, shown on its row.
        trip = open_session(tab, base, ns, "s-trip", 11)
        kinds = [r["kind"] for r in trip]
        assert kinds == ["add"] * 8 + ["forget", "compact", "facts"]
        compact = trip[9]
        at = [r["offset"] for r in trip]
        summary = f"compacted into summary @{compact['offset']} in conversation"
        assert [summary in r["fates"] for r in trip[:8]] == [True] * 6 + [False] * 2
        assert [any(f.startswith("forgotten by max_age") for f in r["fates"]) for r in trip[:8]] == [True] * 2 + [
            False
        ] * 6
        assert compact["badge"] == "compacted"
        assert compact["text"] == (
            f"conversation: 6 messages, turn 1 (@{at[0]}) to turn 6 (@{at[5]}), compacted into this summary"
            " (model extractive, on request)"
        )
        assert compact["detail"].splitlines() == [
            "user: I lived in Lisbon.",
            "assistant: Noted: Lisbon.",
            *[f"{'user' if i % 2 == 0 else 'assistant'}: turn {i}" for i in range(4)],
        ]
        assert trip[10]["text"] == "rules/v1 read 8 turns and found no facts"
        assert contents(tab, "conversation")[1:] == ["turn 4", "turn 5"]  # the summary, then the two kept
        assert contents(tab, "conversation")[0] == compact["detail"]
        tab.click(f'#timeline li[data-offset="{at[7]}"]')  # before the forgetting and the compaction
        wait_cut(tab, at[7])
        wait_contents(tab, "conversation", ["I lived in Lisbon.", "Noted: Lisbon."] + [f"turn {i}" for i in range(6)])
        assert [len(r["later"]) for r in rows(tab)[:8]] == [2, 2, 1, 1, 1, 1, 0, 0]

        # An erased session: its messages unreadable, each marked with the erasure and its reason.
        gone = open_session(tab, base, ns, "s-gone", 4)
        assert [r["kind"] for r in gone] == ["erased"] * 3 + ["erasure"]
        for add in gone[:3]:
            (fate,) = add["fates"]
            assert re.fullmatch(rf"erased at {STAMP}: ticket 9", fate), fate
        assert gone[3]["text"] == "session forgotten: every earlier message is unreadable: ticket 9"
        assert "NO93" not in tab.text("#timeline")

        # An erasure's own events and a person's corrections of facts: sentences, never JSON.
        erasure = open_session(tab, base, ns, "erasure:alice", 9)
        retry = erasure.pop(1)
        first = erasure[0]["offset"]
        assert retry["kind"] == "duplicate" and retry["badge"] == "forgotten"
        assert retry["text"] == f"retry of turn 1 (@{first}), not folded: {erasure[0]['text']}"
        assert [r["badge"] for r in erasure] == [
            "forgotten",
            "subject erased",
            "subject erased",
            "subject erased",
            "fact asserted",
            "fact retracted",
            "facts merged",
            "merge undone",
        ]
        texts = [r["text"] for r in erasure]
        assert texts[0] == "erasure (erase-1) took 2 items (f-1, f-2) out of facts; the log keeps them"
        assert texts[1] == "erasure erase-1 of subject alice; its receipt:"
        said = [
            "1 session: s-gone",
            "messages naming the subject elsewhere: 2 in 1 session",
            "facts about the subject: 2",
            "views: conversation (1 session, 2 kept: it forgets whole sessions only),"
            " long-term (1 session, 2 messages), facts (1 session, 2 facts)",
            "keys destroyed: 1",
        ]
        assert erasure[1]["detail"].splitlines() == [*said, "log: sealed", "verification passed"]
        assert erasure[2]["detail"].splitlines() == [
            *said[:1],
            "not shredded, readable on the log: s-gone",
            *said[1:],
            "records not decodable: 2",
            "log: sealed",
            "verification failed",
            "long-term: 1 messages of other sessions name the subject",
            MARKUP,  # shown as text
        ]
        assert erasure[3]["detail"] == "receipt (not JSON): not json"
        assert tab.texts("#timeline .verdict") == ["verification passed", "verification failed"]
        assert tab.evaluate("[...document.querySelectorAll('#timeline .verdict')].map(v => v.className)") == [
            "verdict passed",
            "verdict failed",
        ]
        assert texts[4:] == [
            "a person asserted Ana works_at Acme (since 2024-01-01): she said so",
            "took back Bo likes chess (fact f-9): not any more",
            "merged facts f-1, f-2 into f-1",
            "undid the merge at @0",
        ]
        assert not any("{" in r["text"] for r in erasure)
        assert tab.evaluate("document.querySelectorAll('#timeline img, #timeline b').length") == 0
        assert tab.evaluate("window.injected") is None
        assert real_problems(tab) == []

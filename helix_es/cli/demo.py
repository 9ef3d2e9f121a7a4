"""`helix-es demo`: a scripted agent on the embedded log, showing views and the log beneath them."""

from __future__ import annotations

import argparse
import json
import tempfile
import uuid
from datetime import UTC, datetime
from typing import Any

from helix_es.client.open import open_memory
from helix_es.client.runtime import Runtime, default_runtime
from helix_es.config import Config, load_config
from helix_es.history.audit import audit
from helix_es.model.message import Message, ToolCall
from projectors.rebuild import rebuild

SCRIPT: list[tuple[str, Message]] = [
    ("alice", Message("system", "You are a travel assistant. Be brief.")),
    ("alice", Message("user", "I want to visit Oslo in March.")),
    ("alice", Message("assistant", "", tool_calls=(ToolCall("call-1", "weather", '{"city": "Oslo", "month": 3}'),))),
    ("alice", Message("tool", '{"avg_c": -1, "snow_days": 9}', tool_call_id="call-1")),
    ("alice", Message("assistant", "Oslo in March averages -1 °C with snow: pack boots.")),
    ("bob", Message("user", "Remind me to book the Bergen train.")),
    ("alice", Message("user", "And what about Bergen?")),
    ("bob", Message("assistant", "Noted: book the Bergen train.")),
    ("alice", Message("assistant", "Bergen is milder but rainy; bring a raincoat.")),
]


# What alice tells the agent later: the facts view's rules extractor learns from it (dated, as an import would be).
FACT_TURNS = [
    ("I live in Lisbon and I work as a nurse.", datetime(2024, 1, 10, tzinfo=UTC)),
    ("I love hiking and I speak Portuguese.", datetime(2024, 2, 3, tzinfo=UTC)),
    ("Big news: I moved to Porto.", datetime(2024, 9, 14, tzinfo=UTC)),
]


def _short(messages: list[Message]) -> str:
    return " | ".join(f"{m.role}:{(m.content or '[tool call]')[:28]}" for m in messages)


async def run_demo(
    path: str | None = None, *, as_json: bool = False, config_path: str | None = None, runtime: Runtime | None = None
) -> None:
    """The scripted agent on the embedded default, or on the services a config names (`--config`), on
    `runtime` (by default the running loop's)."""
    runtime = runtime or default_runtime()

    def out(kind: str, text: str, **data: Any) -> None:
        print(json.dumps({"kind": kind, **data}) if as_json else text)

    config: Config | dict[str, Any]
    if config_path is not None:
        config = load_config(config_path)
        run = uuid.uuid4().hex[:6]  # fresh sessions on a long-lived log
        log = config.log
        where = f"{log.type} log at {log.bootstrap_servers if log.kind.broker else log.path}"
        out("start", f"{where}; view: {config.memory.view.name} in {config.memory.store}", config=config_path)
    else:
        directory = path or tempfile.mkdtemp(prefix="helix-demo-")
        config = {
            "log": {"type": "embedded", "path": directory},
            "memory": {"type": "sliding-window", "window_size": 4, "namespace": "demo"},
        }
        run = ""
        out(
            "start",
            f"embedded log in {directory}; view: sliding-window of 4 (the system message stays; a tool call "
            "leaves with its results)",
            path=directory,
        )
    names = {who: f"{who}-{run}" if run else who for who in ("alice", "bob")}
    async with (
        open_memory(config, session_id=names["alice"], runtime=runtime) as alice,
        open_memory(config, session_id=names["bob"], runtime=runtime) as bob,
    ):
        memories = {"alice": alice, "bob": bob}
        for turn, (who, message) in enumerate(SCRIPT, 1):
            mem = memories[who]
            position = await mem.add(message)
            got = await mem.get()
            out(
                "turn",
                f"\n[{turn}] {who} add {message.role} -> offset {position.offset}\n"
                f"    get    ({len(got)}): {_short(got)}",
                session=who,
                offset=position.offset,
                get=[json.loads(m.to_json()) for m in got],
            )
        for who, query in (("alice", "bergen"), ("bob", "BERGEN")):
            hits = await memories[who].search(query, limit=5)
            out(
                "search",
                f"\nsearch {who} {query!r} -> {_short(hits)}",
                session=who,
                query=query,
                hits=[m.content for m in hits],
            )
        await bob.clear()
        out("clear", f"\nbob clear -> get {await bob.get()} (the log keeps his turns)", session="bob")
        out("history", "\nalice's history, read back from the log (every turn, including evicted ones):")
        report = await audit(config, session_id=names["alice"], runtime=runtime)
        for event in report.events:
            out(
                "event",
                f"  #{event.position.offset:<4} {event.time.isoformat()[:23]}  {event.describe()}",
                **event.to_json(),
            )
        # Time travel: the view as it was after alice's 5th turn, folded from the log up to there.
        fifth = report.events[4]
        then = await audit(config, session_id=names["alice"], offset=fifth.position.offset, runtime=runtime)
        for view, messages in (then.views or {}).items():
            out(
                "as-of",
                "\n" + f"alice's {view} as of offset {fifth.position.offset} "
                f"({fifth.time.isoformat()[:23]}): {_short(messages)}",
                view=view,
                offset=fifth.position.offset,
                messages=[json.loads(m.to_json()) for m in messages],
            )
    if config_path is None:  # a second backend, built from the history alone (the embedded default)
        assert isinstance(config, dict)  # the embedded demo's own config
        second = {"log": config["log"], "memory": {"type": "token-window", "max_tokens": 60, "namespace": "demo"}}
        rebuilt_report = await rebuild(second, runtime=runtime)
        async with open_memory(second, session_id=names["alice"], runtime=runtime) as rebuilt:
            got = await rebuilt.get()
        out(
            "rebuild",
            "\n" + f"rebuilt a token-window of 60 tokens from the log: {rebuilt_report.events} events "
            f"into {rebuilt_report.target}; alice's window there: {_short(got)}",
            target=rebuilt_report.target,
            events=rebuilt_report.events,
            get=[json.loads(m.to_json()) for m in got],
        )
        await _facts(config, names["alice"], runtime, out)


async def _facts(config: dict[str, Any], alice: str, runtime: Runtime, out: Any) -> None:
    """Knowledge: a facts view on the same log; the rules extractor in the background, one supersession."""
    facts_config = {
        "log": config["log"],
        "memory": {"type": "facts", "namespace": "demo", "extract": {"provider": "rules"}},
    }
    async with open_memory(facts_config, session_id=alice, runtime=runtime) as knows:
        mem: Any = knows
        for text, said in FACT_TURNS:
            await knows.add(Message("user", text, name="alice", occurred_at=said))
        await mem.extract_now()  # the worker runs in the background; the demo waits for it
        now = await mem.facts(subject="alice")
        moves = await mem.facts(subject="alice", predicate="lives_in", history=True)
    out("facts", "\nwhat the facts view learned (rules extractor, no model), as FactsExtracted events on the log:")
    for f in now:
        out("fact", f"  {f.subject} {f.predicate} {f.value} (since {f.valid_from.date()})", **f.to_json())
    moved = " -> ".join(f"{f.value} {f.valid_from.date()}..{f.valid_to.date() if f.valid_to else 'now'}" for f in moves)
    out("supersession", f"  alice lives_in, with its history: {moved}", history=[f.to_json() for f in moves])


async def _run(args: argparse.Namespace) -> int:
    async with Runtime() as runtime:
        await run_demo(args.path, as_json=args.json, config_path=args.config, runtime=runtime)
    return 0


def add_command(sub: Any) -> None:
    demo = sub.add_parser("demo", help="a scripted agent conversation on the embedded log")
    demo.add_argument("--path", help="keep the log in this directory (default: a new temporary one)")
    demo.add_argument("--json", action="store_true", help="print JSON lines instead of text")
    demo.add_argument("--config", help="run against the log and store this YAML names (e.g. Kafka + Redis)")
    demo.set_defaults(run=_run)

"""The web console's screenshots for docs/integrations/console.md: a sample conversation, a real server, a browser.

    python bench/screenshots.py [--out bench/screenshots]

Writes a sample travel-agent conversation (a retried add, a tool call, recorded summaries, a
retraction, a clear) to an embedded log in a temporary directory, starts `helix-es serve` on it,
opens the console in headless Chromium (tests/browser.py; Debian's `chromium`, or HELIX_CHROMIUM)
at 1100x700 and writes two PNGs: console-timeline.png (each view at one point of the session) and
console-diff.png (what changed between two points), reduced to a 256-colour palette with Pillow
(matplotlib's dependency, in the `bench` extra) so each stays near 60 KB. Then, on a second log, a
year of one user's conversations with a facts view (each turn's facts extracted by the rules a few
seconds after it was said, as the worker does; a person's correction and a retraction) and
console-facts.png, the Facts tab with history on. Prints each file's size.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/browser.py and tests/served.py, and this checkout's helix_es

from helix_es import Message  # noqa: E402
from helix_es.client.memory import retract  # noqa: E402
from helix_es.log.embedded import EmbeddedLog  # noqa: E402
from helix_es.model.events import (  # noqa: E402
    Event,
    FactAsserted,
    FactRetracted,
    FactsExtracted,
    MessageAdded,
    SourceTurn,
)
from helix_es.model.message import ToolCall  # noqa: E402
from helix_es.providers.extract_rules import RULES_SHA256, VERSION, rule_facts  # noqa: E402
from helix_es.sync import open_memory  # noqa: E402
from helix_es.views.facts import fact_id  # noqa: E402
from tests.browser import Browser, Page  # noqa: E402
from tests.served import served  # noqa: E402

NAMESPACE = "travel-agent"
SESSION = "trip-lisbon"
KEY = "console-screenshots-key-2f8e1c"
WIDTH, HEIGHT = 1100, 700
FACTS_HEIGHT = 820  # every row of the sample in view


def config(log: Path) -> dict[str, Any]:
    backends = [
        {"type": "conversation"},
        {"type": "sliding-window", "window_size": 3},
        {"type": "summary", "max_messages": 4},
    ]
    return {
        "log": {"path": str(log), "fsync": False},
        "memory": {"type": "composite", "namespace": NAMESPACE, "backends": backends},
    }


def write_sample(cfg: dict[str, Any]) -> None:
    search = ToolCall(
        "call_1", "hotel_search", json.dumps({"area": "Alfama", "from": "2026-05-12", "to": "2026-05-15"})
    )
    turns = [
        Message("system", "You are a travel assistant. Keep answers short."),
        Message("user", "Three days in Lisbon in May: where should I stay?"),
        Message("assistant", "Alfama for the old town, Príncipe Real for quiet evenings."),
    ]
    with open_memory(cfg, session_id=SESSION) as mem:
        for message in turns:
            mem.add(message)
        for _ in range(2):  # a retry with the same key: on the log twice, in the views once
            mem.add(Message("user", "Check hotel prices in Alfama for 12-15 May."), idempotency_key="turn-4")
        mem.add(Message("assistant", "", tool_calls=(search,)))
        mem.add(
            Message(
                "tool",
                json.dumps(
                    {"hotels": [{"name": "Memmo Alfama", "eur": 240}, {"name": "Solar do Castelo", "eur": 210}]}
                ),
                tool_call_id="call_1",
            )
        )
        mem.add(Message("assistant", "Memmo Alfama is €240 a night, Solar do Castelo €210."))
        mem.add(Message("user", "Book Solar do Castelo, card 4111 1111 1111 1111"))
        mem.run(lambda m: retract(m, reason="card number pasted by mistake"))
        mem.add(Message("user", "Book Solar do Castelo, I'll pay at the desk."))
        mem.add(Message("assistant", "Booked: Solar do Castelo, 12-15 May, pay on arrival."))
        mem.clear()
        mem.add(Message("user", "New trip: a weekend in Porto."))
        mem.add(Message("assistant", "Ribeira, by the river, is the classic pick."))
    for sid, count in (("trip-porto", 3), ("support-42", 6)):
        with open_memory(cfg, session_id=sid) as mem:
            for i in range(count):
                mem.add(Message("user" if i % 2 == 0 else "assistant", f"message {i + 1} of {sid}"))


FACTS_NAMESPACE = "support-bot"
# (when it was said, the session, what Ana said): the rules extract each turn's facts a few seconds later.
FACTS_TURNS = [
    ("2025-01-14T09:12:00", "onboarding", "Hi! My name is Ana Souza. I live in Lisbon since 2019."),
    ("2025-01-14T09:13:00", "onboarding", "I'm a product designer at Farfetch."),
    ("2025-01-14T09:15:00", "onboarding", "I speak Portuguese, English and Spanish. I love jazz and long walks."),
    ("2025-05-20T18:40:00", "moving", "Big news: I moved to Porto in May 2025."),
    ("2025-08-03T11:02:00", "weekend", "We adopted a dog named Miso. Honestly, I don't like jazz anymore."),
]


def facts_config(log: Path) -> dict[str, Any]:
    facts = {"type": "facts", "extract": {"provider": "rules"}, "batch": {"turns": 100, "idle": 3600}}
    return {
        "log": {"path": str(log), "fsync": False},
        "memory": {"type": "composite", "namespace": FACTS_NAMESPACE, "backends": [{"type": "conversation"}, facts]},
    }


async def write_facts_sample(log_path: Path) -> None:
    """Ana's turns and what the worker would have recorded a few seconds after each; in October a person
    states her new employer, in November one of the model's facts is taken back."""
    log = EmbeddedLog(log_path, fsync=False)
    at = datetime.fromisoformat
    ids: dict[tuple[str, str], str] = {}  # (predicate, value) -> the id the facts view gives the fact
    try:
        for said, session, text in FACTS_TURNS:
            when = at(said).replace(tzinfo=UTC)
            message = Message("user", text, name="Ana", occurred_at=when)
            added = Event(FACTS_NAMESPACE, session, MessageAdded(message), timestamp=when)
            source = SourceTurn(str(added.event_id), await log.append(added), when)
            facts = rule_facts(text, "Ana")
            ids.update({(f.predicate, f.value): fact_id("facts", [source.event_id], i) for i, f in enumerate(facts)})
            found = FactsExtracted("facts", VERSION, RULES_SHA256, facts, (source,))
            await log.append(Event(FACTS_NAMESPACE, session, found, timestamp=when + timedelta(seconds=4)))
        stated = FactAsserted("Ana", "works_at", "Sword Health", at("2025-10-01T00:00:00+00:00"))
        await log.append(Event(FACTS_NAMESPACE, "facts", stated, timestamp=at("2025-10-06T14:20:00+00:00")))
        taken = FactRetracted(ids[("speaks", "Spanish")], "Ana", "speaks", "Spanish", "she only reads it")
        await log.append(Event(FACTS_NAMESPACE, "facts", taken, timestamp=at("2025-11-12T10:05:00+00:00")))
    finally:
        await log.close()


def palette_png(data: bytes, path: Path) -> int:
    """The screenshot with a 256-colour palette: text and flat colours lose nothing visible, the file ~3x."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    return path.stat().st_size


def settle(page: Page, condition: str) -> None:
    page.wait_for(condition)
    page.wait_for("!document.querySelector('#views-pane').classList.contains('loading')")
    time.sleep(0.3)  # the scroll into view and the fonts


def shoot(base: str, out: Path) -> dict[str, int]:
    sizes: dict[str, int] = {}
    with Browser.start() as browser:
        page = browser.new_page(WIDTH, HEIGHT)
        at = f"{base}/ui/?namespace={NAMESPACE}&session={SESSION}"
        page.goto(f"{at}&offset=12&key={KEY}")
        settle(page, "document.querySelectorAll('.view').length === 3")
        sizes["console-timeline.png"] = palette_png(
            page.screenshot(out / "console-timeline.png"), out / "console-timeline.png"
        )
        page.goto(f"{at}&offset=5&compare=13")
        settle(page, "document.querySelector('.views-head h2')?.textContent.includes('changed')")
        sizes["console-diff.png"] = palette_png(page.screenshot(out / "console-diff.png"), out / "console-diff.png")
        if page.problems:
            raise RuntimeError(f"the console reported problems: {page.problems}")
    return sizes


def shoot_facts(base: str, out: Path) -> dict[str, int]:
    """The Facts tab with history on: every fact Ana's memory holds and held, valid and known time."""
    with Browser.start() as browser:
        page = browser.new_page(WIDTH, FACTS_HEIGHT)
        page.goto(f"{base}/ui/?namespace={FACTS_NAMESPACE}&tab=facts&history=1&key={KEY}")
        page.wait_for("document.querySelectorAll('#facts-chart g.fact').length >= 8")
        page.wait_for("!document.querySelector('#facts-pane').classList.contains('loading')")
        time.sleep(0.3)  # the fonts
        size = palette_png(page.screenshot(out / "console-facts.png"), out / "console-facts.png")
        if page.problems:
            raise RuntimeError(f"the console reported problems: {page.problems}")
    return {"console-facts.png": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "screenshots")
    parser.add_argument(
        "--only", choices=["sessions", "facts"], help="only the session shots, or only the Facts tab's (default both)"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="helix-screenshots-") as tmp:
        if args.only != "facts":
            cfg = config(Path(tmp) / "log")
            write_sample(cfg)
            with served(cfg, {KEY: [NAMESPACE]}, Path(tmp)) as base:
                sizes.update(shoot(base, args.out))
        if args.only != "sessions":
            where = Path(tmp) / "facts"
            where.mkdir()
            asyncio.run(write_facts_sample(where / "log"))
            with served(facts_config(where / "log"), {KEY: [FACTS_NAMESPACE]}, where) as base:
                sizes.update(shoot_facts(base, args.out))
    for name, size in sizes.items():
        print(f"{args.out / name}: {size / 1024:.0f} KB")


if __name__ == "__main__":
    main()

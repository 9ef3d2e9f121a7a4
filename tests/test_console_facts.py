"""The console's Facts tab, in a real headless Chromium against a real `helix-es serve` process.

The namespace's facts come from a composite's facts view: extracted by the rules from seeded
conversations, then corrected through the service's own API (a person's assertion, a retraction).
The tab draws them as an SVG timeline; the test reads the drawing back: a row per fact under its
subject and predicate, a valid-time bar and a known-time bar each, superseded rows closed where the
next value begins, retracted ones struck through, the value as text.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from helix_es import Message
from helix_es.sync import open_memory
from tests.browser import Browser, Page
from tests.conftest import unique
from tests.test_console import KEY, MARKUP, browser, page, real_problems, serve

__all__ = ["browser"]  # the module's Chromium, shared with tests/test_console.py's fixture

ROWS = """[...document.querySelectorAll('#facts-chart g.fact')].map(g => {
  const bar = (cls) => {
    const r = g.querySelector('rect.' + cls);
    return [Number(r.getAttribute('x')), Number(r.getAttribute('width'))];
  };
  const before = g.previousElementSibling;
  return {
    value: g.dataset.value, label: g.querySelector('text.value').textContent, kind: g.dataset.kind,
    valid: bar('valid'), known: bar('known'), group: before?.matches('g.group') ? before.textContent : null,
    strike: !!g.querySelector('line.strike'), end: !!g.querySelector('line.valid-end'),
  };
})"""


def send(base: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    request = urllib.request.Request(
        f"{base}/v1/{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        method=method,
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def seed(config: dict[str, Any], namespace: str) -> None:
    """Three conversations the rules extractor reads: where Ana lived, then lives; what Bo speaks and likes."""
    for sid, name, text in [
        ("s1", "Ana", "I live in Lisbon since 2019."),
        ("s2", "Ana", "I moved to Porto in May 2025."),
        ("s3", "Bo", "I speak Danish and I love chess."),
    ]:
        with open_memory(config, session_id=sid) as mem:
            mem.add(Message("user", text, name=name))
            mem.run(lambda m: m.backend.extract(namespace))  # type: ignore[attr-defined]


def rows(tab: Page) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = tab.evaluate(ROWS)
    return found


def wait_rows(tab: Page, count: int) -> list[dict[str, Any]]:
    tab.wait_for(f"document.querySelectorAll('#facts-chart g.fact').length === {count}", what=f"{count} fact rows")
    tab.wait_for("!document.querySelector('#facts-pane').classList.contains('loading')")
    return rows(tab)


def test_the_facts_tab_draws_valid_and_known_time(browser: Browser, tmp_path: Path) -> None:
    ns = unique("console")
    facts = {"type": "facts", "extract": {"provider": "rules"}, "batch": {"turns": 100, "idle": 3600}}
    config = {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False},
        "memory": {"type": "composite", "namespace": ns, "backends": [{"type": "conversation"}, facts]},
    }
    seed(config, ns)
    with serve(config, ns, tmp_path) as base:
        job = {"subject": "Ana", "predicate": "works_at", "value": "Acme", "valid_from": "2024-01-01T00:00:00Z"}
        send(base, "POST", f"{ns}/facts", job)
        send(base, "POST", f"{ns}/facts", {"subject": "Bo", "predicate": "likes", "value": MARKUP})
        chess = next(f for f in send(base, "GET", f"{ns}/facts?subject=bo")["facts"] if f["value"] == "chess")
        send(base, "DELETE", f"{ns}/facts/{chess['id']}?reason=not%20any%20more")

        with page(browser) as tab:
            tab.goto(f"{base}/ui/?namespace={ns}&key={KEY}")
            # the sidebar settled (the sessions, the namespaces' chips): nothing moves under the click
            tab.wait_for("document.querySelectorAll('#sessions a.session').length === 4", what="the sessions")
            tab.wait_for(f"[...document.querySelectorAll('#ns-recent a')].some(a => a.textContent === {ns!r})")
            tab.click("#tab-facts")
            now = wait_rows(tab, 4)  # what holds now: Porto, Acme, Danish, the markup
            assert "tab=facts" in tab.url() and tab.evaluate("document.body.classList.contains('facts-mode')")
            assert tab.texts("#ns-tabs a.active") == ["Facts"]
            assert sorted(r["value"] for r in now) == sorted(["Porto", "Acme", "Danish", MARKUP])
            assert all(r["kind"] == "current" and not r["strike"] and not r["end"] for r in now)
            assert all(r["valid"][1] > 0 and r["known"][1] > 0 for r in now), now
            porto = next(r for r in now if r["value"] == "Porto")
            assert porto["group"] == "Ana  lives_in"
            assert "4 facts, holding now" in tab.text("#facts-head")

            # History: the superseded home and the retracted like join, each drawn as what it is.
            tab.click("#facts-history")
            every = wait_rows(tab, 6)
            assert "history=1" in tab.url()
            lisbon = next(r for r in every if r["value"] == "Lisbon")
            chess_row = next(r for r in every if r["value"] == "chess")
            porto = next(r for r in every if r["value"] == "Porto")
            assert lisbon["kind"] == "superseded" and lisbon["end"] and not lisbon["strike"]
            assert abs(lisbon["valid"][0] + lisbon["valid"][1] - porto["valid"][0]) < 1  # closed where Porto began
            assert lisbon["valid"][0] < lisbon["known"][0]  # held since 2019, known only since the seeding
            assert chess_row["kind"] == "retracted" and chess_row["strike"]
            acme = next(r for r in every if r["value"] == "Acme")
            assert acme["valid"][0] < porto["valid"][0] and acme["valid"][0] > lisbon["valid"][0]  # 2019 < 2024 < 2025
            tooltip = tab.evaluate(
                "document.querySelector(`#facts-chart g.fact[data-kind='retracted'] title`).textContent"
            )
            assert "Bo likes chess" in tooltip and "retracted" in tooltip and chess["id"] in tooltip

            # Filters: one subject; the link keeps them.
            tab.type("#facts-subject", "ana")
            tab.press("Enter")
            ana = wait_rows(tab, 3)
            assert sorted(r["value"] for r in ana) == ["Acme", "Lisbon", "Porto"]
            assert "subject=ana" in tab.url()
            tab.goto(tab.url())
            assert sorted(r["value"] for r in wait_rows(tab, 3)) == ["Acme", "Lisbon", "Porto"]
            assert tab.evaluate("document.querySelector('#facts-history').checked")

            # Markup in a value is text (its label cut short, the row keeping all of it); Sessions is back.
            assert next(r["label"] for r in every if r["value"] == MARKUP) == MARKUP[:25] + "\N{HORIZONTAL ELLIPSIS}"
            assert tab.evaluate("document.querySelectorAll('#facts-chart img, #facts-chart b').length") == 0
            assert tab.evaluate("window.injected") is None
            tab.click("#tab-sessions")
            tab.wait_for("!document.body.classList.contains('facts-mode')", what="the sessions tab")
            assert tab.evaluate("document.querySelector('#facts-pane').hidden") and "tab=" not in tab.url()
            tab.wait_for("document.querySelectorAll('#sessions a.session').length === 4", what="the sessions")
            assert real_problems(tab) == []

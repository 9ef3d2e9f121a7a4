"""The web console at /ui/, in a real headless Chromium against a real `helix-es serve` process.

One test on the embedded file log (seeded by the Python client before the server starts, so it
holds a retry and a retraction too), one on Kafka with Redis views folded by `helix-es project`
processes (seeded through the service's own API; its summary part records summaries on the log).
Both configs compose a conversation and a sliding window of 3, so the columns differ as the cut
moves. One more shreds an encrypted session with forget and shows its erasure. Chromium comes
from tests/browser.py; without one the browser tests skip, or fail under HELIX_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from helix_es import Message
from helix_es.client.memory import retract
from helix_es.log.embedded import EmbeddedLog
from helix_es.model.events import Event, MessageAdded
from helix_es.sync import open_memory
from tests.browser import Browser, BrowserError, Page, chromium_path
from tests.conftest import REQUIRE, start_projector, unique
from tests.served import served

KEY = "console-test-key-0123456789"  # may read the test's namespace
OUTSIDER = "console-outsider-key-987654"  # may read another namespace only
WINDOW = "sliding-window-3-pairs"
MARKUP = '<img src=x onerror="window.injected=1"><b>bold</b>'  # must show as text, never run


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    path = chromium_path()
    if path is None:
        message = "no Chromium for the console tests: apt-get install chromium, or set HELIX_CHROMIUM to a binary"
        if REQUIRE:
            pytest.fail(message + " [HELIX_REQUIRE_SERVICES=1]", pytrace=False)
        pytest.skip(message)
    with Browser.start(path) as started:
        yield started


def parts(**store: Any) -> list[dict[str, Any]]:
    return [{"type": "conversation", **store}, {"type": "sliding-window", "window_size": 3, **store}]


@contextmanager
def serve(config: dict[str, Any], namespace: str, tmp_path: Path) -> Iterator[str]:
    with served(config, {KEY: [namespace], OUTSIDER: ["somewhere-else"]}, tmp_path) as base:
        yield base


def call(base: str, path: str, body: dict[str, Any] | None = None, key: str = KEY) -> Any:
    """One /v1 request (a POST when there is a body); its JSON answer."""
    request = urllib.request.Request(
        f"{base}/v1/{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="GET" if body is None else "POST",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


@contextmanager
def page(browser: Browser) -> Iterator[Page]:
    """A fresh tab (its own sessionStorage: no key yet), closed after the block."""
    tab = browser.new_page(1100, 700)
    try:
        yield tab
    finally:
        browser.send("Target.closeTarget", {"targetId": tab.target})


def real_problems(tab: Page) -> list[str]:
    """What went wrong in the page, but the 401 and 403 answers a test asked for."""
    return [p for p in tab.problems if not ("(network)" in p and ("401" in p or "403" in p))]


def contents(tab: Page, view: str) -> list[str]:
    return tab.texts(f'.view[data-view="{view}"] .msg-text')


def wait_contents(tab: Page, view: str, expected: list[str]) -> None:
    selector = json.dumps(f'.view[data-view="{view}"] .msg-text')
    try:
        tab.wait_for(
            f"JSON.stringify([...document.querySelectorAll({selector})].map(e => e.textContent)) === "
            f"{json.dumps(json.dumps(expected, separators=(',', ':')))}",
        )
    except BrowserError as exc:
        raise AssertionError(f"{view} shows {contents(tab, view)}, not {expected}: {exc}") from None


def wait_cut(tab: Page, offset: int) -> None:
    tab.wait_for(f"new URLSearchParams(location.search).get('offset') === '{offset}'", what=f"the cut at @{offset}")


def seed_embedded(config: dict[str, Any], session_id: str) -> None:
    """m1..m6 with a retried m5 (one idempotency key), then a message taken back; another session."""
    with open_memory(config, session_id=session_id) as mem:
        for i, role in enumerate(["user", "assistant", "user", "assistant"], 1):
            mem.add(Message(role, f"m{i}"))
        for _ in range(2):
            mem.add(Message("user", "m5"), idempotency_key="k-5")
        mem.add(Message("assistant", "m6"))
        mem.add(Message("user", "my card is 4111 1111 1111 1111"))
        mem.run(lambda m: retract(m, reason="pasted by mistake"))
    with open_memory(config, session_id="other-session") as mem:
        mem.add(Message("user", "hello"))
        mem.clear()
        mem.add(Message("user", MARKUP))


def test_console_lists_many_sessions_a_page_at_a_time_and_filters_on_the_server(
    browser: Browser, tmp_path: Path
) -> None:
    """203 sessions: the first 200 newest first, "Show more" the rest; the filter asks the server."""
    ns = unique("console")
    config = {"log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False}, "memory": {"namespace": ns}}

    async def write() -> None:
        log = EmbeddedLog(tmp_path / "log", fsync=False)
        try:
            for i in range(203):
                at = datetime(2031, 1, 1, tzinfo=UTC) + timedelta(seconds=i)
                await log.append(Event(ns, f"s-{i:03}", MessageAdded(Message("user", "hi")), timestamp=at))
        finally:
            await log.close()

    asyncio.run(write())
    with serve(config, ns, tmp_path) as base, page(browser) as tab:
        tab.goto(f"{base}/ui/?namespace={ns}&key={KEY}")
        tab.wait_for("document.querySelectorAll('#sessions a.session').length === 200", what="the first page")
        assert tab.text("#sessions-count") == "203" and "3 more" in tab.text("#sessions-more")
        assert tab.texts("#sessions .sid")[:2] == ["s-202", "s-201"]  # newest first
        tab.click("#sessions-more")
        tab.wait_for("document.querySelectorAll('#sessions a.session').length === 203", what="the second page")
        assert tab.texts("#sessions .sid")[-1] == "s-000" and tab.evaluate("!document.querySelector('#sessions-more')")
        tab.type("#session-filter", "S-07")
        tab.wait_for("document.querySelectorAll('#sessions a.session').length === 10", what="the filtered list")
        assert tab.texts("#sessions .sid") == [f"s-07{i}" for i in reversed(range(10))]
        assert tab.text("#sessions-count") == "10"
        assert real_problems(tab) == []


def test_console_on_the_embedded_log(browser: Browser, tmp_path: Path) -> None:
    ns, sid = unique("console"), "s-window"
    config = {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False},
        "memory": {"type": "composite", "namespace": ns, "backends": parts()},
    }
    seed_embedded(config, sid)
    with serve(config, ns, tmp_path) as base:
        with urllib.request.urlopen(f"{base}/ui/", timeout=10) as answer:
            assert "default-src 'self'" in answer.headers["Content-Security-Policy"]

        with page(browser) as tab:
            # The key, entered once in the form; then the namespace and its sessions.
            tab.goto(f"{base}/ui/")
            tab.wait_for_selector("#key-form")
            tab.type("#key-input", KEY)
            tab.press("Enter")
            tab.wait_for_selector("#ns-input")
            assert tab.evaluate("sessionStorage.getItem('helix-es.console.key')") == KEY
            assert KEY not in tab.text("body")
            # the namespaces this key may use on the log are offered before any is typed
            tab.wait_for(f"[...document.querySelectorAll('#ns-recent a')].some(a => a.textContent === {ns!r})")
            tab.type("#ns-input", ns)
            tab.press("Enter")
            tab.wait_for("document.querySelectorAll('#sessions a.session').length === 2", what="two sessions")
            assert tab.texts("#sessions .sid") == ["other-session", sid]  # newest first

            # The session's timeline, each event by kind; the cut starts at the newest event.
            tab.click(f'#sessions a[data-session="{sid}"]')
            tab.wait_for("document.querySelectorAll('.view').length === 2", what="the two views")
            kinds = tab.evaluate("[...document.querySelectorAll('#timeline li.ev')].map(e => e.dataset.kind)")
            assert kinds == ["add"] * 5 + ["duplicate", "add", "add", "retract"]
            # Positions are the session's turns with the log's offset beside them, here and in other events' text.
            assert tab.texts("#timeline li.ev .turn") == [f"turn {i}" for i in range(1, 10)]
            assert tab.texts("#timeline li.ev .off") == [f"@{i}" for i in range(9)]
            assert "retry of turn 5 (@4)" in tab.text('#timeline li[data-kind="duplicate"]')
            assert "took back the message at turn 8 (@7)" in tab.text('#timeline li[data-kind="retract"]')
            assert tab.evaluate("document.querySelectorAll('#timeline .cut-line').length") == 0  # nothing after
            assert tab.texts(".view h3") == ["conversation", WINDOW]
            wait_contents(tab, WINDOW, ["m5", "m6"])  # the retraction took back the window's newest
            assert contents(tab, "conversation") == ["m1", "m2", "m3", "m4", "m5", "m6"]
            assert "offset=8" in tab.url() and f"session={sid}" in tab.url()

            # Move the cut: a click, the arrow keys, the slider; the window changes, the conversation grows.
            tab.click('#timeline li[data-offset="1"]')
            wait_cut(tab, 1)
            wait_contents(tab, WINDOW, ["m1", "m2"])
            assert contents(tab, "conversation") == ["m1", "m2"]
            tab.evaluate("document.activeElement.blur()")
            tab.press("ArrowRight")
            tab.press("ArrowRight")
            wait_cut(tab, 3)
            wait_contents(tab, WINDOW, ["m2", "m3", "m4"])
            assert contents(tab, "conversation") == ["m1", "m2", "m3", "m4"]
            tab.evaluate("document.querySelector('#cut-range').focus()")
            tab.press("Home")  # the slider's own key: its first event
            wait_cut(tab, 0)
            wait_contents(tab, WINDOW, ["m1"])
            tab.click('#timeline li[data-offset="3"]')
            wait_cut(tab, 3)
            # Where the history is cut: a labelled line right under the cut's event, the events past it below.
            tab.wait_for("document.querySelector('.views-head .cut-name')?.textContent.startsWith('turn 4 · @3 · ')")
            after_cut = tab.evaluate(
                "[...document.querySelectorAll('#timeline > li')].map(li => li.dataset.offset ?? li.textContent)"
            )
            assert after_cut == ["0", "1", "2", "3", "after the cut", "4", "5", "6", "7", "8"]
            assert tab.evaluate("document.querySelector('#timeline .cut-line').getAttribute('role')") == "separator"
            assert tab.texts("#timeline li.ev.after .off") == ["@4", "@5", "@6", "@7", "@8"]

            # A second point: per view, what was added and removed between the two.
            tab.click('#timeline li[data-offset="6"]', shift=True)
            tab.wait_for("document.querySelector('.views-head h2')?.textContent.includes('changed')")
            diff_url = tab.url()
            assert "offset=3" in diff_url and "compare=6" in diff_url
            assert [n.split(" · ")[0] for n in tab.texts(".views-head .cut-name")] == ["turn 4", "turn 7"]
            assert tab.evaluate(
                "document.querySelector('#timeline li[data-offset=\"6\"]').nextElementSibling.className"
            ) == ("cut-line")
            assert tab.texts(f'.view[data-view="{WINDOW}"] .msg.added .msg-text') == ["m5", "m6"]
            assert tab.texts(f'.view[data-view="{WINDOW}"] .msg.removed .msg-text') == ["m2", "m3"]
            assert tab.texts('.view[data-view="conversation"] .msg.added .msg-text') == ["m5", "m6"]
            assert tab.texts('.view[data-view="conversation"] .msg.removed') == []
            assert tab.texts(f'.view[data-view="{WINDOW}"] .delta span') == ["+2", "\N{MINUS SIGN}2"]

            # A time cut: the events stamped at or before the third one's time.
            tab.press("Escape")
            tab.wait_for("!location.search.includes('compare')")
            third = tab.evaluate("document.querySelector('#timeline li[data-offset=\"2\"] time').dateTime")
            tab.type("#asof-input", third)
            tab.press("Enter")
            tab.wait_for("location.search.includes('as_of=')")
            wait_contents(tab, WINDOW, ["m1", "m2", "m3"])
            assert urllib.parse.parse_qs(urllib.parse.urlsplit(tab.url()).query)["as_of"] == [third]

            # Markup in a message is text: shown as written, never parsed.
            tab.goto(f"{base}/ui/?namespace={ns}&session=other-session")
            tab.wait_for("document.querySelectorAll('#timeline li.ev').length === 3", what="the other session")
            assert tab.evaluate("[...document.querySelectorAll('#timeline li.ev')].map(e => e.dataset.kind)") == [
                "add",
                "clear",
                "add",
            ]
            wait_contents(tab, "conversation", [MARKUP])
            assert tab.evaluate("document.querySelectorAll('#views img, #timeline img, #views b').length") == 0
            assert tab.evaluate("window.injected") is None
            assert real_problems(tab) == []

        with page(browser) as tab:
            # The link reopens the same place; a key it carries is kept for the tab and leaves the address bar.
            tab.goto(f"{diff_url}&key={KEY}")
            tab.wait_for(f"document.querySelectorAll('.view[data-view=\"{WINDOW}\"] .msg.added').length === 2")
            assert "key=" not in tab.url()
            # about:blank and this page: the entry with the key was replaced, so Back does not bring it back
            assert tab.evaluate("history.length") == 2
            assert tab.url() == diff_url
            assert tab.texts(f'.view[data-view="{WINDOW}"] .msg.removed .msg-text') == ["m2", "m3"]
            assert tab.texts("#timeline li.cut .off") == ["@3"] and tab.texts("#timeline li.compare .off") == ["@6"]
            assert real_problems(tab) == []

        with page(browser) as tab:
            # A key without the namespace: 403 said in words, nothing listed.
            tab.goto(f"{base}/ui/?namespace={ns}&key={OUTSIDER}")
            tab.wait_for("!document.querySelector('#notice').hidden", what="the 403 notice")
            assert "403" in tab.text("#notice-title") and ns in tab.text("#notice-title")
            assert "keys file" in tab.text("#notice-body")
            assert tab.texts("#sessions a.session") == []
            # An unknown key: 401, and the key form again.
            tab.goto(f"{base}/ui/?namespace={ns}&session={sid}&key=not-a-key")
            tab.wait_for("document.querySelector('#notice-title').textContent.includes('401')", what="the 401")
            tab.wait_for_selector("#key-form")
            assert tab.evaluate("sessionStorage.getItem('helix-es.console.key')") is None
            assert real_problems(tab) == []


def test_console_on_kafka_with_redis_views(
    browser: Browser, tmp_path: Path, kafka_bootstrap: str, redis_url: str, procs: list[Any]
) -> None:
    ns, sid = unique("console"), unique("s")
    store = {"store": "redis", "redis_url": redis_url}
    summary = {"type": "summary", "max_messages": 2, **store}
    config = {
        "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 1, "topic_prefix": unique("ui")},
        "memory": {"type": "composite", "namespace": ns, "backends": [*parts(**store), summary], "read_timeout": 60},
    }
    procs.append(start_projector(config, tmp_path))
    with serve(config, ns, tmp_path) as base:
        turns = [{"role": "user" if i % 2 else "assistant", "content": f"k{i}"} for i in range(1, 6)]
        call(base, f"{ns}/sessions/{sid}/messages", {"messages": turns})
        # The summary's projector records its summaries on the log once it has folded the adds.
        deadline = time.monotonic() + 30
        while "SummaryRecorded" not in {e["type"] for e in call(base, f"{ns}/sessions/{sid}/audit")["events"]}:
            assert time.monotonic() < deadline, "the projector recorded no summary on the log"
            time.sleep(0.1)
        with page(browser) as tab:
            tab.goto(f"{base}/ui/?namespace={ns}&session={sid}&key={KEY}")
            tab.wait_for("document.querySelector('#timeline li[data-kind=\"summary\"]')", what="a summary event")
            assert "summary-2-pairs, covering" in tab.text('#timeline li[data-kind="summary"]')
            tab.wait_for("document.querySelectorAll('#sessions .sid').length === 1", what="the session listed")
            assert tab.texts("#sessions .sid") == [sid]
            wait_contents(tab, WINDOW, ["k3", "k4", "k5"])
            first = int(tab.evaluate("document.querySelector('#timeline li.ev').dataset.offset"))
            tab.click(f'#timeline li[data-offset="{first + 1}"]')
            wait_cut(tab, first + 1)
            wait_contents(tab, WINDOW, ["k1", "k2"])
            # The service's own view (Redis, folded by the projector) beside the folds at the cut.
            tab.click("#now-toggle")
            tab.wait_for("document.querySelector('.view.now .msg')", what="the get() now column")
            # The parts merged in order, repeats dropped: the conversation's five, then the summary's own.
            assert contents(tab, "get() now")[:5] == ["k1", "k2", "k3", "k4", "k5"]
            assert contents(tab, "conversation") == ["k1", "k2"]
            assert real_problems(tab) == []


def test_an_erasure_on_the_timeline(browser: Browser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """forget (an admin key) shreds an encrypted session: its adds show erased, the erasure last."""
    monkeypatch.setenv("HELIX_ENCRYPTION_KEY", base64.b64encode(os.urandom(32)).decode())  # the server's env
    monkeypatch.setenv("HELIX_KEY_STORE", "file")
    monkeypatch.setenv("HELIX_KEY_STORE_URL", str(tmp_path / "keys"))
    ns, sid, admin = unique("console"), "s-forget", "console-admin-key-55aa77"
    config = {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False},
        "memory": {"type": "sliding-window", "window_size": 3, "namespace": ns},
        "memory_middleware": ["encryption"],
    }
    keys = {KEY: [ns], admin: {"namespaces": [ns], "admin": True}}
    with served(config, keys, tmp_path) as base:
        for i in range(1, 5):
            call(base, f"{ns}/sessions/{sid}/messages", {"role": "user", "content": f"IBAN NO93 {i}"})
        call(base, f"{ns}/sessions/{sid}/forget", {"reason": "ticket 9"}, key=admin)
        with page(browser) as tab:
            tab.goto(f"{base}/ui/?namespace={ns}&session={sid}&key={KEY}")
            tab.wait_for("document.querySelector('#timeline li[data-kind=\"erasure\"]')", what="the erasure")
            kinds = tab.evaluate("[...document.querySelectorAll('#timeline li.ev')].map(e => e.dataset.kind)")
            assert kinds == ["erased"] * 4 + ["erasure"]
            assert "content erased" in tab.text('#timeline li[data-kind="erased"]')
            assert "forgotten at" in tab.text("#session-head")
            assert "NO93" not in tab.text("#timeline")
            assert real_problems(tab) == []


def test_the_console_builds_the_page_from_text_and_its_own_files_only() -> None:
    """No markup from data (no innerHTML and the like), no inline script or style, nothing from other hosts."""
    console = Path(__file__).resolve().parent.parent / "helix_es" / "service" / "console"
    for script in console.glob("*.js"):
        code = script.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert sink not in code, f"{script.name} uses {sink}"
        assert not re.search(r"""\bimport\b[^;]*from\s*["'](?!\./)""", code), f"{script.name} imports from elsewhere"
    html = (console / "index.html").read_text()
    assert "<style" not in html and not re.search(r"\s(style|on[a-z]+)\s*=", html)  # inline style or handler
    assert re.findall(r"<script[^>]*>", html) == ['<script type="module" src="app.js">']
    assert all("/" not in link for link in re.findall(r'(?:src|href)="([^"]*)"', html) if link != "./")
    css = " ".join(p.read_text() for p in console.glob("*.css"))
    assert "url(" not in css and "@import" not in css


def test_the_docs_links_and_keys_file_are_the_ones_the_console_and_server_read() -> None:
    root = Path(__file__).resolve().parent.parent
    section = (root / "docs" / "integrations" / "console.md").read_text()
    shell = section.split("```sh\n", 1)[1].split("```", 1)[0]
    keys = json.loads(re.search(r"echo '(.*)' > keys\.json", shell).group(1))  # type: ignore[union-attr]
    assert keys and all(isinstance(names, list) for names in keys.values())
    app = (root / "helix_es" / "service" / "console" / "app.js").read_text()
    links = re.findall(r"/ui/\?([^\s`)]+)", section)
    assert len(links) >= 2
    for link in links:
        for param in urllib.parse.parse_qs(link):
            assert f'"{param}"' in app, f"the console page's link names {param}, which the console does not read"


def test_the_search_box_shows_hits_with_their_explain_and_opens_the_hits_session(
    browser: Browser, tmp_path: Path
) -> None:
    ns = unique("console")
    backends = [{"type": "sliding-window", "window_size": 3}, {"type": "vector", "search": "hybrid"}]
    config = {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False},
        "memory": {"type": "composite", "namespace": ns, "backends": backends},
    }
    with open_memory(config, session_id="alice") as mem:
        mem.add(Message("user", "I moved to Porto last September", name="Caroline"))
        mem.add(Message("user", MARKUP))
    with open_memory(config, session_id="bob") as mem:
        mem.add(Message("user", "My dog is a husky called Miso", name="Dmitri"))
    with serve(config, ns, tmp_path) as base, page(browser) as tab:
        tab.goto(f"{base}/ui/?namespace={ns}&key={KEY}")
        tab.wait_for_selector("#recall-input")
        tab.type("#recall-input", "Where did Caroline move to?")
        tab.press("Enter")
        tab.wait_for("document.querySelectorAll('#recall-hits li.hit').length === 3", what="three hits")
        assert tab.texts("#recall-hits .hit-text")[0] == "I moved to Porto last September"
        why = tab.texts("#recall-hits .hit-why")[0]
        assert "keyword #1" in why and "vector #" in why and "score " in why, why
        assert MARKUP in tab.texts("#recall-hits .hit-text")  # shown as text
        assert tab.evaluate("window.injected === undefined")
        tab.click('#recall-hits li.hit a[data-session="alice"][data-offset="0"]')
        wait_cut(tab, 0)
        tab.wait_for("new URLSearchParams(location.search).get('session') === 'alice'", what="the hit's session")
        assert real_problems(tab) == []

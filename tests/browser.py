"""A headless Chromium driven over the DevTools protocol, with the standard library only.

Chromium runs with `--remote-debugging-pipe`: it reads protocol messages (JSON, each ended by a
NUL byte) on its fd 3 and writes its answers and events on fd 4. A reader thread files answers
by id and keeps events, so the tests can call `Page` methods synchronously:

    with Browser.start() as browser:
        page = browser.new_page(width=1100, height=700)
        page.goto("http://127.0.0.1:8000/ui/")
        page.wait_for("document.querySelector('#key-form') !== null")
        page.click("#key-form button")
        page.screenshot(path)

`chromium_path()` finds the binary: HELIX_CHROMIUM, else chromium (Debian's) on PATH or the
usual other names. Every console message, uncaught exception and browser log entry (a
Content-Security-Policy violation is one) is kept in `page.problems` for the tests to check.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Debian's /usr/bin/chromium is a shell wrapper; the binary beside it starts faster and the same way.
DEBIAN_BINARY = Path("/usr/lib/chromium/chromium")

FLAGS = [
    "--headless=new",
    "--remote-debugging-pipe",
    "--no-sandbox",  # the tests may run as root, where Chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--hide-scrollbars",
    "--mute-audio",
    "--force-color-profile=srgb",
    "--font-render-hinting=none",
]

KEYS = {  # key -> (code, windowsVirtualKeyCode) for Input.dispatchKeyEvent
    "ArrowLeft": ("ArrowLeft", 37),
    "ArrowUp": ("ArrowUp", 38),
    "ArrowRight": ("ArrowRight", 39),
    "ArrowDown": ("ArrowDown", 40),
    "Enter": ("Enter", 13),
    "Escape": ("Escape", 27),
    "Tab": ("Tab", 9),
    "Home": ("Home", 36),
    "End": ("End", 35),
}
SHIFT = 8  # the protocol's modifier bit for Shift


class BrowserError(RuntimeError):
    """Chromium failed to start, answered a command with an error, or a wait timed out."""


def chromium_path() -> str | None:
    """The Chromium to run: HELIX_CHROMIUM, else one on PATH, else Debian's binary; None when there is none."""
    given = os.environ.get("HELIX_CHROMIUM")
    if given:
        return given if Path(given).is_file() else None
    if DEBIAN_BINARY.is_file():
        return str(DEBIAN_BINARY)
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """One Chromium process and its protocol pipe; `close()` (or the `with` block) ends it."""

    def __init__(self, pid: int, to_browser: int, from_browser: int, profile: str) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._out = to_browser
        self._in = from_browser
        self._profile = profile
        self._next_id = 0
        self._lock = threading.Lock()
        self._answered = threading.Condition()
        self._answers: dict[int, dict[str, Any]] = {}
        self._listeners: list[Callable[[dict[str, Any]], None]] = []
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="chromium-pipe", daemon=True)
        self._reader.start()

    @classmethod
    def start(cls, binary: str | None = None) -> Browser:
        path = binary or chromium_path()
        if path is None:
            raise BrowserError("no Chromium found: install Debian's chromium or set HELIX_CHROMIUM to a binary")
        profile = tempfile.mkdtemp(prefix="helix-chromium-")
        # Chromium reads fd 3 and writes fd 4. posix_spawn moves the pipe ends there in the child
        # (no preexec_fn, which is unsafe with threads); first above 10, so that neither move
        # overwrites the other's source. Python opens everything else close-on-exec.
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        high_r = fcntl.fcntl(to_child_r, fcntl.F_DUPFD_CLOEXEC, 10)
        high_w = fcntl.fcntl(from_child_w, fcntl.F_DUPFD_CLOEXEC, 10)
        quiet = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
        try:
            pid = os.posix_spawn(
                path,
                [path, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                os.environ,
                file_actions=[*quiet, (os.POSIX_SPAWN_DUP2, high_r, 3), (os.POSIX_SPAWN_DUP2, high_w, 4)],
            )
        finally:
            for fd in (to_child_r, from_child_w, high_r, high_w):
                os.close(fd)
        browser = cls(pid, to_child_w, from_child_r, profile)
        try:
            browser.send("Browser.getVersion", timeout=30)
        except BaseException:
            browser.close()
            raise
        return browser

    # --- the pipe ------------------------------------------------------------------------------

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._in, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for raw in messages:
                self._dispatch(json.loads(raw))
        with self._answered:
            self._closed = True
            self._answered.notify_all()

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "id" in message:
            with self._answered:
                self._answers[message["id"]] = message
                self._answered.notify_all()
            return
        for listener in list(self._listeners):
            listener(message)

    def listen(self, listener: Callable[[dict[str, Any]], None]) -> None:
        """Call `listener` (on the reader thread) with every event the browser sends."""
        self._listeners.append(listener)

    def send(
        self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None, timeout: float = 15
    ) -> dict[str, Any]:
        """One protocol command; its result, or BrowserError with the browser's error."""
        with self._lock:
            self._next_id += 1
            ident = self._next_id
            message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
            if session is not None:
                message["sessionId"] = session
            data = json.dumps(message).encode() + b"\0"
            while data:
                data = data[os.write(self._out, data) :]
        deadline = time.monotonic() + timeout
        with self._answered:
            while ident not in self._answers:
                left = deadline - time.monotonic()
                if self._closed:
                    raise BrowserError(f"Chromium closed its pipe before answering {method}")
                if left <= 0:
                    raise BrowserError(f"Chromium did not answer {method} within {timeout} s")
                self._answered.wait(left)
            answer = self._answers.pop(ident)
        if "error" in answer:
            raise BrowserError(f"{method}: {answer['error'].get('message')} ({answer['error']})")
        result: dict[str, Any] = answer.get("result", {})
        return result

    # --- pages ---------------------------------------------------------------------------------

    def new_page(self, width: int = 1100, height: int = 700) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session, target)
        for domain in ("Page", "Runtime", "Log"):
            page.send(f"{domain}.enable")
        page.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        return page

    def _reaped(self, timeout: float) -> bool:
        """Whether the browser process has exited (and was reaped) within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
            elif time.monotonic() > deadline:
                return False
            else:
                time.sleep(0.02)
        return True

    def close(self) -> None:
        if not self._reaped(0):
            with contextlib.suppress(BrowserError, OSError):
                self.send("Browser.close", timeout=5)
            if not self._reaped(10):
                os.kill(self.pid, signal.SIGKILL)
                self._reaped(10)
        for fd in (self._out, self._in):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class Page:
    """One tab: navigate, evaluate, wait, click, press keys, type, take screenshots."""

    def __init__(self, browser: Browser, session: str, target: str) -> None:
        self.browser = browser
        self.session = session
        self.target = target
        self.problems: list[str] = []  # console errors/warnings, exceptions, log entries (CSP violations)
        browser.listen(self._event)

    def _event(self, message: dict[str, Any]) -> None:
        if message.get("sessionId") != self.session:
            return
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text")
            self.problems.append(f"exception: {text}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.problems.append(f"console.{params['type']}: {args}")
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            if entry.get("level") in ("error", "warning"):
                self.problems.append(f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}")

    def send(self, method: str, params: dict[str, Any] | None = None, timeout: float = 15) -> dict[str, Any]:
        return self.browser.send(method, params, session=self.session, timeout=timeout)

    def goto(self, url: str, timeout: float = 15) -> None:
        """Navigate and wait until the document has loaded."""
        answer = self.send("Page.navigate", {"url": url}, timeout=timeout)
        if answer.get("errorText"):
            raise BrowserError(f"navigating to {url}: {answer['errorText']}")
        self.wait_for("document.readyState === 'complete'", timeout=timeout, what=f"{url} to load")

    def evaluate(self, expression: str, timeout: float = 15) -> Any:
        """The value of a JavaScript expression (promises awaited), as JSON brings it back."""
        answer = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True, "userGesture": True},
            timeout=timeout,
        )
        if "exceptionDetails" in answer:
            details = answer["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"evaluating {expression!r}: {text}")
        return answer.get("result", {}).get("value")

    def wait_for(self, condition: str, timeout: float = 10, what: str | None = None) -> None:
        """Poll a JavaScript expression until it is truthy, as JavaScript judges it (an element is)."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                last = self.evaluate(f"!!({condition})")
            except BrowserError as exc:  # e.g. the page is between documents
                last = exc
            if last is True:
                return
            if time.monotonic() > deadline:
                raise BrowserError(
                    f"timed out after {timeout} s waiting for {what or condition} (last value {last!r}); "
                    f"page problems: {self.problems}"
                )
            time.sleep(0.05)

    def wait_for_selector(self, selector: str, timeout: float = 10) -> None:
        """Wait until an element matching `selector` is in the document and shown."""
        self.wait_for(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
            "return !!e && e.getClientRects().length > 0; })()",
            timeout,
            what=f"selector {selector}",
        )

    def text(self, selector: str) -> str:
        value = self.evaluate(f"document.querySelector({json.dumps(selector)})?.textContent ?? null")
        if value is None:
            raise BrowserError(f"no element matches {selector}; page problems: {self.problems}")
        return str(value)

    def texts(self, selector: str) -> list[str]:
        found = self.evaluate(f"[...document.querySelectorAll({json.dumps(selector)})].map(e => e.textContent)")
        return [str(t) for t in found]

    def click(self, selector: str, *, shift: bool = False) -> None:
        """A real mouse click (pressed and released) at the middle of the element, scrolled into view."""
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null; "
            "e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect(); "
            "return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        if box is None:
            raise BrowserError(f"no element to click matches {selector}; page problems: {self.problems}")
        x, y = box
        modifiers = SHIFT if shift else 0
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            params: dict[str, Any] = {"type": kind, "x": x, "y": y, "modifiers": modifiers}
            if kind != "mouseMoved":
                params |= {"button": "left", "clickCount": 1}
            self.send("Input.dispatchMouseEvent", params)

    def press(self, key: str, *, shift: bool = False) -> None:
        """A key pressed and released in the focused element (ArrowLeft, Enter, Escape, ... or one character)."""
        code, vk = KEYS.get(key, (f"Key{key.upper()}" if len(key) == 1 else key, ord(key.upper()[0])))
        base: dict[str, Any] = {
            "key": key,
            "code": code,
            "windowsVirtualKeyCode": vk,
            "modifiers": SHIFT if shift else 0,
        }
        down = base | {"type": "keyDown"}
        text = "\r" if key == "Enter" else key if len(key) == 1 else None
        if text is not None:  # a key that types: Enter submits a form only with its text
            down |= {"text": text, "unmodifiedText": text}
        self.send("Input.dispatchKeyEvent", down)
        self.send("Input.dispatchKeyEvent", base | {"type": "keyUp"})

    def type(self, selector: str, text: str) -> None:
        """Focus a field, empty it and type `text` into it, as input events."""
        self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.focus(); e.select?.(); }})()"
        )
        self.send("Input.insertText", {"text": text})

    def url(self) -> str:
        return str(self.evaluate("location.href"))

    def screenshot(self, path: Path | str) -> bytes:
        """The viewport as PNG, written to `path`; its bytes."""
        data = base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"}, timeout=30)["data"])
        Path(path).write_bytes(data)
        return data

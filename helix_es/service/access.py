"""Around every request: its headers (no-store for /v1, the console's Content-Security-Policy), its
metrics, and one JSON access log line on stderr.

The line names the route template (`/v1/{namespace}/sessions/{session_id}/messages`), never the raw
path or query (a console link may carry a key), nor any header: method, route, status, ms, namespace.
Lines are buffered and written a batch at a time (`AccessLog.flush`, a few times a second and at
shutdown): a write and a flush per request cost a tenth of the server's time under load.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from typing import TextIO

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from helix_es.service.metrics import Metrics

CONSOLE_POLICY = "default-src 'self'"
_text = json.encoder.encode_basestring  # json.dumps(ensure_ascii=False)'s own string encoder


class AccessLog:
    """JSON lines kept until `flush` writes them to `stream` (stderr) in one write."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._lines: list[str] = []
        self._second = (0, "")  # a second since the epoch, and its ISO text (formatting it costs 8 us)

    def request(self, method: str, route: str, status: int, seconds: float, namespace: str | None) -> None:
        """One request's line: json.dumps of its fields, put together directly (it runs on every request)."""
        now = time.time()
        second = int(now)
        if second != self._second[0]:
            self._second = (second, datetime.fromtimestamp(second, UTC).isoformat())
        when = f"{self._second[1][:-6]}.{int((now - second) * 1000):03d}+00:00"  # isoformat(timespec="milliseconds")
        ns = "null" if namespace is None else _text(namespace)
        self._lines.append(
            f'{{"time": "{when}", "method": {_text(method)}, "route": {_text(route)}, "status": {status}, '
            f'"ms": {round(seconds * 1000, 2)!r}, "namespace": {ns}}}'
        )

    def flush(self) -> None:
        if not self._lines:
            return
        text, self._lines = "\n".join(self._lines) + "\n", []
        stream = self._stream or sys.stderr
        stream.write(text)
        stream.flush()


def _extra_headers(path: str) -> list[tuple[bytes, bytes]]:
    if path.startswith("/v1/"):
        return [(b"cache-control", b"no-store")]
    if path == "/ui" or path.startswith("/ui/"):
        return [(b"content-security-policy", CONSOLE_POLICY.encode())]
    return []


class Access:
    """ASGI middleware: headers, metrics and the access log of each HTTP request."""

    def __init__(self, app: ASGIApp, metrics: Metrics, log: AccessLog | None) -> None:
        self.app = app
        self.metrics = metrics
        self.log = log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # an exception before the response started: the server answers 500
        extra = _extra_headers(scope["path"])

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                have = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []), *(h for h in extra if h[0] not in have)]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self._record(scope, status, time.perf_counter() - started)

    def _record(self, scope: Scope, status: int, seconds: float) -> None:
        route = scope.get("route")
        template = getattr(route, "path", None) or "unmatched"
        method = scope["method"]
        self.metrics.observe(template, method, status, seconds)
        if self.log is not None:
            self.log.request(method, template, status, seconds, scope.get("path_params", {}).get("namespace"))

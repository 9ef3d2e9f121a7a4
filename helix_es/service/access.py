"""Around every request: its headers (no-store for /v1, the console's Content-Security-Policy), its
metrics, and one JSON access log line on stderr.

The line names the route template (`/v1/{namespace}/sessions/{session_id}/messages`), never the raw
path or query (a console link may carry a key), nor any header: method, route, status, ms, namespace.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from helix_es.service.metrics import Metrics

access_log = logging.getLogger("helix_es.service.access")

CONSOLE_POLICY = "default-src 'self'"


def json_lines_to_stderr() -> None:
    """The access log as bare JSON lines on stderr, whatever the root logger's format."""
    if not access_log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        access_log.addHandler(handler)
        access_log.propagate = False
        access_log.setLevel(logging.INFO)


def _extra_headers(path: str) -> list[tuple[bytes, bytes]]:
    if path.startswith("/v1/"):
        return [(b"cache-control", b"no-store")]
    if path == "/ui" or path.startswith("/ui/"):
        return [(b"content-security-policy", CONSOLE_POLICY.encode())]
    return []


class Access:
    """ASGI middleware: headers, metrics and the access log of each HTTP request."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

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
        line: dict[str, Any] = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "method": method,
            "route": template,
            "status": status,
            "ms": round(seconds * 1000, 2),
            "namespace": scope.get("path_params", {}).get("namespace"),
        }
        access_log.info(json.dumps(line, ensure_ascii=False))

"""The one HTTP call helix-es makes (OpenAI-compatible APIs), with the standard library only."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from helix_es.model.errors import HelixError

log = logging.getLogger(__name__)
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
NOT_JSON = "the answer is not JSON"  # how an HttpError's detail starts when the server answered, but not JSON


class HttpError(HelixError):
    """A model API did not answer (`status` None), or answered with an HTTP error status."""

    def __init__(self, url: str, detail: str, status: int | None = None) -> None:
        self.url, self.detail, self.status = url, detail, status
        super().__init__(f"POST {url} answered HTTP {status}: {detail}" if status else f"cannot reach {url}: {detail}")


def request_json(
    url: str,
    payload: Mapping[str, Any],
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    retries: int = 3,
    backoff: float = 0.5,
) -> Any:
    """POST JSON and decode the JSON answer, retrying rate limits, server errors and dropped connections."""
    body = json.dumps(payload).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json", **(headers or {})}, method="POST")
    for attempt in range(retries + 1):
        pause = backoff * 2**attempt
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                answer = response.read()
            break
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode(errors="replace").strip()
            if exc.code not in RETRY_STATUS or attempt == retries:
                raise HttpError(url, detail, exc.code) from None
            pause = max(pause, _retry_after(exc.headers))
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            if attempt == retries:
                raise HttpError(url, str(getattr(exc, "reason", exc))) from None
        log.warning("POST %s failed, retry %d in %.1fs", url, attempt + 1, pause)
        time.sleep(pause)
    try:
        return json.loads(answer)
    except ValueError as exc:
        raise HttpError(url, f"{NOT_JSON} ({exc})") from None


async def post_json(url: str, payload: Mapping[str, Any], **options: Any) -> Any:
    """`request_json` in a thread, so the event loop keeps going."""
    return await asyncio.to_thread(request_json, url, payload, **options)


OPENAI_BASE_URL = "https://api.openai.com/v1"


def openai_base_url(explicit: str | None) -> str:
    """Like the official SDK: an explicit base_url, else $OPENAI_BASE_URL, else OpenAI's own."""
    return (explicit or os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL).rstrip("/")


def bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def _retry_after(headers: Any) -> float:
    try:
        return min(float(headers.get("Retry-After", 0)), 30.0)
    except (TypeError, ValueError):
        return 0.0

"""The one HTTP call helix-es makes (OpenAI-compatible APIs), with the standard library only."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from helix_es.errors import HelixError


class HttpError(HelixError):
    """A model API did not answer, or answered with an error."""


async def post_json(
    url: str, payload: Mapping[str, Any], *, headers: Mapping[str, str] | None = None, timeout: float = 60.0
) -> Any:
    """POST JSON, return the decoded JSON answer; runs in a thread so the event loop keeps going."""
    return await asyncio.to_thread(_post, url, payload, dict(headers or {}), timeout)


def _post(url: str, payload: Mapping[str, Any], headers: dict[str, str], timeout: float) -> Any:
    body = json.dumps(payload).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json",
                                                                             **headers})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:500].decode(errors="replace")
        raise HttpError(f"{url} answered HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise HttpError(f"cannot reach {url}: {reason}") from None
    except ValueError as exc:
        raise HttpError(f"{url} did not answer JSON: {exc}") from None


def bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}

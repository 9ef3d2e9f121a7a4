"""Recall over the wire: a question's options from a query string, and hits as JSON.

`GET /v1/{namespace}/sessions/{session_id}/recall?q=...` (or the header form `/v1/{namespace}/recall`)
answers `{"namespace", "session_id", "hits": [...]}`; each hit is `{"message", "score", "session_id",
"position": {"topic", "partition", "offset"}, "occurred_at", "explain"?}`. `/search` keeps its old
shape (`{"messages": [...]}`) for old clients. The MCP tool `search_memory` answers the same hits.
Query: `q`, `limit`, `session` (repeated: only those sessions), `where[<key>]=<value>` (metadata
equality, one per key), `after` and `before` (ISO-8601 with an offset), `explain` (true|false),
`mode` (hybrid | vector | keyword | substring).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from helix_es.model.errors import InvalidInput
from helix_es.model.recall import SEARCH_MODES, RecallHit

WHERE = "where["  # OpenAPI's deepObject style: where[speaker]=Caroline


def when(text: str | None, name: str) -> datetime | None:
    """An ISO-8601 time with an offset, or `InvalidInput` naming `name`."""
    if text is None or text == "":
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise InvalidInput(
            name, f"must be an ISO-8601 time with an offset (2024-05-01T12:00:00+00:00), got {text!r}"
        ) from None
    if value.tzinfo is None:
        raise InvalidInput(name, f"must carry a timezone offset (add +00:00 or Z), got {text!r}")
    return value


def flag(text: str | None, name: str) -> bool:
    if text is None or text == "":
        return False
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise InvalidInput(name, f"must be true or false, got {text!r}")


def options(params: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Keyword arguments of `Memory.recall` (all but query and limit) from query-string pairs."""
    single = dict(params)
    sessions = [v for k, v in params if k == "session"]
    where = {k[len(WHERE) : -1]: v for k, v in params if k.startswith(WHERE) and k.endswith("]")}
    mode = single.get("mode") or None
    if mode is not None and mode not in SEARCH_MODES:
        raise InvalidInput("mode", f"must be one of {', '.join(SEARCH_MODES)}, got {mode!r}")
    return {
        "sessions": sessions or None,
        "where": where or None,
        "after": when(single.get("after"), "after"),
        "before": when(single.get("before"), "before"),
        "explain": flag(single.get("explain"), "explain"),
        "mode": mode,
    }


def hit_json(hit: RecallHit) -> dict[str, Any]:
    p = hit.position
    out: dict[str, Any] = {
        "message": json.loads(hit.message.to_json()),
        "score": hit.score,
        "session_id": hit.session_id,
        "position": {"topic": p.topic, "partition": p.partition, "offset": p.offset},
        "occurred_at": hit.occurred_at.isoformat(),
    }
    if hit.explain is not None:
        out["explain"] = dict(hit.explain)
    return out


def hits_json(namespace: str, session_id: str | None, hits: Sequence[RecallHit]) -> Mapping[str, Any]:
    return {"namespace": namespace, "session_id": session_id, "hits": [hit_json(h) for h in hits]}


async def recall(memory: Any, query: str, limit: int | None, filters: Mapping[str, Any]) -> list[RecallHit]:
    """`memory.recall`, or `InvalidInput` for a memory that has none (a custom middleware that hides it)."""
    method = getattr(memory, "recall", None)
    if not callable(method):
        raise InvalidInput("memory", f"{type(memory).__name__} cannot recall: configure a vector or long-term view")
    found: list[RecallHit] = await method(query, limit, **filters)
    return found

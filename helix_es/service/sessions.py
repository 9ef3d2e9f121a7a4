"""The namespaces on the log and a namespace's sessions, read from the log (never from a view):
what the web console lists.

Every session that has an event on the log, with its event count and the times of its first and
last events, ordered by last activity (newest first), a page at a time: `next` is the cursor of
the page after (`after=`), None on the last one. A session active since a page was read moves to
the front, so a walk in pages shows it again or not at all. Records the projector dead-letters are
left out, as in the audit. `SessionLists` keeps each namespace's listing with where its last read
ended in each partition, so a call reads only what the log got since the one before.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from helix_es.config import Config
from helix_es.history.log_records import LogTail
from helix_es.log.tolerant import AuditCodec
from helix_es.model.errors import InvalidInput
from helix_es.model.times import iso, utc
from helix_es.projection.factory import open_log

PAGE = 100  # sessions a page holds unless asked
MAX_PAGE = 1000


@dataclass
class _Session:
    events: int
    first: datetime
    last: datetime


@dataclass
class _Listing:
    sessions: dict[str, _Session] = field(default_factory=dict)
    tail: LogTail = field(default_factory=LogTail)


class SessionLists:
    """Each namespace's sessions, kept up to date from the log one call at a time."""

    def __init__(self) -> None:
        self._kept: dict[str, _Listing] = {}

    async def sessions(
        self, config: Config, namespace: str, *, limit: int = PAGE, after: str | None = None, query: str = ""
    ) -> dict[str, Any]:
        """A page: `sessions`, `total` (sessions matching `query`, a case-insensitive part of the
        id), `next` (the cursor after this page, or None)."""
        start = None if after is None else _key(after)
        listing = self._kept.get(namespace) or _Listing()
        async with listing.tail.lock:
            records, _skipped = await listing.tail.news(config.log, namespace, None)
            for record in records:
                event = record.event
                at = utc(event.timestamp)
                seen = listing.sessions.get(event.session_id)
                if seen is None:
                    listing.sessions[event.session_id] = _Session(1, at, at)
                else:
                    seen.events += 1
                    seen.first, seen.last = min(seen.first, at), max(seen.last, at)
            if listing.sessions:  # kept once it lists something: a name with no log costs nothing
                self._kept[namespace] = listing
            needle = query.casefold()
            matched = [((s.last, sid), s) for sid, s in listing.sessions.items() if needle in sid.casefold()]
        matched.sort(key=lambda t: t[0], reverse=True)
        rest = matched if start is None else [t for t in matched if t[0] < start]
        page = rest[:limit]
        return {
            "sessions": [
                {"session_id": sid, "events": s.events, "first_time": iso(s.first), "last_time": iso(s.last)}
                for (_, sid), s in page
            ],
            "total": len(matched),
            "next": _cursor(page[-1][0]) if len(rest) > limit else None,
        }


def _cursor(key: tuple[datetime, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps([key[0].isoformat(), key[1]]).encode()).decode().rstrip("=")


def _key(cursor: str) -> tuple[datetime, str]:
    try:
        last, sid = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if isinstance(last, str) and isinstance(sid, str):
            return utc(datetime.fromisoformat(last)), sid
    except (binascii.Error, ValueError, TypeError):
        pass
    raise InvalidInput("after", "is not a cursor this listing gave (pass the `next` of the page before)")


async def list_namespaces(config: Config) -> list[str]:
    """Every namespace with a log (a topic, or an embedded log file), sorted."""
    log = open_log(config.log, AuditCodec())
    try:
        return sorted(await log.namespaces())
    finally:
        await log.close()

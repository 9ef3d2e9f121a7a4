"""The namespaces on the log and a namespace's sessions, read from the log (never from a view):
what the web console lists.

Every session that has an event on the log, with its event count and the times of its first and
last events, ordered by last activity (newest first). Records the projector dead-letters are left
out, as in the audit. `SessionLists` keeps each namespace's listing with where its last read
ended in each partition, so a call reads only what the log got since the one before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from helix_es.client.log_records import LogTail
from helix_es.config import Config
from helix_es.log.tolerant import AuditCodec
from helix_es.model.times import iso, utc
from helix_es.projection.factory import open_log


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

    async def sessions(self, config: Config, namespace: str) -> list[dict[str, Any]]:
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
            ordered = sorted(listing.sessions.items(), key=lambda kv: (kv[1].last, kv[0]), reverse=True)
        return [
            {"session_id": sid, "events": s.events, "first_time": iso(s.first), "last_time": iso(s.last)}
            for sid, s in ordered
        ]


async def list_namespaces(config: Config) -> list[str]:
    """Every namespace with a log (a topic, or an embedded log file), sorted."""
    log = open_log(config.log, AuditCodec())
    try:
        return sorted(await log.namespaces())
    finally:
        await log.close()

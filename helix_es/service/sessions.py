"""A namespace's sessions, read from the log (never from a view): what the web console lists.

Every session that has an event on the log, with its event count and the times of its first and
last events, ordered by last activity (newest first). Records the projector dead-letters are left
out, as in the audit. The whole namespace is read each time: this serves people browsing, not agents.
"""

from __future__ import annotations

from typing import Any

from helix_es.client.audit import read_records
from helix_es.config import Config
from helix_es.model.times import iso, utc


async def list_sessions(config: Config, namespace: str) -> list[dict[str, Any]]:
    records, _skipped = await read_records(config.log, namespace, None)
    found: dict[str, dict[str, Any]] = {}
    for record in records:
        event = record.event
        at = utc(event.timestamp)
        entry = found.get(event.session_id)
        if entry is None:
            found[event.session_id] = {"session_id": event.session_id, "events": 1, "first_time": at, "last_time": at}
        else:
            entry["events"] += 1
            entry["first_time"] = min(entry["first_time"], at)
            entry["last_time"] = max(entry["last_time"], at)
    ordered = sorted(found.values(), key=lambda e: (e["last_time"], e["session_id"]), reverse=True)
    return [{**e, "first_time": iso(e["first_time"]), "last_time": iso(e["last_time"])} for e in ordered]

"""Recently audited sessions' records, kept with where each read of them ended.

The console asks a session's audit again at every cut it moves to, and an audit reads the
session's records from the log: on Kafka, every record of its partition. `SessionHistories` keeps
what it read of a session and reads only what the log got since. Namespace-wide reads (a
long-term view folded at a cut) are not kept. At most `max_records` records and `max_sessions`
sessions are kept in all; the sessions audited longest ago go first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from helix_es.config import LogConfig
from helix_es.history.log_records import LogTail, read_records
from helix_es.log.check import Skipped
from helix_es.model.events import Record


@dataclass
class _History:
    records: list[Record] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    tail: LogTail = field(default_factory=LogTail)


class SessionHistories:
    """A `helix_es.history.log_records.RecordReader` that keeps what it read, per session."""

    def __init__(self, max_records: int = 50_000, max_sessions: int = 1000) -> None:
        self.max_records = max_records
        self.max_sessions = max_sessions
        self._kept: dict[tuple[str, str], _History] = {}  # oldest use first

    async def read(
        self, config: LogConfig, namespace: str, session_id: str | None
    ) -> tuple[list[Record], list[Skipped]]:
        if session_id is None:
            return await read_records(config, namespace, None)
        key = (namespace, session_id)
        history = self._kept.get(key) or _History()
        async with history.tail.lock:
            records, skipped = await history.tail.news(config, namespace, session_id)
            history.records += records
            history.skipped += skipped
            answer = list(history.records), list(history.skipped)
        self._kept.pop(key, None)
        if len(history.records) <= self.max_records:
            self._kept[key] = history  # the newest use last
        total = sum(len(h.records) for h in self._kept.values())
        while total > self.max_records or len(self._kept) > self.max_sessions:
            oldest = next(iter(self._kept))
            total -= len(self._kept.pop(oldest).records)
        return answer

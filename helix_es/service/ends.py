"""Where each partition of the log ends, to check the consistency tokens reads carry.

A token names a write, so its offset is below the end of the partition its session's events go
to. A forged one (an offset past the end) would make every later read of the session wait for a
write that never comes, for every client, until the read timeout: it is refused (400) before the
session's memory hears of it. Ends seen are kept (this server's own writes move them too), so
only a token past every end known asks the log again.
"""

from __future__ import annotations

import asyncio

from helix_es.config import LogConfig
from helix_es.log.port import EventLog
from helix_es.model.events import Position
from helix_es.projection.factory import open_log
from helix_es.service.errors import ApiError
from helix_es.service.requests import AFTER

KEEP = 100_000  # partitions whose end is kept; past it the cache starts again


class LogEnds:
    def __init__(self, config: LogConfig) -> None:
        self.config = config
        self._log: EventLog | None = None
        self._lock = asyncio.Lock()
        self._partitions: dict[str, int] = {}  # topic -> its partitions, when asked
        self._ends: dict[tuple[str, int], int] = {}  # (topic, partition) -> an offset at or below its end

    def saw(self, position: Position) -> None:
        """A write landed at `position`: the partition's end is past it."""
        where = (position.topic, position.partition)
        if self._ends.get(where, 0) <= position.offset:
            if len(self._ends) >= KEEP:
                self._ends.clear()
            self._ends[where] = position.offset + 1

    async def check(self, namespace: str, session_id: str, position: Position) -> None:
        """`ApiError` 400 naming the header unless `position` (of the namespace's topic) can be a
        write of the session: in its partition, below that partition's end."""
        topic = position.topic
        if topic not in self._partitions or self._ends.get((topic, position.partition), 0) <= position.offset:
            await self._ask(namespace, topic)
        partitions = self._partitions.get(topic, 0)
        if not partitions:
            raise ApiError(400, "names a write, but this namespace has none on the log", AFTER)
        own = (await self._opened()).partition(session_id, partitions)
        if position.partition != own:
            raise ApiError(
                400,
                f"names partition {position.partition}, but this session's events are in partition {own}: "
                "send the X-Helix-After of this session's write",
                AFTER,
            )
        end = self._ends.get((topic, own), 0)
        if position.offset >= end:
            raise ApiError(
                400,
                f"names offset {position.offset}, past the log's end ({end}) in partition {own}: "
                "send the X-Helix-After of a write's answer",
                AFTER,
            )

    async def _ask(self, namespace: str, topic: str) -> None:
        ends = await (await self._opened()).ends(namespace)
        self._partitions[topic] = len(ends)
        for partition, end in ends.items():
            self.saw(Position(topic, partition, end - 1))

    async def _opened(self) -> EventLog:
        if self._log is not None:
            return self._log
        async with self._lock:
            if self._log is None:
                self._log = open_log(self.config)
            return self._log

    async def close(self) -> None:
        if self._log is not None:
            await self._log.close()
            self._log = None

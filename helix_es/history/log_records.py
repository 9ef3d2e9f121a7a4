"""Reading a namespace's or a session's records as audits do: events this version cannot interpret
are shown (`AuditCodec`), records the projector would dead-letter are passed over and reported.

`read_records` is a `RecordReader`; `helix_es.history.audit.audit` takes another (a server passes
one that keeps what it read, `helix_es.service.histories`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from helix_es.config import LogConfig
from helix_es.log.check import Skipped
from helix_es.log.kafka_errors import unavailable
from helix_es.log.port import OnEnd
from helix_es.log.tolerant import AuditCodec
from helix_es.model.events import Record
from helix_es.projection.factory import open_log

RecordReader = Callable[[LogConfig, str, str | None], Awaitable[tuple[list[Record], list[Skipped]]]]


async def read_records(
    config: LogConfig,
    namespace: str,
    session_id: str | None,
    *,
    start: Mapping[int, int] | None = None,
    on_end: OnEnd | None = None,
) -> tuple[list[Record], list[Skipped]]:
    """The records the projector folds, and those it dead-letters (`helix_es.log.check`), skipped;
    from `start`'s offsets, telling `on_end` where the read ended (`EventLog.read`)."""
    log = open_log(config, AuditCodec())  # shows unknown events instead of refusing them
    bad: list[Skipped] = []
    try:
        with unavailable(
            lambda exc: (
                f"could not read the log from Kafka at {config.bootstrap_servers}: {exc!r}; "
                "check the brokers (scripts/services status) or log.bootstrap_servers"
            )
        ):
            # Asked first so that auditing a namespace never creates its embedded log file (a read from
            # kept offsets has found it before).
            if not start and namespace not in await log.namespaces():
                return [], bad
            read = log.read(namespace, session_id=session_id, on_bad=bad.append, start=start, on_end=on_end)
            return [r async for r in read], bad
    finally:
        await log.close()


@dataclass
class LogTail:
    """Where the reads of one namespace (or session) ended: `news` reads only what came since."""

    start: dict[int, int] = field(default_factory=dict)  # per partition
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # two reads at once read the news once

    async def news(
        self, config: LogConfig, namespace: str, session_id: str | None
    ) -> tuple[list[Record], list[Skipped]]:
        """`read_records` from where the last read ended; hold `lock` around it and what it updates."""
        return await read_records(config, namespace, session_id, start=self.start, on_end=self.start.__setitem__)

"""A backend joins a log and a view store. Memories with the same log and store share one.

With the embedded log, the backend is also the projector: each append is folded into
every view attached to its namespace before `append` returns, and views are caught up
from the log (from their checkpoint on) when they are attached.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path

from helix_es.config import LogConfig, MemoryConfig
from helix_es.events import Event, Position, Record
from helix_es.log import EventLog
from helix_es.log.embedded import EmbeddedLog
from helix_es.log.kafka import KafkaLog
from helix_es.views import View
from projectors.fold import project
from projectors.stores import ViewStore

log = logging.getLogger(__name__)


def open_log(config: LogConfig) -> EventLog:
    if config.type == "kafka":
        return KafkaLog(
            config.bootstrap_servers,
            topic_prefix=config.topic_prefix,
            partitions=config.partitions,
            replication_factor=config.replication_factor,
        )
    return EmbeddedLog(config.path, fsync=config.fsync, topic_prefix=config.topic_prefix)


def open_store(config: MemoryConfig) -> ViewStore:
    if config.store == "redis":
        from projectors.stores.redis import RedisStore

        return RedisStore(config.redis_url)  # type: ignore[arg-type]
    if config.store == "postgres":
        from projectors.stores.postgres import PostgresStore

        return PostgresStore(config.postgres_dsn)  # type: ignore[arg-type]
    from projectors.stores.memory import MemoryStore

    return MemoryStore()


@dataclass
class Backend:
    log: EventLog
    store: ViewStore
    inline: bool  # fold on append (embedded log)
    refs: int = 0
    _views: dict[str, set[View]] = field(default_factory=dict)  # namespace -> attached views
    _behind: set[tuple[View, str]] = field(default_factory=set)  # inline folds that failed after append
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def attach(self, view: View, namespace: str) -> None:
        """Start serving `view` for `namespace`; inline backends catch it up from the log first."""
        views = self._views.setdefault(namespace, set())
        if view in views:
            return
        async with self._lock:
            if self.inline and view not in views:
                await self._catch_up(view, namespace)
            views.add(view)

    async def current(self, view: View, namespace: str) -> None:
        """Before an inline read: fold what a failed inline projection left behind."""
        if (view, namespace) in self._behind:
            async with self._lock:
                if (view, namespace) in self._behind:
                    await self._catch_up(view, namespace)
                    self._behind.discard((view, namespace))

    async def _catch_up(self, view: View, namespace: str) -> None:
        batch: list[Record] = []
        checkpoint: int | None = None
        async for record in self.log.read(namespace):
            if checkpoint is None:
                checkpoint = await self.store.checkpoint(view, record.position.topic, 0)
                checkpoint = -1 if checkpoint is None else checkpoint
            if record.position.offset > checkpoint:
                batch.append(record)
            if len(batch) >= 500:
                await project(view, self.store, batch)
                batch = []
        await project(view, self.store, batch)

    async def append(self, event: Event) -> Position:
        if not self.inline:
            return await self.log.append(event)
        async with self._lock:  # log order and fold order must agree
            position = await self.log.append(event)
            record = Record(event, position)
            for view in self._views.get(event.namespace, ()):
                if (view, event.namespace) in self._behind:
                    continue  # folded in order by the next catch-up
                try:
                    await project(view, self.store, [record])
                except Exception as exc:
                    # The event is on the log, so the write succeeded; the view catches up on the next read.
                    log.warning("view %s of %s is behind the log: %s", view.name, event.namespace, exc)
                    self._behind.add((view, event.namespace))
            return position

    async def close(self) -> None:
        await self.log.close()
        await self.store.close()


_shared: dict[tuple[object, ...], Backend] = {}


def _key(log: LogConfig, memory: MemoryConfig) -> tuple[object, ...]:
    loop = id(asyncio.get_running_loop())
    if log.type == "kafka":
        where: tuple[object, ...] = (log.bootstrap_servers, log.topic_prefix)
    else:
        where = (str(Path(log.path).resolve()), log.topic_prefix, log.fsync)
    return (loop, log.type, *where, memory.store, memory.redis_url, memory.postgres_dsn)


async def acquire(log: LogConfig, memory: MemoryConfig) -> Backend:
    key = _key(log, memory)
    backend = _shared.get(key)
    if backend is None:
        backend = _shared[key] = Backend(open_log(log), open_store(memory), inline=log.type == "embedded")
    backend.refs += 1
    return backend


async def release(log: LogConfig, memory: MemoryConfig, backend: Backend) -> None:
    backend.refs -= 1
    if backend.refs <= 0:
        _shared.pop(_key(log, memory), None)
        await backend.close()

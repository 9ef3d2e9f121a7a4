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
from projectors.projection import Projection, SessionProjection
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


def open_projection(memory: MemoryConfig, store: ViewStore) -> Projection:
    """The projection a memory config describes; session views share the backend's store."""
    if isinstance(memory.view, View):
        return SessionProjection(memory.view, store)
    return memory.view.projection(memory)


@dataclass
class Backend:
    log: EventLog
    store: ViewStore
    inline: bool  # fold on append (embedded log)
    refs: int = 0
    _projections: dict[tuple[str, str], Projection] = field(default_factory=dict)  # (name, kind) -> projection
    _attached: dict[str, dict[tuple[str, str], Projection]] = field(default_factory=dict)  # namespace -> ...
    _behind: set[tuple[str, str, str]] = field(default_factory=set)  # (name, kind, ns): inline fold failed
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def attach(self, memory: MemoryConfig, namespace: str) -> Projection:
        """Serve `memory`'s view for `namespace`; inline backends catch it up from the log first."""
        projection = open_projection(memory, self.store)
        ident = (projection.name, projection.kind)
        projection = self._projections.setdefault(ident, projection)
        attached = self._attached.setdefault(namespace, {})
        if ident not in attached:
            async with self._lock:
                if self.inline and ident not in attached:
                    await self._catch_up(projection, namespace)
                attached[ident] = projection
        return projection

    async def current(self, projection: Projection, namespace: str) -> None:
        """Before an inline read: fold what a failed inline projection left behind."""
        behind = (projection.name, projection.kind, namespace)
        if behind in self._behind:
            async with self._lock:
                if behind in self._behind:
                    await self._catch_up(projection, namespace)
                    self._behind.discard(behind)

    async def _catch_up(self, projection: Projection, namespace: str) -> None:
        batch: list[Record] = []
        checkpoint: int | None = None
        async for record in self.log.read(namespace):
            if checkpoint is None:
                checkpoint = await projection.checkpoint(record.position.topic, 0)
                checkpoint = -1 if checkpoint is None else checkpoint
            if record.position.offset > checkpoint:
                batch.append(record)
            if len(batch) >= 500:
                await projection.apply(batch, live=False)  # history: its derived events are in it already
                batch = []
        if batch:
            applied = await projection.apply(batch, live=True)
            for event in applied.derived:
                await self._append_locked(event)

    async def append(self, event: Event) -> Position:
        if not self.inline:
            return await self.log.append(event)
        async with self._lock:  # log order and fold order must agree
            return await self._append_locked(event)

    async def _append_locked(self, event: Event) -> Position:
        position = await self.log.append(event)
        record = Record(event, position)
        derived: list[Event] = []
        for ident, projection in self._attached.get(event.namespace, {}).items():
            if (*ident, event.namespace) in self._behind:
                continue  # folded in order by the next catch-up
            try:
                derived += (await projection.apply([record])).derived
            except Exception as exc:
                # The event is on the log, so the write succeeded; the view catches up on the next read.
                log.warning("view %s of %s is behind the log: %s", projection.name, event.namespace, exc)
                self._behind.add((*ident, event.namespace))
        for extra in derived:
            await self._append_locked(extra)
        return position

    async def close(self) -> None:
        for projection in self._projections.values():
            await projection.close()
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

"""The memories a server reaches, shared by the REST service and the MCP server.

One `SessionMemoryManager` per namespace, opened on first use; each (namespace, session) is one
memory kept while the server runs (or until it has been idle `session_idle` seconds), so a read
waits for the server's own earlier writes (read-your-writes, the client's own; the manager hands a
closed memory's unshown write to the next). `check_namespace`
and `check_session` are the checks both servers make before anything is read or written.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

from helix_es.client.protocol import Memory
from helix_es.client.runtime import Runtime
from helix_es.client.sessions import SessionMemoryManager
from helix_es.config import Composite, Config, MemoryConfig
from helix_es.model import names

log = logging.getLogger(__name__)

__all__ = ["Memories", "check_namespace", "check_session", "with_namespace"]


def with_namespace(memory: MemoryConfig, namespace: str) -> MemoryConfig:
    """`memory` for another namespace, a composite's parts too."""
    view = memory.view
    if isinstance(view, Composite):
        view = Composite(tuple(with_namespace(p, namespace) for p in view.parts))
    return replace(memory, namespace=namespace, view=view)


@functools.lru_cache(maxsize=4096)  # every request checks its namespace; only names that pass are kept
def check_namespace(namespace: str, topic_prefix: str, field: str = "namespace") -> str:
    """One concrete namespace whose topic name fits Kafka's limit; `InvalidInput` naming `field` if not."""
    names.concrete_namespace(namespace, field)
    names.topic(namespace, topic_prefix)
    return namespace


def check_session(session_id: str, field: str = "session_id") -> str:
    return names.check_session_id(session_id, field)


class Memories:
    """A `SessionMemoryManager` per namespace over one config, its memories on `runtime` (the server's);
    `close()` closes every memory."""

    def __init__(self, config: Config, *, session_idle: float | None = None, runtime: Runtime | None = None) -> None:
        self.config = config
        self.session_idle = session_idle
        self.runtime = runtime
        self._managers: dict[str, SessionMemoryManager] = {}
        self._used: dict[tuple[str, str], float] = {}  # (namespace, session) -> last use (monotonic)
        self._busy: dict[tuple[str, str], int] = {}  # requests using the memory now: never closed under them

    def config_for(self, namespace: str) -> Config:
        if namespace == self.config.memory.namespace:
            return self.config
        return replace(self.config, memory=with_namespace(self.config.memory, namespace))

    async def memory(self, namespace: str, session_id: str) -> Memory:
        """The session's memory (`namespace` already checked), opened on first use."""
        check_session(session_id)
        manager = self._managers.get(namespace)
        if manager is None:
            manager = self._managers[namespace] = SessionMemoryManager.from_config(
                self.config_for(namespace), runtime=self.runtime
            )
        self._used[(namespace, session_id)] = time.monotonic()
        return await manager.get(session_id)

    @asynccontextmanager
    async def using(self, namespace: str, session_id: str) -> AsyncIterator[Memory]:
        """The session's memory for one request: the idle sweep leaves it open meanwhile."""
        where = (namespace, session_id)
        self._busy[where] = self._busy.get(where, 0) + 1
        try:
            yield await self.memory(namespace, session_id)
        finally:
            self._busy[where] -= 1
            if not self._busy[where]:
                del self._busy[where]
            self._used[where] = time.monotonic()

    def open_sessions(self) -> int:
        return sum(len(m) for m in self._managers.values())

    async def sweep(self) -> int:
        """Close the memories idle for `session_idle` seconds (a later request opens them again)."""
        if self.session_idle is None:
            return 0
        oldest = time.monotonic() - self.session_idle
        idle = [w for w, at in self._used.items() if at < oldest and w not in self._busy]
        for namespace, session_id in idle:
            del self._used[(namespace, session_id)]
            manager = self._managers.get(namespace)
            if manager is not None:
                try:
                    await manager.close_session(session_id)
                except Exception:
                    log.exception("closing the idle memory of %s/%s failed", namespace, session_id)
        return len(idle)

    async def close(self) -> None:
        managers, self._managers = list(self._managers.values()), {}
        self._used.clear()
        for manager in managers:
            try:
                await manager.close()
            except Exception:
                log.exception("closing a namespace's memories failed")

"""The projector service follows a view's alias: it projects the target readers use."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from helix_es.config import MemoryConfig
from helix_es.model import names
from helix_es.model.names import alias_id
from helix_es.projection.aliases import REFRESH_SECONDS, resolve_alias, target_projection
from helix_es.projection.factory import open_aliases
from helix_es.projection.protocol import Projection
from helix_es.stores.ports import ViewStore
from projectors.runner import Progress, Projector

log = logging.getLogger(__name__)


class TargetFollower:
    """Runs the Kafka projector of the target readers use, and moves with the alias.

    For the projector service (`helix-es project`): one per view, in place of a `Projector`. It
    projects the target the alias names and announces so (`AliasStore.announce`, renewed every
    `interval`); when a rebuild switches the alias it stops that projector (leaving its consumer
    group cleanly) and starts one on the new target, which seeks to the checkpoints the rebuild
    wrote, within about `interval` seconds. The rebuild keeps folding the new target until a
    service announces it, so readers never wait on a target nobody writes. `projection` and
    `progress` are those of the projector running now (progress adds up across targets).
    """

    def __init__(
        self,
        memory: MemoryConfig,
        store: ViewStore | None,
        *,
        bootstrap_servers: str,
        topic_prefix: str = names.DEFAULT_TOPIC_PREFIX,
        interval: float = REFRESH_SECONDS,
        **projector_options: Any,
    ) -> None:
        self.memory = memory
        self.store = store
        self.bootstrap_servers = bootstrap_servers
        self.topic_prefix = topic_prefix
        self.interval = interval
        self.options = projector_options
        self.aliases = open_aliases(memory)
        self.alias = alias_id(memory.view.name, topic_prefix)
        self.target = memory.view.name
        self.projection: Projection = target_projection(memory, self.target, store)  # until run() resolves
        self.progress: Progress = Progress()
        self.projector: Projector | None = None

    async def _announce(self, target: str, ttl: float) -> None:
        try:
            await self.aliases.announce(self.alias, target, ttl)
        except Exception as exc:  # a store hiccup must not stop the projector
            log.warning("%s: could not announce target %s (%s)", self.alias, target, exc)

    async def run(self, stop: asyncio.Event) -> Progress:
        try:
            self.target = await resolve_alias(self.aliases, self.alias, self.memory.view.name)
            while not stop.is_set():
                if self.projection.name != self.target:
                    retired, self.projection = self.projection, target_projection(self.memory, self.target, self.store)
                    await retired.close()
                projector = Projector(
                    self.projection,
                    bootstrap_servers=self.bootstrap_servers,
                    topic_prefix=self.topic_prefix,
                    namespaces=self.memory.served,
                    **self.options,
                )
                projector.progress = self.progress  # one running total across targets
                self.projector = projector
                moved = asyncio.Event()
                task = asyncio.create_task(projector.run(moved))
                serving = self.target
                try:
                    await self._watch(task, stop, moved)
                    moved.set()  # stopped or moved: the projector leaves its group cleanly
                    await task  # raises what the projector raised
                finally:
                    moved.set()
                    await asyncio.gather(task, return_exceptions=True)
                    await self._announce(serving, 0)  # withdrawn: this process projects it no more
        finally:
            await self.aliases.close()
        return self.progress

    async def _watch(self, task: asyncio.Task[Progress], stop: asyncio.Event, moved: asyncio.Event) -> None:
        """Announce the target while `task` projects it; return when stopped, failed, or the alias moved."""
        while not task.done():
            await self._announce(self.target, 3 * self.interval)
            waiter = asyncio.create_task(stop.wait())
            await asyncio.wait({task, waiter}, timeout=self.interval, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if stop.is_set() or task.done():
                return
            try:
                target = await resolve_alias(self.aliases, self.alias, self.memory.view.name)
            except Exception as exc:
                log.warning("%s: could not read its alias (%s); projecting %s", self.alias, exc, self.target)
                continue
            if target != self.target:
                log.info(
                    "%s: the alias moved from %s to %s; projecting %s from now on",
                    self.memory.view.name,
                    self.target,
                    target,
                    target,
                )
                self.target = target
                moved.set()
                return

"""The log side of a LangGraph checkpointer, framework-free: append its events, read its view with read-your-writes.

With the embedded log this process is the projector: each append is folded into the view before
it returns, and the view is caught up from the log (from its checkpoint on) when it opens. With
Kafka a projector service folds the topic (`helix-es project`); a read waits until the view has
applied this saver's last write to the thread (or, for reads across threads, every write).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from helix_es.client.checkpoint_seal import OpenedReads, Sealer, seal_payload
from helix_es.client.keys import provider_from_env
from helix_es.config import LogConfig
from helix_es.log.check import Skipped
from helix_es.log.port import EventLog
from helix_es.model.errors import ConsistencyTimeout
from helix_es.model.events import CheckpointSaved, Event, Payload, Position, Record, WritesSaved
from helix_es.projection.checkpoint_config import CheckpointsConfig
from helix_es.projection.checkpoints import CheckpointProjection, open_checkpoints
from helix_es.projection.driver import Driver
from helix_es.projection.factory import open_log
from helix_es.stores.ports import CheckpointStore

log = logging.getLogger(__name__)

FIRST_POLL = 0.002  # seconds between checks of the view's checkpoint, doubling up to POLL_CAP
POLL_CAP = 0.05


class CheckpointLog:
    """One checkpoint namespace on one log, and the view it is read from. `open` first, `close` last."""

    def __init__(self, log_config: LogConfig, config: CheckpointsConfig, sealer: Sealer | None = None) -> None:
        self.log_config = log_config
        self.config = config
        self.sealer = sealer  # seals every value before it is written, opens it on read
        self.namespace = config.namespace
        self.inline = log_config.type == "embedded"
        self._log: EventLog | None = None
        self._store: CheckpointStore | None = None
        self._lock = asyncio.Lock()  # inline: log order and fold order must agree
        self._behind = False  # an inline fold failed: the next read catches up from the log
        self._threads: dict[str, Position] = {}  # each thread's last write by this saver
        self._partitions: dict[tuple[str, int], int] = {}  # the last offset written to each partition
        # The offset each partition's view was last seen to have applied: views only move forward, so a
        # read whose writes it covers asks the store nothing more (one round trip per get_tuple, not two).
        self._applied: dict[tuple[str, int], int] = {}

    @property
    def store(self) -> CheckpointStore:
        assert self._store is not None, "open() first"
        return self._store

    @property
    def reads(self) -> CheckpointStore | OpenedReads:
        """The view's reads, values opened where they are sealed."""
        return self.store if self.sealer is None else OpenedReads(self.store, self.sealer)

    async def open(self) -> None:
        self._log = open_log(self.log_config)
        self._store = open_checkpoints(self.config)
        if self.config.encryption and self.sealer is None:
            self.sealer = Sealer(provider_from_env())  # its key store's pool lives on this loop
        if self.inline:
            await self._catch_up()

    async def _catch_up(self) -> None:
        assert self._log is not None
        driver = Driver(CheckpointProjection(self.store))
        await driver.replay(self._log.read(self.namespace, on_bad=_passed_over), from_checkpoint=True)

    async def append(self, thread_id: str, payloads: Sequence[Payload]) -> None:
        """Append one event per payload to the thread, in order."""
        assert self._log is not None, "open() first"
        if self.sealer is not None:
            await self.sealer.prepare(self.namespace, thread_id, write=True)
            sealer = self.sealer
            payloads = [
                seal_payload(sealer, self.namespace, thread_id, p)
                if isinstance(p, (CheckpointSaved, WritesSaved))
                else p
                for p in payloads
            ]
        for payload in payloads:
            event = Event(self.namespace, thread_id, payload)
            if not self.inline:
                self._wrote(thread_id, await self._log.append(event))
                continue
            async with self._lock:
                position = await self._log.append(event)
                if self._behind:
                    continue
                try:
                    await self.store.apply([Record(event, position)])
                except Exception as exc:  # the event is on the log: the write succeeded
                    log.warning("checkpoint view of %s is behind the log: %s", self.namespace, exc)
                    self._behind = True

    def _wrote(self, thread_id: str, position: Position) -> None:
        self._threads[thread_id] = position
        key = (position.topic, position.partition)
        self._partitions[key] = max(position.offset, self._partitions.get(key, -1))

    async def caught_up(self, thread_id: str | None) -> None:
        """Wait until the view has applied this saver's writes to `thread_id` (None: to every thread)."""
        if self.inline:
            if self._behind:
                async with self._lock:
                    if self._behind:
                        await self._catch_up()
                        self._behind = False
            return
        if thread_id is not None:
            want = self._threads.get(thread_id)
            wanted = [] if want is None else [((want.topic, want.partition), want.offset)]
        else:
            wanted = list(self._partitions.items())
        for (topic, partition), offset in wanted:
            await self._wait(topic, partition, offset)

    async def _wait(self, topic: str, partition: int, offset: int) -> None:
        if self._applied.get((topic, partition), -1) >= offset:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.read_timeout
        pause = FIRST_POLL
        while True:
            applied = await self.store.checkpoint(topic, partition)
            if applied is not None and applied >= offset:
                self._applied[(topic, partition)] = applied
                return
            if loop.time() >= deadline:
                raise ConsistencyTimeout(
                    f"checkpoint view of {self.namespace} has applied offset {applied} but this saver wrote "
                    f"offset {offset} to {topic}[{partition}]; waited {self.config.read_timeout}s. Is a "
                    "projector running for it (helix-es project --config FILE)?"
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, POLL_CAP)

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()
        if self._log is not None:
            await self._log.close()


def _passed_over(bad: Skipped) -> None:
    p = bad.position
    log.warning("%s[%d]@%d cannot be used (%s); passed over", p.topic, p.partition, p.offset, bad.error)

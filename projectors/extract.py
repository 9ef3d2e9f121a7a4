"""The extraction worker on Kafka: `helix-es project` runs it beside each facts view's projector.

It extracts the pending turns of the partitions this process's projector holds in the view's
consumer group, so the work spreads over processes the way the view does and no two processes ask
about one turn. What it finds it appends to the namespace's topic (the projector folds it); what
still fails after the retries it parks on `helix.dlq.<namespace>` as a JSON note with the reason.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Collection, Sequence

from helix_es.config import LogConfig, MemoryConfig
from helix_es.log.dead_letters import DeadLetters
from helix_es.log.kafka import KafkaLog
from helix_es.model import names
from helix_es.model.events import Event, Position
from helix_es.projection.extraction import ExtractionWorker, Stats
from helix_es.projection.facts import facts_rows_of
from helix_es.views.facts import Facts
from projectors.follow import TargetFollower

log = logging.getLogger("helix_es.project")


class Extraction:
    """The worker of one facts view, following its projector's partitions and target."""

    def __init__(self, part: MemoryConfig, follower: TargetFollower, log_config: LogConfig) -> None:
        assert isinstance(part.view, Facts) and part.view.extract is not None
        self.view: Facts = part.view
        self.follower = follower
        self.prefix = log_config.topic_prefix
        self.log = KafkaLog(log_config.bootstrap_servers, topic_prefix=self.prefix)
        self.dead = DeadLetters(log_config.bootstrap_servers, self.prefix)
        self.stats = Stats()
        self._workers: dict[int, ExtractionWorker] = {}  # by id of the projection they read

    def _assigned(self) -> dict[str, set[int]]:
        projector = self.follower.projector
        held: dict[str, set[int]] = {}
        for tp in projector.progress.assigned if projector is not None else ():
            held.setdefault(names.namespace_of(tp.topic, self.prefix), set()).add(tp.partition)
        return held

    def _worker(self) -> ExtractionWorker | None:
        projection = facts_rows_of(self.follower.projection)
        if projection is None:
            return None
        worker = self._workers.get(id(projection))
        if worker is None:
            assert self.view.extract is not None
            worker = ExtractionWorker(
                self.view.name,
                projection,
                self.view.extract,
                self._append,
                self.view.batching,
                dead_letter=self._park,
                stats=self.stats,
            )
            self._workers = {id(projection): worker}
        return worker

    async def _append(self, events: Sequence[Event]) -> Sequence[Position]:
        return await self.log.append_many(events)

    async def _park(self, note: dict[str, object]) -> None:
        topic = names.topic(str(note["namespace"]), self.prefix)
        source = f"{topic}:extraction of {len(note['turns'])} turns"  # type: ignore[arg-type]
        key = str(note["session_id"]).encode()
        await self.dead.park_note(topic, key, json.dumps(note).encode(), source, self.view.name, str(note["reason"]))

    async def run(self, stop: asyncio.Event) -> None:
        pause = max(min(self.view.batching.idle, 1.0), 0.1)
        try:
            while not stop.is_set():
                worker = self._worker()
                if worker is not None:
                    for namespace, partitions in self._assigned().items():
                        await self._round(worker, namespace, partitions)
                waiter = asyncio.ensure_future(stop.wait())
                try:
                    await asyncio.wait({waiter}, timeout=pause)
                finally:
                    waiter.cancel()
        finally:
            await self.log.close()
            await self.dead.close()

    async def _round(self, worker: ExtractionWorker, namespace: str, partitions: Collection[int]) -> None:
        worker.partitions = lambda: partitions
        try:
            await worker.step(namespace)
        except Exception as exc:  # a store or broker hiccup: the turns stay pending, the next round asks again
            log.warning("facts view %s of %s: extraction round failed: %s", self.view.name, namespace, exc)


def extractions(parts: Collection[tuple[MemoryConfig, TargetFollower]], log_config: LogConfig) -> list[Extraction]:
    """An `Extraction` for every facts view with an extractor among the served parts."""
    return [
        Extraction(part, follower, log_config)
        for part, follower in parts
        if isinstance(part.view, Facts) and part.view.extract is not None
    ]

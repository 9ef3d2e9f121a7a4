"""The consume-fold-checkpoint loop: one Kafka consumer group per view, every namespace topic.

On assignment a partition is sought to the view's stored checkpoint + 1 (Kafka's committed
offsets are only advisory), each batch is folded per session and written with its
checkpoint in one atomic step, and session guards make a re-delivered event a no-op.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, ConsumerRecord, TopicPartition

from helix_es import names
from helix_es.codec import Codec
from helix_es.events import Position, Record
from helix_es.log.kafka import KafkaLog
from projectors.deadletter import DeadLetters, check
from projectors.projection import Projection

log = logging.getLogger(__name__)


@dataclass
class Progress:
    """What a projector has done since it started."""

    events: int = 0  # folded into the view
    skipped: int = 0  # re-delivered at or below a session guard
    dead_letters: int = 0  # records it could not use, parked on helix.dlq.<namespace>
    batches: int = 0
    assigned: set[TopicPartition] = field(default_factory=set)


class _SeekToCheckpoint(ConsumerRebalanceListener):
    def __init__(self, projector: Projector) -> None:
        self.p = projector

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        self.p.progress.assigned.difference_update(revoked)

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        consumer = self.p.consumer
        assert consumer is not None
        for tp in assigned:
            checkpoint = await self.p.projection.checkpoint(tp.topic, tp.partition)
            if checkpoint is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, checkpoint + 1)
            log.info("%s: %s[%d] from offset %s", self.p.projection.name, tp.topic, tp.partition,
                     0 if checkpoint is None else checkpoint + 1)
            self.p.progress.assigned.add(tp)


class Projector:
    """Projects every `<topic_prefix>.<namespace>` topic into one view."""

    def __init__(
        self,
        projection: Projection,
        *,
        bootstrap_servers: str,
        topic_prefix: str = names.DEFAULT_TOPIC_PREFIX,
        batch_size: int = 500,
        codec: Codec | None = None,
        metadata_max_age_ms: int = 1000,
    ) -> None:
        self.projection = projection
        self.bootstrap_servers = bootstrap_servers
        self.topic_prefix = topic_prefix
        self.batch_size = batch_size
        self.codec = codec or Codec()
        self.metadata_max_age_ms = metadata_max_age_ms
        self.consumer: AIOKafkaConsumer | None = None
        self._log: KafkaLog | None = None  # appends derived events
        self.dead_letters = DeadLetters(bootstrap_servers, topic_prefix)
        self.progress = Progress()

    async def run(self, stop: asyncio.Event) -> Progress:
        """Consume until `stop` is set; then leave the group cleanly."""
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers,
            group_id=names.consumer_group(self.projection.name, self.projection.kind, self.topic_prefix),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            metadata_max_age_ms=self.metadata_max_age_ms,
            max_partition_fetch_bytes=4 * 1024 * 1024,
        )
        self.consumer.subscribe(pattern=names.topic_pattern(self.topic_prefix), listener=_SeekToCheckpoint(self))
        await self.consumer.start()
        try:
            while not stop.is_set():
                batches = await self.consumer.getmany(timeout_ms=200, max_records=self.batch_size)
                for tp, messages in batches.items():
                    await self._fold(tp, messages)
        finally:
            await self.consumer.stop()
            await self.dead_letters.close()
            if self._log is not None:
                await self._log.close()
        return self.progress

    async def _fold(self, tp: TopicPartition, messages: list[ConsumerRecord[bytes, bytes]]) -> None:
        records = []
        for m in messages:
            try:
                event = self.codec.decode(m.value)
                check(event, tp.topic, m.key, self.topic_prefix)
            except Exception as exc:  # a record we cannot use must not stop every view behind it
                await self.dead_letters.park(m, exc, self.projection.name)
                self.progress.dead_letters += 1
                continue
            records.append(Record(event, Position(tp.topic, tp.partition, m.offset)))
        assert self.consumer is not None
        highwater = self.consumer.highwater(tp)
        live = highwater is None or messages[-1].offset + 1 >= highwater
        applied = await self.projection.apply(records, live=live) if records else None
        if not records or records[-1].position.offset < messages[-1].offset:
            # The batch ended in dead letters: move past them, so a restart does not park them again.
            await self.projection.advance(tp.topic, tp.partition, messages[-1].offset)
        if applied is not None:
            for event in applied.derived:
                if self._log is None:
                    self._log = KafkaLog(self.bootstrap_servers, topic_prefix=self.topic_prefix)
                await self._log.append(event)
            self.progress.events += applied.events
            self.progress.skipped += len(records) - applied.events
        self.progress.batches += 1
        # Advisory only: on restart we seek to the view's own checkpoint.
        await self.consumer.commit({tp: messages[-1].offset + 1})


async def run_projectors(projectors: list[Projector], stop: asyncio.Event) -> list[Progress]:
    """Run several views side by side until `stop`; one failing stops the others."""
    tasks = [asyncio.create_task(p.run(stop)) for p in projectors]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise

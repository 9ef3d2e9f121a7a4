"""`KafkaLive`: the live source (`helix_es.log.port.LiveSource`) on Kafka.

Which partitions a process folds is the view's consumer group's to say (`shards`: it deals
shards, so a new namespace's topic joins without a rebalance); their records come from two
consumers, the busy partitions' and the idle ones' watcher in a child process (`tiers`, `cold`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet

from helix_es.log.live.shards import Shards
from helix_es.log.live.tiers import Tiers
from helix_es.log.port import Batches, Partition


class KafkaLive:
    """The partitions of the shards this process owns in `group_id`, of the topics `pattern` matches."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        group_id: str,
        topic_prefix: str,
        pattern: str | None = None,
        replication_factor: int = 1,
        session_timeout: float = 10.0,
        group_instance_id: str | None = None,
        metadata_interval: float = 1.0,
    ) -> None:
        self.tiers = Tiers(bootstrap_servers, pattern, metadata_interval)
        self.shards = Shards(
            bootstrap_servers=bootstrap_servers,
            group_id=group_id,
            topic_prefix=topic_prefix,
            watch=self.tiers.cold,  # the idle partitions' watcher names the topics too
            replication_factor=replication_factor,
            session_timeout=session_timeout,
            group_instance_id=group_instance_id,
        )
        self.changed = self.shards.changed

    @property
    def assigned(self) -> AbstractSet[Partition]:
        return self.tiers.assigned

    async def start(self) -> None:
        await self.tiers.start()
        await self.shards.start()

    async def stop(self, *, leave: bool) -> None:
        try:
            await self.shards.stop(leave=leave)
        finally:
            await self.tiers.stop()

    def wanted(self) -> set[Partition]:
        return self.shards.wanted()

    async def assign(
        self, partitions: Iterable[Partition], positions: Mapping[Partition, int], fresh: AbstractSet[Partition]
    ) -> None:
        await self.tiers.assign(partitions, positions, fresh)

    async def poll(self, max_records: int) -> Batches:
        return await self.tiers.poll(max_records)

    async def seek(self, partition: Partition, offset: int) -> None:
        await self.tiers.seek(partition, offset)

    async def settle(self, positions: Mapping[Partition, int]) -> None:
        await self.tiers.settle(positions)

    def highwater(self, partition: Partition) -> int | None:
        return self.tiers.highwater(partition)

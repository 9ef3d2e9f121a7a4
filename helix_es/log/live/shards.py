"""Which partitions of a view this process folds: shards owned in the view's consumer group.

A Kafka group subscribed to the namespace topics themselves would rebalance the whole group,
every partition of every namespace revoked and sought again, whenever a namespace's topic
appears (aiokafka has no incremental rebalancing). So the view's group
(`helix.projector.<store>.<target>`) subscribes to one empty topic of `SHARDS` partitions, the
shards, and rebalances only when projector processes come or go. Each topic-partition of the
namespaces belongs to one shard (`names.shard_of`); a process folds the partitions of the
shards it owns, assigned by hand to a second consumer that no group manages, and hears of new
namespace topics from the idle partitions' watcher (`helix_es.log.live.cold`), which reads the cluster's
metadata in its own process: a new topic adds its partitions to the owner's assignment and
disturbs nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from helix_es.log import kafka_clients as clients
from helix_es.log.kafka import create_topic
from helix_es.log.kafka_clients import RebalanceListener, TopicPartition
from helix_es.log.port import Partition
from helix_es.model import names

log = logging.getLogger(__name__)

HEARTBEAT_MS = 500


FIRST_TOPICS_SECONDS = 60.0  # how long a start waits for the watcher's first list of topics


class TopicWatch(Protocol):
    """What names the namespace topics (`helix_es.log.live.cold.ColdWatch`): the last list, and a hook for changes."""

    topics: dict[str, int] | None
    on_topics: Callable[[dict[str, int]], None] | None


class _Owned(RebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    def __init__(self, shards: Shards) -> None:
        self.s = shards

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        # Kept until the new deal arrives: a partition that stays needs no seek, and one that moves
        # is folded by both for a moment at most, which the session guards make harmless.
        pass

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self.s.owned = {tp.partition for tp in assigned}
        self.s.deals += 1
        self.s.changed.set()


class Shards:
    """This process's membership in a view's group, and the namespace topics it sees."""

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        group_id: str,
        topic_prefix: str,
        watch: TopicWatch,
        replication_factor: int = 1,
        session_timeout: float = 10.0,
        group_instance_id: str | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = names.shards_topic(topic_prefix)
        self.watch = watch
        self.replication_factor = replication_factor
        session_ms = max(1, round(session_timeout * 1000))
        self.group = clients.consumer(
            bootstrap_servers,
            from_start=False,
            committed_only=False,
            group_id=group_id,
            session_timeout_ms=session_ms,
            # A heartbeat is how a member hears of a rebalance: often, so a process that joins gets its
            # shards within about half a second (the group holds no data, a heartbeat costs little).
            heartbeat_interval_ms=max(1, min(session_ms // 3, HEARTBEAT_MS)),
            group_instance_id=group_instance_id,
        )
        self.group_instance_id = group_instance_id
        self.owned: set[int] = set()
        self.deals = 0  # rebalances of the group seen: processes came or went, never a new topic
        self.count = names.SHARDS  # the shards topic's partitions, once read
        self.topics: dict[str, int] = {}  # namespace topic -> partitions
        self.changed = asyncio.Event()  # the deal or the topics changed since `wanted` was last read
        self._shard: dict[Partition, int] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Join the group and watch the topics."""
        await self._ensure_topic()
        first = asyncio.Event()

        def seen(topics: dict[str, int]) -> None:
            if topics != self.topics:
                self.topics = topics
                self.changed.set()
            first.set()

        self.watch.on_topics = seen
        if self.watch.topics is not None:
            seen(self.watch.topics)
        self.group.subscribe([self.topic], listener=_Owned(self))
        await self.group.start()
        try:
            await asyncio.wait_for(first.wait(), FIRST_TOPICS_SECONDS)  # the first deal needs the topics
        except TimeoutError:
            raise TimeoutError(f"no list of the cluster's topics in {FIRST_TOPICS_SECONDS:.0f} s") from None
        self._tasks = [asyncio.create_task(self._poll())]

    async def _ensure_topic(self) -> None:
        async with clients.admin_session(self.bootstrap_servers) as admin:
            await create_topic(admin, self.topic, names.SHARDS, self.replication_factor)
            [described] = await admin.describe_topics([self.topic])
            self.count = len(described["partitions"]) or names.SHARDS  # an older topic keeps its count

    async def _poll(self) -> None:
        """A group member must poll (aiokafka's max poll interval); the shards topic stays empty."""
        while True:
            await self.group.getmany(timeout_ms=1000)

    def wanted(self) -> set[Partition]:
        """The namespace partitions of the shards this process owns now."""
        self.changed.clear()
        out = set()
        for topic, count in self.topics.items():
            for p in range(count):
                tp = Partition(topic, p)
                shard = self._shard.get(tp)
                if shard is None:
                    shard = self._shard[tp] = names.shard_of(topic, p, self.count)
                if shard in self.owned:
                    out.add(tp)
        return out

    async def stop(self, *, leave: bool) -> None:
        """Stop watching and leave the group; `leave` sends LeaveGroup even for a static member."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if leave:
            # aiokafka (like Kafka's own client) sends no LeaveGroup for a static member, which would
            # leave its shards unowned for the session timeout; the broker accepts a leave by member
            # id from a static member (Kafka 3.9.1; tests/test_recovery.py times the handover). A
            # failure (an outage) keeps the id: the restart rejoins in the member's place at once.
            coordinator = getattr(self.group, "_coordinator", None)
            if coordinator is not None and self.group_instance_id is not None:
                coordinator._group_instance_id = None
        self.watch.on_topics = None
        await self.group.stop()

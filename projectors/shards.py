"""Which partitions of a view this process folds: shards owned in the view's consumer group.

A Kafka group subscribed to the namespace topics themselves would rebalance the whole group,
every partition of every namespace revoked and sought again, whenever a namespace's topic
appears (aiokafka has no incremental rebalancing). So the view's group
(`helix.projector.<store>.<target>`) subscribes to one empty topic of `SHARDS` partitions, the
shards, and rebalances only when projector processes come or go. Each topic-partition of the
namespaces belongs to one shard (`names.shard_of`); a process folds the partitions of the
shards it owns, assigned by hand to a second consumer that no group manages, and finds new
namespace topics from the cluster's metadata: a new topic adds its partitions to the owner's
assignment and disturbs nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Iterable

from helix_es.log import kafka_clients as clients
from helix_es.log.kafka import create_topic
from helix_es.log.kafka_clients import MetadataClient, RebalanceListener, TopicPartition
from helix_es.model import names
from projectors.tiers import Background

log = logging.getLogger(__name__)

HEARTBEAT_MS = 500


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
        pattern: str,
        replication_factor: int = 1,
        session_timeout: float = 10.0,
        group_instance_id: str | None = None,
        metadata_interval: float = 1.0,
        background: Background,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = names.shards_topic(topic_prefix)
        self.pattern = re.compile(pattern)
        self.replication_factor = replication_factor
        self.metadata_interval = metadata_interval  # how soon a new namespace's topic is found
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
        # Its own connections (a broker answers a connection's requests in order, and a consumer's
        # may be holding a long poll), on the background loop (its answer takes long to decode).
        self.bg = background
        self.metadata: MetadataClient | None = None
        self.owned: set[int] = set()
        self.deals = 0  # rebalances of the group seen: processes came or went, never a new topic
        self.count = names.SHARDS  # the shards topic's partitions, once read
        self.topics: dict[str, int] = {}  # namespace topic -> partitions
        self.changed = asyncio.Event()  # the deal or the topics changed since `wanted` was last read
        self._shard: dict[TopicPartition, int] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Join the group and watch the topics."""
        await self._ensure_topic()
        self.metadata = await self.bg.run(clients.metadata_client(self.bootstrap_servers))
        self.group.subscribe([self.topic], listener=_Owned(self))
        await self.group.start()
        await self._look()  # the first deal needs the topics
        self._tasks = [asyncio.create_task(self._poll()), asyncio.create_task(self._watch())]

    async def _ensure_topic(self) -> None:
        async with clients.admin_session(self.bootstrap_servers) as admin:
            await create_topic(admin, self.topic, names.SHARDS, self.replication_factor)
            [described] = await admin.describe_topics([self.topic])
            self.count = len(described["partitions"]) or names.SHARDS  # an older topic keeps its count

    async def _poll(self) -> None:
        """A group member must poll (aiokafka's max poll interval); the shards topic stays empty."""
        while True:
            await self.group.getmany(timeout_ms=1000)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.metadata_interval)
            try:
                await self._look()
            except Exception as exc:  # a broker away: the next look tries again; what we have stays
                log.debug("could not read the cluster's topics: %s", exc)

    async def _topics(self) -> dict[str, int]:
        """The namespace topics and their partition counts (on the background loop)."""
        assert self.metadata is not None
        cluster = await self.metadata.fetch_all_metadata()
        topics = {}
        for topic in cluster.topics():
            if self.pattern.match(topic):
                parts = cluster.partitions_for_topic(topic)
                if parts:
                    topics[topic] = max(parts) + 1
        return topics

    async def _look(self) -> None:
        topics = await self.bg.run(self._topics())
        if topics != self.topics:
            self.topics = topics
            self.changed.set()

    def wanted(self) -> set[TopicPartition]:
        """The namespace partitions of the shards this process owns now."""
        self.changed.clear()
        out = set()
        for topic, count in self.topics.items():
            for p in range(count):
                tp = TopicPartition(topic, p)
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
        await self.group.stop()
        if self.metadata is not None:
            await self.bg.run(self.metadata.close())

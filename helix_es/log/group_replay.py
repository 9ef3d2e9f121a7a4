"""A replay reader shared through a consumer group: rebuild processes on several machines.

`GroupSource` reads the partitions that a rebuild's consumer group (`helix_es.model.names.rebuild_group`)
assigns this process; `GroupWatch` tells a member whether the rebuild it joined still runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from helix_es.log import kafka_clients as clients
from helix_es.log.codec import Codec
from helix_es.log.kafka_clients import Consumer, RebalanceListener, TopicPartition
from helix_es.log.replay import DECODE_SLICE, DEFAULT_BATCH, Check, Checkpoint, KafkaSource
from helix_es.model.events import Record

TOPICS_SECONDS = 10  # how often a group member looks for namespace topics created meanwhile
GROUP_SESSION_MS = 6000  # a member that dies hands its partitions on after this (the brokers' least, by default)
# A heartbeat is how a member hears of a rebalance: often, so a member that joins is dealt its partitions
# within a fifth of a second, not a second (the group holds no data, a heartbeat costs little).
HEARTBEAT_MS = 200
# How often a member asks whether the rebuild is finished (the lead: whether every checkpoint reached the
# ends; the others: whether the lead left). Each look is a few small requests; the rebuild's tail is
# about two looks, so a look a fifth of a second apart, not half, ends it sooner.
LOOK_SECONDS = 0.2


class GroupSource(KafkaSource):
    """The partitions of the namespace topics that the consumer group `group` assigns this process.

    Each assigned partition starts at its checkpoint + 1, read when it is assigned: whoever had it
    before wrote its batches with their checkpoints, so nothing is lost, and what is read again is
    a no-op (checkpoints, session guards). On a rebalance `before_revoke` is awaited before the
    partitions go (the rebuild lets its write in flight land), and a batch decoded for a partition
    that went meanwhile is dropped: its next owner reads it from the checkpoint. A member reads
    until `finished` (asked every `LOOK_SECONDS`) says so, whatever `at_end` asks: the end is the rebuild's to decide.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic_prefix: str,
        checkpoint: Checkpoint,
        *,
        group: str,
        client_id: str,
        check: Check,
        batch: int = DEFAULT_BATCH,
        codec: Codec | None = None,
        namespaces: Sequence[str] | None = None,
    ) -> None:
        self.group = group
        self.client_id = client_id
        super().__init__(
            bootstrap_servers, topic_prefix, checkpoint, check=check, batch=batch, codec=codec, namespaces=namespaces
        )
        self.generation = 0  # one more on every revocation: a batch decoded under an older one is dropped
        self.before_revoke: Callable[[], Awaitable[None]] | None = None
        self.folded: dict[tuple[str, int], int] = {}  # records written per partition (by `count`): this member's share
        self.handed = 0  # the generation the last batch handed out was read under
        self.assignments = 0  # how many times the group dealt this member its partitions (none is one too)
        self._all: list[Any] = []  # every partition of the rebuild (`all_ends`), as of `_topics_at`
        self._topics_at: float = -TOPICS_SECONDS
        self.ends_seen: dict[tuple[str, int], int] = {}  # what `all_ends` found last

    def _consumer(self, bootstrap_servers: str, **group: Any) -> Consumer:
        return super()._consumer(
            bootstrap_servers,
            group_id=self.group,
            client_id=self.client_id,
            session_timeout_ms=GROUP_SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            # A namespace topic created meanwhile joins the pattern within this. Not much less: each refresh
            # is the whole cluster's metadata, decoded in Python (a second of CPU at a few thousand topics).
            metadata_max_age_ms=TOPICS_SECONDS * 1000,
            **group,
        )

    async def start(self) -> None:
        await self.consumer.start()
        self._started = True
        self.consumer.subscribe(pattern=self.pattern.pattern, listener=_Rebalance(self))

    async def _discover(self) -> None:
        return None  # the group assigns the partitions

    async def _refresh_ends(self) -> None:
        owned = list(self.positions)
        ends = dict(await self.consumer.end_offsets(owned)) if owned else {}
        self.ends = {tp: end for tp, end in ends.items() if tp in self.positions}  # some may have gone meanwhile

    async def all_ends(self) -> dict[tuple[str, int], int]:
        """The end offset of every partition of the rebuild, whoever it is assigned to (the topics looked up
        again every `TOPICS_SECONDS`: listing them reads the whole cluster's metadata)."""
        if time.monotonic() >= self._topics_at + TOPICS_SECONDS:
            self._all = [TopicPartition(t, p) for t, parts in (await self._topics()).items() for p in parts]
            self._topics_at = time.monotonic()
        tps = self._all
        ends = await self.consumer.end_offsets(tps) if tps else {}
        self.ends_seen = {(tp.topic, tp.partition): end for tp, end in ends.items()}
        return self.ends_seen

    async def members(self) -> list[str]:
        """The client ids of the group's members now (each process one)."""
        if self.admin is None:
            await self._topics()  # starts the admin client
        return await group_clients(self.admin, self.group)

    async def state(self) -> tuple[str, list[str]]:
        """The group's state and members' client ids (`group_state`)."""
        if self.admin is None:
            await self._topics()
        return await group_state(self.admin, self.group)

    def count(self, records: Sequence[Record]) -> None:
        """`records` (one batch this source handed out) were written: they count as this member's share."""
        if records:
            key = (records[0].position.topic, records[0].position.partition)
            self.folded[key] = self.folded.get(key, 0) + len(records)

    async def _revoked(self, revoked: Sequence[Any]) -> None:
        self.generation += 1
        for tp in revoked:
            self.positions.pop(tp, None)
            self.ends.pop(tp, None)
        if self.before_revoke is not None:
            await self.before_revoke()

    async def _assigned(self, assigned: Sequence[Any]) -> None:
        for tp in assigned:
            done = await self.checkpoint(tp.topic, tp.partition)
            self.positions[tp] = 0 if done is None else done + 1
            self.consumer.seek(tp, self.positions[tp])
        await self._refresh_ends()
        self.assignments += 1

    async def read(self, finished: Callable[[], Awaitable[bool]], *, at_end: bool) -> AsyncIterator[list[Record]]:
        next_look = 0.0
        while True:
            if time.monotonic() >= next_look:
                next_look = time.monotonic() + LOOK_SECONDS
                if await finished():
                    return
                await self._refresh_ends()
            limit = self.batch * max(1, min(len(self.positions), 16))
            batches = await self.consumer.getmany(timeout_ms=200, max_records=limit)
            for tp, messages in batches.items():
                generation, counts = self.generation, (self.read_count, self.skipped)
                if not messages or tp not in self.positions:
                    continue
                records: list[Record] = []
                for start in range(0, len(messages), DECODE_SLICE):
                    records += self._decode(tp.topic, tp.partition, messages[start : start + DECODE_SLICE])
                    await asyncio.sleep(0)  # the write in flight takes its next round trip meanwhile
                if generation != self.generation or tp not in self.positions:
                    self.read_count, self.skipped = counts  # revoked meanwhile: not this member's any more
                    continue
                self.positions[tp] = messages[-1].offset + 1
                if records:
                    self.handed = generation  # the write of this batch checks it is still current
                    yield records


class _Rebalance(RebalanceListener):  # type: ignore[misc]
    def __init__(self, source: GroupSource) -> None:
        self.source = source

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self.source._revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.source._assigned(list(assigned))


async def group_state(admin: Any, group: str) -> tuple[str, list[str]]:
    """Consumer group `group`'s state (`Stable` once its partitions are dealt out) and its members' client ids."""
    described = (await admin.describe_consumer_groups([group]))[0].to_object()
    for g in described["groups"]:
        if g["group"] == group:
            return g["state"], [m["client_id"] for m in g["members"]]
    return "Dead", []


async def group_clients(admin: Any, group: str) -> list[str]:
    """The client ids of consumer group `group`'s members ([] for a group nobody is in)."""
    return (await group_state(admin, group))[1]


class GroupWatch:
    """Who is in a consumer group, for a process that is not in it (or not yet)."""

    def __init__(self, bootstrap_servers: str, group: str) -> None:
        self.group = group
        self.admin = clients.admin(bootstrap_servers)
        self._started = False

    async def members(self) -> list[str]:
        if not self._started:
            await self.admin.start()
            self._started = True
        return await group_clients(self.admin, self.group)

    async def close(self) -> None:
        if self._started:
            await self.admin.close()

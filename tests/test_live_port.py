"""The projector's loop reads through the live-source port: any `LiveSource` serves, Kafka's is one adapter."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from helix_es.log.codec import Codec
from helix_es.log.port import Batches, LiveSource, Partition
from helix_es.model import names
from helix_es.model.events import Event, MessageAdded
from helix_es.model.message import Message
from helix_es.projection.session import SessionProjection
from helix_es.stores.memory.views import MemoryStore
from helix_es.stores.ports import SessionKey
from helix_es.views.conversation import Conversation
from projectors.runner import Projector
from tests.conftest import wait_for


@dataclass(frozen=True)
class Raw:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int = 0


class ListLive:
    """Records held in lists, one per partition, all of them this process's."""

    def __init__(self, logs: dict[Partition, list[tuple[bytes, bytes]]]) -> None:
        self.logs = logs
        self.changed = asyncio.Event()
        self.changed.set()
        self.assigned: set[Partition] = set()
        self.at: dict[Partition, int] = {}
        self.left: bool | None = None

    async def start(self) -> None:
        pass

    async def stop(self, *, leave: bool) -> None:
        self.left = leave

    def wanted(self) -> set[Partition]:
        self.changed.clear()
        return set(self.logs)

    async def assign(
        self, partitions: Iterable[Partition], positions: Mapping[Partition, int], fresh: AbstractSet[Partition]
    ) -> None:
        self.assigned = set(partitions)
        self.at = {p: positions[p] for p in self.assigned}

    async def poll(self, max_records: int) -> Batches:
        out = []
        for p in sorted(self.assigned):
            records = [Raw(*p, o, k, v) for o, (k, v) in enumerate(self.logs[p]) if o >= self.at[p]][:max_records]
            if records:
                out.append((p, records))
                self.at[p] = records[-1].offset + 1
        await asyncio.sleep(0 if out else 0.01)
        return out

    async def seek(self, partition: Partition, offset: int) -> None:
        self.at[partition] = offset

    async def settle(self, positions: Mapping[Partition, int]) -> None:
        pass

    def highwater(self, partition: Partition) -> int | None:
        return len(self.logs[partition])


async def test_a_projector_folds_whatever_live_source_it_is_given() -> None:
    prefix, codec = "helix.liveport", Codec()
    topic = names.topic("ns", prefix)
    logs: dict[Partition, list[tuple[bytes, bytes]]] = {Partition(topic, 0): [], Partition(topic, 1): []}
    for i in range(30):
        sid = "ab"[i % 2]
        event = Event("ns", sid, MessageAdded(Message("user", f"turn {i}")))
        logs[Partition(topic, i % 2)].append((sid.encode(), codec.encode(event)))
    live = ListLive(logs)
    source: LiveSource = live
    store, view = MemoryStore(), Conversation()
    projection = SessionProjection(view, store)
    projector = Projector(projection, bootstrap_servers="unused:9092", topic_prefix=prefix, live=lambda: source)
    stop = asyncio.Event()
    task = asyncio.create_task(projector.run(stop))
    try:

        async def done() -> bool:
            return [await projection.checkpoint(topic, p) for p in (0, 1)] == [14, 14]

        await wait_for(done, 10, "both partitions' checkpoints at their last offset")
    finally:
        stop.set()
        progress = await task
    assert progress.events == 30 and live.left is True  # a clean stop hands the partitions on at once
    for sid in "ab":  # each session's last event, offset 14 of its partition
        assert (await store.read(view, SessionKey("ns", sid))).applied == 14

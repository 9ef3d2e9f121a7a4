"""Two consumers for a view's partitions: the busy ones fetched apart from the idle many.

aiokafka has no incremental fetch sessions (KIP-227): every fetch request names every
partition of the consumer and every response lists each one, data or not, decoded in Python.
With a thousand namespaces of six partitions that is 6,000 entries per round trip, and when
a few sessions write all the time the rounds come back to back: measured, 35% of a core at
idle and add-to-visible 4.6 s at p50. So the partitions that had records in the last
`IDLE_SECONDS` are fetched by a `hot` consumer of their own (small, fast rounds), and every
other partition by a `cold` one whose long poll (`COLD_WAIT_MS`) returns as soon as any of
them has a record: that partition then moves to `hot`. `cold` keeps the partitions it had and
pauses the hot ones, so a move is a pause or resume, not a new assignment. A broker answers a
connection's requests in order, so a new assignment's first fetch (and a metadata request)
waits behind the long poll in flight: a new namespace's partitions start hot, and `cold` gets
them only when they go idle. `cold` runs on an event loop of its own, in another thread (as
does the metadata look of `projectors.shards`): decoding one of its answers takes tens of
milliseconds per thousand partitions, and on the folding loop it would hold every busy
partition up that long; on a thread the interpreter switches between them every few ms. A poll
asks that loop for records only when cold's fetcher holds some (`_holds_fetched`): asking costs
a wait for the loop, which may be in the middle of such a decode.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Coroutine, Iterable
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

IDLE_SECONDS = 30.0  # a hot partition without records this long goes back to the cold consumer
COLD_WAIT_MS = 1000  # the cold long poll: a record on any of its partitions ends it at once
HOT_WAIT_MS = 20  # how long a poll waits for hot records before looking at the cold ones
IDLE_WAIT_MS = 100  # how long a poll waits for cold records when no partition is hot
# The hot long poll. aiokafka has one fetch in flight per broker, and leaves out of it the
# partitions whose records are not yet taken: a busy partition's next record waits for the
# fetch in flight to end, which is this long when the other hot partitions are quiet
# (measured at 100 ms: add-to-visible p99 125 ms beside 8 ms for raw produce-to-consume).
HOT_FETCH_WAIT_MS = 5
DATA_METADATA_AGE_MS = 30_000  # leaders are looked up again at once on a fetch error anyway

Batches = list[tuple[TopicPartition, list[ConsumerRecord[bytes, bytes]]]]
T = TypeVar("T")


class Background:
    """An event loop on a thread of its own: Kafka clients whose answers take long to decode live there."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="helix-kafka-background", daemon=True)
        self.thread.start()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """`coro`, run on the background loop, awaited from the caller's."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()


def _consumer(bootstrap_servers: str, fetch_max_wait_ms: int) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        metadata_max_age_ms=DATA_METADATA_AGE_MS,
        max_partition_fetch_bytes=4 * 1024 * 1024,
        fetch_max_wait_ms=fetch_max_wait_ms,
    )


def _holds_fetched(consumer: AIOKafkaConsumer | None) -> bool:
    """Whether `consumer` has fetched records (or an error) to hand out. Asking its loop costs a
    wait for that loop, which is busy decoding for tens of ms at a time (measured: polls of
    40-110 ms): the fetcher's buffer is read across threads instead (the length of a dict), and
    if this aiokafka keeps it elsewhere, the loop is asked every time."""
    records = getattr(getattr(consumer, "_fetcher", None), "_records", None)
    return records is None or bool(records)


class Tiers:
    """The partitions dealt to this process, each fetched by `hot` or by `cold`; assigned by hand.

    `cold` is given a new assignment only when partitions leave this process, arrive with a
    checkpoint, or come back from `hot` for the first time: a new assignment's first fetch waits
    behind the long poll in flight, so new namespaces, one a second, go to `hot` alone.
    """

    def __init__(self, bootstrap_servers: str, background: Background) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.bg = background
        self.hot = _consumer(bootstrap_servers, HOT_FETCH_WAIT_MS)
        self.cold: AIOKafkaConsumer | None = None  # made, started and used on the background loop
        self.assigned: set[TopicPartition] = set()
        self._hot: set[TopicPartition] = set()
        self._cold: set[TopicPartition] = set()  # cold's assignment: the hot ones among them paused
        self._last: dict[TopicPartition, float] = {}  # when each hot partition last had records
        self._next_demotion = 0.0
        self._warm: list[TopicPartition] = []  # cold partitions that just had records

    async def start(self) -> None:
        self.cold = await self.bg.run(self._start_cold())
        await self.hot.start()

    async def _start_cold(self) -> AIOKafkaConsumer:
        cold = _consumer(self.bootstrap_servers, COLD_WAIT_MS)
        await cold.start()
        return cold

    async def stop(self) -> None:
        await self.hot.stop()
        if self.cold is not None:
            await self.bg.run(self.cold.stop())

    def _on_cold(self, call: Any, *args: Any) -> Awaitable[Any]:
        """`call(*args)` (a sync method of `cold`), run on the background loop."""

        async def run() -> Any:
            return call(*args)

        return self.bg.run(run())

    async def assign(
        self, partitions: Iterable[TopicPartition], positions: dict[TopicPartition, int], fresh: set[TopicPartition]
    ) -> None:
        """Fold `partitions` from `positions` (every one of them). The `fresh` ones (never folded: a new
        namespace, records due) start hot; others cold, until they have records."""
        wanted = set(partitions)
        fresh = (fresh & wanted) - self.assigned
        now = time.monotonic()
        for tp in fresh:
            self._last[tp] = now
        self.assigned = wanted
        self._hot = (self._hot & wanted) | fresh
        for tp in set(self._last) - self._hot:
            del self._last[tp]
        cold = (self._cold & wanted) | (wanted - self._hot)
        if cold != self._cold:
            await self._assign_cold(cold, positions)
        self._assign_hot(positions)

    async def _assign_cold(self, cold: set[TopicPartition], positions: dict[TopicPartition, int]) -> None:
        self._cold = cold
        at = {tp: positions[tp] for tp in cold}
        paused = cold & self._hot
        consumer = self.cold
        assert consumer is not None

        async def assign() -> None:
            consumer.assign(sorted(at))
            for tp, offset in at.items():
                consumer.seek(tp, offset)
            if paused:
                consumer.pause(*paused)

        await self.bg.run(assign())

    def _assign_hot(self, positions: dict[TopicPartition, int]) -> None:
        self.hot.assign(sorted(self._hot))
        for tp in self._hot:
            self.hot.seek(tp, positions[tp])

    async def seek(self, tp: TopicPartition, offset: int) -> None:
        if tp in self._hot:
            self.hot.seek(tp, offset)
        else:
            assert self.cold is not None
            await self._on_cold(self.cold.seek, tp, offset)

    def highwater(self, tp: TopicPartition) -> int | None:
        consumer = self.hot if tp in self._hot else self.cold
        assert consumer is not None
        return consumer.highwater(tp)  # type: ignore[no-any-return]  # a read of a plain dict, from any thread

    async def poll(self, max_records: int) -> Batches:
        """Records of hot partitions (waiting up to HOT_WAIT_MS for some), then whatever cold has."""
        out: Batches = []
        if self._hot:
            out += (await self.hot.getmany(timeout_ms=HOT_WAIT_MS, max_records=max_records)).items()
        cold: Batches = []
        if self._cold - self._hot and (not self._hot or _holds_fetched(self.cold)):
            assert self.cold is not None
            wait = 0 if self._hot else IDLE_WAIT_MS
            cold = list((await self.bg.run(self.cold.getmany(timeout_ms=wait, max_records=max_records))).items())
        out += cold
        now = time.monotonic()
        for tp, _ in out:
            if tp in self._hot:
                self._last[tp] = now
        self._warm = [tp for tp, _ in cold if tp not in self._hot]  # moved once their batch is folded
        return out

    async def settle(self, positions: dict[TopicPartition, int]) -> None:
        """After the batches of `poll` are folded: partitions that woke move hot, long-idle ones cold."""
        assert self.cold is not None
        now = time.monotonic()
        moved = False
        warm = [tp for tp in self._warm if tp in self.assigned]
        self._warm = []
        if warm:
            await self._on_cold(self.cold.pause, *warm)
            self._hot.update(warm)
            for tp in warm:
                self._last[tp] = now
            moved = True
        if now >= self._next_demotion:
            self._next_demotion = now + IDLE_SECONDS / 3
            idle = {tp for tp in self._hot if now - self._last.get(tp, now) > IDLE_SECONDS}
            if idle:
                self._hot -= idle
                for tp in idle:
                    self._last.pop(tp, None)
                if idle <= self._cold:
                    consumer = self.cold
                    at = {tp: positions[tp] for tp in idle}

                    async def resume() -> None:
                        for tp, offset in at.items():
                            consumer.seek(tp, offset)
                        consumer.resume(*at)

                    await self.bg.run(resume())
                else:
                    await self._assign_cold(self._cold | idle, positions)
                moved = True
        if moved:
            self._assign_hot(positions)

"""Two consumers for a view's partitions: the busy ones fetched apart from the idle many.

aiokafka has no incremental fetch sessions (KIP-227): every fetch request names every
partition of the consumer and every response lists each one, data or not, decoded in Python.
With a thousand namespaces of six partitions that is 6,000 entries per round trip, and when
a few sessions write all the time the rounds come back to back: measured, 35% of a core at
idle and add-to-visible 4.6 s at p50. So the partitions that had records in the last
`IDLE_SECONDS` are fetched by a `hot` consumer of their own (small, fast rounds), and every
other partition is watched by a child process (`helix_es.log.live.cold`) whose long poll
(`COLD_WAIT_MS`) returns as soon as any of them has a record: that partition then moves to
`hot`, which reads it from this process's position. The child keeps the partitions it had and
pauses the hot ones, so a move is a pause or resume, not a new assignment. A broker answers a
connection's requests in order, so a new assignment's first fetch waits behind the long poll
in flight: a new namespace's partitions start hot, and go to the child only when they go idle
(those that never had a record after `FRESH_SECONDS`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet

from helix_es.log.kafka_clients import TopicPartition, add_partitions, fold_consumer
from helix_es.log.live.cold import ColdWatch
from helix_es.log.port import Batches, Partition

IDLE_SECONDS = 30.0  # a hot partition without records this long goes back to the cold watcher
# A new namespace's partitions start hot; most never get a record (a session writes to one): these
# go cold this soon. With one new namespace a second, hot would otherwise hold 180 quiet partitions,
# and every hot round trip (200 a second) encodes and decodes each of them in Python.
FRESH_SECONDS = 5.0
COLD_WAIT_MS = 1000  # the cold long poll: a record on any of its partitions ends it at once
HOT_WAIT_MS = 20  # how long a poll waits for hot records before looking at the cold ones
IDLE_WAIT_MS = 100  # how long a poll waits for cold partitions to wake when no partition is hot
# The hot long poll. aiokafka has one fetch in flight per broker, and leaves out of it the
# partitions whose records are not yet taken: a busy partition's next record waits for the
# fetch in flight to end, which is this long when the other hot partitions are quiet
# (measured at 100 ms: add-to-visible p99 125 ms beside 8 ms for raw produce-to-consume).
HOT_FETCH_WAIT_MS = 5
# A partition leaving `hot` is paused there, not taken out: a new assignment cancels the fetch in
# flight and drops what was fetched for every busy partition (aiokafka), and namespaces come and go
# hot about once a second. Each fetch round still walks the paused ones, so past this many (or the
# partitions fetched, if more) `hot` is assigned afresh.
PARKED_MAX = 64
Positions = Mapping[Partition, int]


def _kafka(partitions: Iterable[Partition]) -> list[TopicPartition]:
    """The client's own type, which some of its calls insist on (ours hash and compare alike)."""
    return [TopicPartition(*tp) for tp in partitions]


class Tiers:
    """The partitions dealt to this process, each fetched by `hot` or watched by `cold`; assigned by hand.

    `cold` is given a new assignment only when partitions leave this process, arrive with a
    checkpoint, or come back from `hot` for the first time (then only the new ones are sent): a new
    assignment's first fetch waits behind the long poll in flight, so new namespaces, one a second,
    go to `hot` alone.
    """

    def __init__(self, bootstrap_servers: str, pattern: str | None = None, metadata_interval: float = 1.0) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.hot = fold_consumer(bootstrap_servers, HOT_FETCH_WAIT_MS)
        # The child also names the topics matching `pattern` (`helix_es.log.live.shards` deals them).
        self.cold = ColdWatch(bootstrap_servers, COLD_WAIT_MS, pattern, metadata_interval)
        self.assigned: set[Partition] = set()
        self._hot: set[Partition] = set()
        self._cold: set[Partition] = set()  # cold's assignment: the hot ones among them paused
        self._parked: set[Partition] = set()  # in hot's assignment, paused: cold watches them
        self._last: dict[Partition, float] = {}  # when each hot partition last had records
        self._next_demotion = 0.0

    async def start(self) -> None:
        await self.cold.start()
        await self.hot.start()

    async def stop(self) -> None:
        await self.hot.stop()
        await self.cold.stop()

    async def assign(
        self, partitions: Iterable[Partition], positions: Positions, fresh: AbstractSet[Partition]
    ) -> None:
        """Fold `partitions` from `positions` (every one of them). The `fresh` ones (never folded: a new
        namespace, records due) start hot; others cold, until they have records."""
        wanted = set(partitions)
        fresh = (fresh & wanted) - self.assigned
        due = time.monotonic() - IDLE_SECONDS + min(FRESH_SECONDS, IDLE_SECONDS)  # idle that soon
        for tp in fresh:
            self._last[tp] = due
        self.assigned = wanted
        self._hot = (self._hot & wanted) | fresh
        for tp in set(self._last) - self._hot:
            del self._last[tp]
        cold = (self._cold & wanted) | (wanted - self._hot)
        if cold != self._cold:
            await self._assign_cold(cold, positions)
        self._assign_hot(positions)

    async def _assign_cold(self, cold: set[Partition], positions: Positions) -> None:
        """Give `cold` to the watcher: only the new ones where none leave (a short message, not thousands)."""
        more = cold - self._cold
        if self._cold <= cold:
            await self.cold.add({tp: positions[tp] for tp in more})
        else:
            await self.cold.assign({tp: positions[tp] for tp in cold}, cold & self._hot)
        self._cold = cold

    def _assign_hot(self, positions: Positions) -> None:
        """Make `hot` fetch exactly `_hot`: partitions leaving are paused, coming back resumed, new ones
        added in place; a new assignment only when some left this process or too many wait paused."""
        held = {Partition(*tp) for tp in self.hot.assignment()}
        parked = held - self._hot
        if not held or not held <= self.assigned or len(parked) > max(PARKED_MAX, len(self._hot)):
            self.hot.assign(_kafka(sorted(self._hot)))
            for tp in self._hot:
                self.hot.seek(TopicPartition(*tp), positions[tp])
            self._parked = set()
            return
        if parked - self._parked:
            self.hot.pause(*_kafka(parked - self._parked))
        back = self._hot & self._parked
        for tp in back:
            self.hot.seek(TopicPartition(*tp), positions[tp])
        if back:
            self.hot.resume(*_kafka(back))
        self._parked = parked
        new = self._hot - held
        if new:
            add_partitions(self.hot, _kafka(new))
            for tp in new:
                self.hot.seek(TopicPartition(*tp), positions[tp])

    async def seek(self, tp: Partition, offset: int) -> None:
        if tp in self._hot:
            self.hot.seek(TopicPartition(*tp), offset)
        else:
            await self.cold.seek(tp, offset)

    def highwater(self, tp: Partition) -> int | None:
        """The end of `tp` as of the last fetch (only hot partitions' records are folded)."""
        return self.hot.highwater(TopicPartition(*tp)) if tp in self._hot else None

    async def poll(self, max_records: int) -> Batches:
        """Records of hot partitions, waiting up to HOT_WAIT_MS for some (IDLE_WAIT_MS for a cold one
        to wake when none is hot)."""
        if not self._hot:
            await self.cold.wait(IDLE_WAIT_MS / 1000)
            return []
        fetched = await self.hot.getmany(timeout_ms=HOT_WAIT_MS, max_records=max_records)
        out = [(Partition(*tp), records) for tp, records in fetched.items()]
        now = time.monotonic()
        for tp, _ in out:
            self._last[tp] = now
        return out

    async def settle(self, positions: Positions) -> None:
        """After the batches of `poll` are folded: partitions that woke move hot, long-idle ones cold."""
        now = time.monotonic()
        moved = False
        warm = (self.cold.take() & self._cold & self.assigned) - self._hot  # cold paused them already
        if warm:
            self._hot |= warm
            for tp in warm:
                self._last[tp] = now
            moved = True
        if now >= self._next_demotion:
            self._next_demotion = now + min(IDLE_SECONDS, FRESH_SECONDS) / 3
            idle = {tp for tp in self._hot if now - self._last.get(tp, now) > IDLE_SECONDS}
            if idle:
                self._hot -= idle
                for tp in idle:
                    self._last.pop(tp, None)
                back = idle & self._cold
                if back:
                    await self.cold.resume({tp: positions[tp] for tp in back})
                if idle - back:
                    await self._assign_cold(self._cold | idle, positions)
                moved = True
        if moved:
            self._assign_hot(positions)

"""The consume-fold-checkpoint loop: one view, the topics of its namespaces, read from a live source.

The live source (`helix_es.log.port.LiveSource`; on Kafka `helix_es.log.live`, one consumer group
per view) says which partitions this process folds. A partition dealt to this process is sought
to the view's stored checkpoint + 1 (no offsets are committed to the log: the checkpoints are the
truth), each batch is folded per session and written with its checkpoint in one atomic step,
and session guards make a re-delivered event a no-op.

Faults, and what the loop does about them:

- A store or broker that is down, restarting or busy (`transient`): the write in hand is
  retried with backoff (0.1 s doubling to 5 s, one warning per attempt) for as long as it takes,
  with the batch held, so nothing is skipped; a stop (SIGTERM) during the wait abandons the
  batch, unwritten, for the next start to re-read. A transient failure anywhere else (the
  live source cannot start, the alias cannot be read) ends that projector's run, and
  `projectors.supervise` starts it again after a backoff (0.5 s doubling to 30 s):
  `helix-es project` does not exit for an outage, only for a fault that waiting does not cure.
- A checkpoint that vanished (Redis FLUSHALL, or a Redis restarted without persistence, took the
  view's data with it): the store refuses the write (`CheckpointLost`) or the periodic check
  (every `verify_interval` seconds, for partitions with nothing new to write) finds it missing,
  and the partition is refolded from the start of the log. A checkpoint found below the one
  written (a store restored from an older snapshot) moves the partition back to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from helix_es.log.check import Checker
from helix_es.log.codec import Codec
from helix_es.log.dead_letters import DeadLetters
from helix_es.log.kafka import KafkaLog
from helix_es.log.live.source import KafkaLive
from helix_es.log.port import Batches, LiveSource, Partition, RawRecord
from helix_es.model import names
from helix_es.model.events import Event, Position, Record
from helix_es.projection.driver import Driver
from helix_es.projection.protocol import Projection
from helix_es.stores.ports import CheckpointLost
from projectors.supervise import transient

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_FIRST = 0.1  # seconds before the first retry of a store write; doubles up to RETRY_MAX
RETRY_MAX = 5.0
CHECKPOINT_READS = 64  # checkpoints read at once (partitions dealt to this process, the periodic check)
FOLDS_AT_ONCE = 16  # partitions' batches folded at once (each holds a store connection)
VERIFY_STEP = 0.1  # seconds between the periodic check's steps through many partitions


class _Stopped(Exception):
    """Stop was asked for while a write was being retried: the batch in hand stays unwritten."""


@dataclass
class Progress:
    """What a projector has done since it started."""

    events: int = 0  # folded into the view
    skipped: int = 0  # re-delivered at or below a session guard
    dead_letters: int = 0  # records it could not use, parked on helix.dlq.<namespace>
    batches: int = 0
    assigned: set[Partition] = field(default_factory=set)
    retries: int = 0  # store writes retried after a transient failure
    restarts: int = 0  # runs started again after a transient failure (by `projectors.supervise`)
    refolds: int = 0  # partitions refolded from the start because their checkpoint vanished


class Projector:
    """Projects the `<topic_prefix>.<namespace>` topics of `namespaces` (default: every one) into one view."""

    def __init__(
        self,
        projection: Projection,
        *,
        bootstrap_servers: str,
        topic_prefix: str = names.DEFAULT_TOPIC_PREFIX,
        batch_size: int = 500,
        codec: Codec | None = None,
        session_timeout: float = 10.0,
        verify_interval: float = 5.0,
        namespaces: Sequence[str] | None = None,
        group_instance_id: str | None = None,
        replication_factor: int = 1,
        metadata_interval: float = 1.0,
        live: Callable[[], LiveSource] | None = None,
    ) -> None:
        self.projection = projection
        # The view's namespaces (names or globs), None for every one: another namespace's events never reach it.
        self.pattern = names.topic_pattern(topic_prefix, namespaces)
        self.bootstrap_servers = bootstrap_servers
        self.topic_prefix = topic_prefix
        self.batch_size = batch_size
        self.codec = codec or Codec()
        self.check = Checker(topic_prefix)
        self.session_timeout = session_timeout  # how soon the group gives a dead process's partitions away
        self.verify_interval = verify_interval  # how often stored checkpoints are checked against `written`
        # Static membership (projectors.instance): a restart under the same id takes its partitions back at once.
        self.group_instance_id = group_instance_id
        self.replication_factor = replication_factor  # of the shards topic, as of the namespace topics
        self.metadata_interval = metadata_interval  # how soon a new namespace's topic is found
        # What deals and reads the view's partitions, a new one each run: by default Kafka's.
        self._new_live = live or self._kafka_live
        self.live: LiveSource | None = None
        self._log: KafkaLog | None = None  # appends derived events
        self.dead_letters = DeadLetters(bootstrap_servers, topic_prefix)
        self.progress = Progress()
        self.written: dict[Partition, int] = {}  # the checkpoint this process last read or wrote
        self.next: dict[Partition, int] = {}  # where each assigned partition is read from next
        self._unverified: list[Partition] = []  # the periodic check's round, still to check
        # The last offset this process folded, per partition: a record at or below it that comes again
        # (a seek back, a refold) was parked already.
        self.handled: dict[Partition, int] = {}
        # Per partition, a number that changes with every seek: records fetched before the last seek
        # are dropped, never folded; the partition is read again from where it was sought.
        self.sought: dict[Partition, int] = {}
        self._seeks = 0
        self._stop = asyncio.Event()

    def _kafka_live(self) -> LiveSource:
        """The view's partitions on Kafka: those of the shards this process owns in the view's group."""
        return KafkaLive(
            self.bootstrap_servers,
            group_id=names.consumer_group(self.projection.name, self.projection.kind, self.topic_prefix),
            topic_prefix=self.topic_prefix,
            pattern=self.pattern,
            replication_factor=self.replication_factor,
            session_timeout=self.session_timeout,
            group_instance_id=self.group_instance_id,
            metadata_interval=self.metadata_interval,
        )

    async def run(self, stop: asyncio.Event) -> Progress:
        """Consume until `stop` is set; then leave the group cleanly."""
        self._stop = stop
        self.live = live = self._new_live()
        self.written.clear()
        self.sought.clear()
        self.next.clear()
        # The checkpoints of partitions newly dealt are read while the others are folded: a new
        # namespace a second would otherwise hold every busy partition up for those round trips.
        dealing: asyncio.Task[tuple[set[Partition], list[Partition], list[int | None]]] | None = None
        try:
            await live.start()
            loop = asyncio.get_running_loop()
            next_check = loop.time() + self.verify_interval
            while not stop.is_set():
                if live.changed.is_set() and dealing is None:
                    dealing = asyncio.create_task(self._read_gained(live.wanted()))
                if dealing is not None and (dealing.done() or not live.assigned):
                    await self._reassign(*await dealing)
                    dealing = None
                if not live.assigned:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(live.changed.wait(), 0.2)
                    continue
                batches = await live.poll(self.batch_size)
                await self._fold_all(batches)
                await live.settle(self.next)
                if loop.time() >= next_check:
                    next_check = loop.time() + await self._verify()
        except _Stopped:
            log.warning(
                "%s: stopped while a write was failing; the batch in hand is re-read on the next start",
                self.projection.name,
            )
        finally:
            if dealing is not None:
                dealing.cancel()
                await asyncio.gather(dealing, return_exceptions=True)
            self.progress.assigned.clear()
            await live.stop(leave=stop.is_set())
            await self.dead_letters.close()
            if self._log is not None:
                await self._log.close()
        return self.progress

    async def _fold_all(self, batches: Batches) -> None:
        """Fold each partition's batch; at once, where the projection allows (many namespaces each have
        a little: one after another, the last would wait for every other's round trips)."""
        sought = {tp: self.sought.get(tp) for tp, _ in batches}
        ready = [(tp, m) for tp, m in batches if sought[tp] is not None and self.sought.get(tp) == sought[tp]]
        if len(ready) < 2 or not getattr(self.projection, "reentrant", False):
            for tp, messages in ready:
                await self._fold(tp, messages)
            return
        gate = asyncio.Semaphore(FOLDS_AT_ONCE)

        async def fold(tp: Partition, messages: Sequence[RawRecord]) -> None:
            async with gate:
                await self._fold(tp, messages)

        results = await asyncio.gather(*(fold(tp, m) for tp, m in ready), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _read_gained(self, wanted: set[Partition]) -> tuple[set[Partition], list[Partition], list[int | None]]:
        """`wanted`, the partitions in it not folded yet, and their stored checkpoints."""
        assert self.live is not None
        gained = sorted(wanted - self.live.assigned)
        checkpoints: list[int | None] = []
        for i in range(0, len(gained), CHECKPOINT_READS):
            some = gained[i : i + CHECKPOINT_READS]
            checkpoints += await self.retrying(
                f"reading the checkpoints of {len(gained)} partitions",
                lambda some=some: self._checkpoints(some),  # type: ignore[misc]
            )
        return wanted, gained, checkpoints

    async def _reassign(self, wanted: set[Partition], gained: list[Partition], checkpoints: list[int | None]) -> None:
        """Fold `wanted` from now on: partitions kept read on where they were, the `gained` ones from their
        `checkpoints` (read by `_read_gained` while the assignment stayed as it is).

        `assign` replaces the whole assignment (and drops what was fetched), so every kept partition
        is sought back to where it was: no store read, no pause beyond one fetch for the others.
        """
        live = self.live
        assert live is not None
        current = set(live.assigned)
        if wanted == current:
            return
        for tp in current - wanted:  # dealt to another process
            for held in (self.written, self.next, self.sought):
                held.pop(tp, None)
        fresh = set()
        for tp, checkpoint in zip(gained, checkpoints, strict=True):
            if checkpoint is None:
                # From the start: offset 0, or where the log begins (the live source reads from there),
                # without asking the brokers first, which waits while a new topic elects leaders.
                fresh.add(tp)
                self.written.pop(tp, None)
            else:
                self.written[tp] = checkpoint
            self.next[tp] = 0 if checkpoint is None else checkpoint + 1
            self.mark_sought(tp)
        await live.assign(wanted, self.next, fresh)
        self.progress.assigned = set(wanted)
        name = self.projection.name
        if len(gained) <= 12:
            for tp in gained:
                log.info("%s: %s[%d] from offset %d", name, tp.topic, tp.partition, self.next[tp])
        else:
            log.info("%s: %d more partitions, each from its checkpoint", name, len(gained))
        if current - wanted:
            log.info("%s: %d partitions dealt to other processes", name, len(current - wanted))

    async def _checkpoints(self, tps: Sequence[Partition]) -> list[int | None]:
        """The stored checkpoints of `tps` (at most `CHECKPOINT_READS`), read at once."""
        return list(await asyncio.gather(*(self.projection.checkpoint(tp.topic, tp.partition) for tp in tps)))

    async def _seek(self, tp: Partition, offset: int) -> None:
        assert self.live is not None
        await self.live.seek(tp, offset)
        self.next[tp] = offset
        self.mark_sought(tp)

    async def retrying(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """`call()`, again and again with backoff while it fails transiently; `_Stopped` once stop is set."""
        delay = RETRY_FIRST
        failures = 0
        while True:
            try:
                result = await call()
            except Exception as exc:
                if not transient(exc):
                    raise
                if self._stop.is_set():
                    raise _Stopped from exc
                failures += 1
                self.progress.retries += 1
                log.warning(
                    "%s: %s failed (%s: %s); retry %d in %.1fs",
                    self.projection.name,
                    what,
                    type(exc).__name__,
                    exc,
                    failures,
                    delay,
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
                delay = min(delay * 2, RETRY_MAX)
                continue
            if failures:
                log.info("%s: %s succeeded after %d failed attempts", self.projection.name, what, failures)
            return result

    async def _refold(self, tp: Partition, why: str) -> None:
        """The view lost what it held of `tp`: fold the partition again from the start of the log."""
        log.warning(
            "%s: %s; refolding %s[%d] from the start of the log", self.projection.name, why, tp.topic, tp.partition
        )
        self.written.pop(tp, None)
        self.progress.refolds += 1
        await self._seek(tp, 0)  # the live source reads from where the log begins

    def mark_sought(self, tp: Partition) -> None:
        self._seeks += 1
        self.sought[tp] = self._seeks

    async def _verify(self) -> float:
        """Check the next few stored checkpoints against what this process wrote; seconds to the next check.

        A few at a time (`CHECKPOINT_READS`, read at once), so that thousands of partitions never
        hold up the folding: a round over all of them starts every `verify_interval` seconds.
        """
        assert self.live is not None
        if not self._unverified:
            self._unverified = list(self.written)
            if not self._unverified:
                return self.verify_interval
        some, self._unverified = self._unverified[:CHECKPOINT_READS], self._unverified[CHECKPOINT_READS:]
        projection = self.projection
        try:
            found = await self._checkpoints(some)
        except Exception as exc:
            if not transient(exc):
                raise
            log.warning("%s: could not check checkpoints (%s: %s)", projection.name, type(exc).__name__, exc)
            return self.verify_interval
        for tp, stored in zip(some, found, strict=True):
            written = self.written.get(tp)
            if written is None or tp not in self.live.assigned:
                continue  # dealt away, or refolding, meanwhile
            if stored is None:
                await self._refold(tp, f"the checkpoint of {tp.topic}[{tp.partition}] is gone (was {written})")
            elif stored < written:
                log.warning(
                    "%s: the checkpoint of %s[%d] went back from %d to %d; folding again from there",
                    projection.name,
                    tp.topic,
                    tp.partition,
                    written,
                    stored,
                )
                self.written[tp] = stored
                await self._seek(tp, stored + 1)
        return VERIFY_STEP if self._unverified else self.verify_interval

    async def _fold(self, tp: Partition, messages: Sequence[RawRecord]) -> None:
        records = []
        handled = self.handled.get(tp, -1)
        for m in messages:
            try:
                event = self.check.use(self.codec.read, m.value, tp.topic, m.key)
            except Exception as exc:  # a record we cannot use must not stop every view behind it
                if m.offset > handled:
                    await self.retrying(
                        f"parking {tp.topic}[{tp.partition}]@{m.offset}",
                        lambda m=m, exc=exc: self.dead_letters.park(  # type: ignore[misc]
                            m, exc, self.projection.name
                        ),
                    )
                    self.progress.dead_letters += 1
                continue
            records.append(Record(event, Position(tp.topic, tp.partition, m.offset)))
        assert self.live is not None
        if tp not in self.live.assigned:
            return  # revoked while this batch was decoded: its new owner folds it from the checkpoint
        highwater = self.live.highwater(tp)
        live = highwater is None or messages[-1].offset + 1 >= highwater
        where = f"{tp.topic}[{tp.partition}]@{messages[0].offset}-{messages[-1].offset}"
        driver = Driver(self.projection, append=self._append_derived, retry=self.retrying)
        applied = None
        for attempt in range(2):
            try:
                applied = await driver.apply(records, live=live, where=where) if records else None
                if not records or records[-1].position.offset < messages[-1].offset:
                    # The batch ended in dead letters: move past them, so a restart does not park them again.
                    await self.retrying(
                        f"moving the checkpoint past {where}",
                        lambda: self.projection.advance(tp.topic, tp.partition, messages[-1].offset),
                    )
                break
            except CheckpointLost as exc:
                if tp in self.written or attempt:
                    await self._refold(tp, str(exc))
                    return
                # Folding from the start of the log already (found gone, or never there): the store
                # still remembered the checkpoint it lost, and has forgotten it now. Write again.
        self.written[tp] = messages[-1].offset
        self.next[tp] = messages[-1].offset + 1
        self.handled[tp] = max(handled, messages[-1].offset)
        if applied is not None:
            self.progress.events += applied.events
            self.progress.skipped += len(records) - applied.events
        self.progress.batches += 1

    async def _append_derived(self, event: Event) -> None:
        if self._log is None:
            self._log = KafkaLog(self.bootstrap_servers, topic_prefix=self.topic_prefix)
        await self._log.append(event)

"""The Kafka log: topic `helix.memory.<namespace>`, key = session id, acks=all, idempotent."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from aiokafka.admin import NewTopic
from aiokafka.errors import (
    InvalidProducerEpoch,
    KafkaError,
    OutOfOrderSequenceNumber,
    ProducerFenced,
    UnknownProducerId,
)
from aiokafka.partitioner import DefaultPartitioner, murmur2

from helix_es.log import kafka_clients as clients
from helix_es.log.check import Checker, OnBad, concerns, skipped
from helix_es.log.codec import Codec
from helix_es.log.kafka_clients import Admin, Consumer, Producer, TopicPartition
from helix_es.log.kafka_errors import KafkaUnavailable
from helix_es.log.kafka_uses import KafkaUses
from helix_es.log.port import MAX_EVENT_BYTES, OnEnd, Partition, Unclaimed
from helix_es.model import names
from helix_es.model.errors import EventTooLarge, HelixError, InvalidInput
from helix_es.model.events import Event, Position, Record

TOPIC_ALREADY_EXISTS = 36
# Errors after which a producer's sequence numbers or id are no good: the broker wrote nothing.
BROKEN = (OutOfOrderSequenceNumber, UnknownProducerId, InvalidProducerEpoch, ProducerFenced)
# The log is the audit trail: no time or size retention, ever.
TOPIC_CONFIGS = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}


def default_min_insync(replication_factor: int) -> int:
    """2 from 3 replicas up: an acked add is on two brokers, and one broker may be lost without
    stopping writes. Below 3, 1: with 2 replicas, 2 in sync would stop writes at the first loss."""
    return 2 if replication_factor >= 3 else 1


async def create_topic(
    admin: Admin,
    topic: str,
    partitions: int,
    replication_factor: int,
    min_insync_replicas: int | None = None,
    configs: Mapping[str, str] | None = None,
) -> None:
    """Create a topic that keeps everything (unless `configs` say otherwise); one that exists already is
    fine (its configs stay)."""
    insync = default_min_insync(replication_factor) if min_insync_replicas is None else min_insync_replicas
    configs = {**TOPIC_CONFIGS, "min.insync.replicas": str(insync), **(configs or {})}
    new = NewTopic(topic, partitions, replication_factor, topic_configs=configs)
    try:
        response = await admin.create_topics([new])
    except KafkaError as exc:
        raise KafkaUnavailable(f"could not create topic {topic}: {exc!r}; check the brokers") from exc
    want = partitions  # an existing topic keeps the partitions it has: any will do
    for name, code, *rest in response.topic_errors:
        if code == TOPIC_ALREADY_EXISTS:
            want = 1
        elif code != 0:
            raise HelixError(f"could not create topic {name}: error {code} {rest}")
    # The controller answers before every broker's metadata lists the partitions: wait for them, so
    # what runs next (a consumer's assignment, a describe) sees the whole topic.
    deadline = asyncio.get_running_loop().time() + 10.0
    while True:
        described = await admin.describe_topics([topic])
        if described and described[0]["error_code"] == 0 and len(described[0]["partitions"]) >= want:
            return
        if asyncio.get_running_loop().time() >= deadline:
            raise HelixError(f"topic {topic} was created but its partitions did not appear within 10 s")
        await asyncio.sleep(0.05)


async def track(consumer: Consumer, topics: set[str]) -> None:
    """Make `consumer` know the partitions of `topics` too: a consumer knows those of the topics it tracks
    only, and offsets asked of any other partition wait on stale metadata until they time out."""
    client = consumer._client
    if not topics <= client._topics:
        client.set_topics(sorted(client._topics | topics))
        await client.force_metadata_update()


async def ends_of(bootstrap_servers: str, pattern: str, *, committed_only: bool = True) -> dict[Partition, int]:
    """The end offset of every partition of the topics `pattern` matches, asked once (`committed_only`: as
    `kafka_clients.consumer`'s). `helix-es lag` compares them with the views' checkpoints."""
    async with clients.admin_session(bootstrap_servers) as admin:
        wanted = re.compile(pattern)
        topics = sorted(t for t in await admin.list_topics() if wanted.match(t))
        described = await admin.describe_topics(topics) if topics else []
    tps = [
        TopicPartition(d["topic"], p["partition"]) for d in described if d["error_code"] == 0 for p in d["partitions"]
    ]
    if not tps:
        return {}
    consumer = clients.consumer(bootstrap_servers, from_start=False, committed_only=committed_only)
    await consumer.start()
    try:
        await track(consumer, {tp.topic for tp in tps})
        return {Partition(*tp): end for tp, end in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()


class KeyPartitioner:
    """aiokafka's default partitioner (murmur2 of the key, as Java's), each key's hash kept: a session's
    key comes back with every add, and the pure-Python murmur2 is a tenth of a `send`."""

    def __init__(self, keep: int = 100_000) -> None:
        self.keep = keep
        self._hashes: dict[bytes, int] = {}

    def __call__(self, key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        if key is None:
            return int(DefaultPartitioner()(key, all_partitions, available))
        hashed = self._hashes.get(key)
        if hashed is None:
            if len(self._hashes) >= self.keep:
                self._hashes.clear()
            hashed = self._hashes[key] = murmur2(key) & 0x7FFFFFFF
        return all_partitions[hashed % len(all_partitions)]


class KafkaLog:
    def __init__(
        self,
        bootstrap_servers: str,
        *,
        topic_prefix: str = names.DEFAULT_TOPIC_PREFIX,
        partitions: int = 6,
        replication_factor: int = 1,
        min_insync_replicas: int | None = None,
        codec: Codec | None = None,
        producer_config: dict[str, Any] | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic_prefix = topic_prefix
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.min_insync_replicas = min_insync_replicas  # None: default_min_insync(replication_factor)
        self.codec = codec or Codec()
        self._producer_config = producer_config or {}
        self._producer: Producer | None = None
        self._admin: Admin | None = None
        self._ends: Consumer | None = None  # asks partitions' end offsets
        self._topics: set[str] = set()
        self._topic_of: dict[str, str] = {}  # namespace -> its topic, once it exists
        self._topic_lock = asyncio.Lock()
        self._start_lock = asyncio.Lock()
        self._unclaimed = Unclaimed()
        self._stopping: set[asyncio.Future[None]] = set()  # producers retired, still flushing
        self.replaced = 0  # producers retired as broken
        self._uses: KafkaUses | None = None

    async def _started(self) -> Producer:
        if self._producer is None:
            async with self._start_lock:
                if self._producer is None:
                    producer = clients.producer(
                        self.bootstrap_servers,
                        linger_ms=0,
                        max_request_size=MAX_EVENT_BYTES + 100_000,
                        # aiokafka keeps one open batch per partition and makes `send` wait while it is
                        # full: at 16 KiB (its default) many concurrent sessions stall on it.
                        **{"max_batch_size": 256 * 1024, "partitioner": KeyPartitioner(), **self._producer_config},
                    )
                    try:
                        await producer.start()
                    except KafkaError as exc:
                        await producer.stop()
                        raise KafkaUnavailable(
                            f"no Kafka broker answers at {self.bootstrap_servers} ({exc}); "
                            "start one (scripts/services up) or set log.bootstrap_servers"
                        ) from exc
                    self._producer = producer
        return self._producer

    async def producer(self) -> Producer:
        """The log's producer, started (side topics send through it too)."""
        return await self._started()

    async def side_topic(self, topic: str, configs: Mapping[str, str]) -> None:
        """Create a one-partition topic beside the namespaces' (its own `configs`), if it is not there."""
        await create_topic(
            await self._admin_client(), topic, 1, self.replication_factor, self.min_insync_replicas, configs
        )

    @property
    def uses(self) -> KafkaUses:
        """Where this process's reads go for forgetting policies run elsewhere (`helix_es.log.kafka_uses`)."""
        if self._uses is None:
            self._uses = KafkaUses(self)
        return self._uses

    async def ensure_topic(self, namespace: str) -> str:
        """Create the namespace's topic on first use (no retention limit)."""
        known = self._topic_of.get(namespace)
        if known is not None:
            return known
        topic = names.topic(namespace, self.topic_prefix)
        if topic in self._topics:
            self._topic_of[namespace] = topic
            return topic
        async with self._topic_lock:
            if topic in self._topics:
                return topic
            await create_topic(
                await self._admin_client(), topic, self.partitions, self.replication_factor, self.min_insync_replicas
            )
            self._topics.add(topic)
        return topic

    async def append(self, event: Event) -> Position:
        data = self.codec.encode(event)
        if len(data) > MAX_EVENT_BYTES:
            raise EventTooLarge("event", f"encodes to {len(data)} bytes, over the {MAX_EVENT_BYTES} limit")
        topic = names.topic(event.namespace, self.topic_prefix)
        sent = self._unclaimed.take(event.event_id)  # a retry after a timeout: the send under way
        producer = None  # the one that sent it, when this call did
        for attempt in range(2):
            if sent is None:
                producer = await self._started()
                topic = await self.ensure_topic(event.namespace)
                try:
                    sent = await producer.send(topic, data, key=event.session_id.encode())
                except KafkaError as exc:  # not queued: nothing was written
                    self._retire(producer, broken=False)
                    raise self._unavailable(topic, exc) from exc
            try:
                meta = await self._unclaimed.wait(event.event_id, sent)
            except BROKEN as exc:
                # The broker refused the batch: nothing was written. This producer's sequence for
                # the partition stays broken (aiokafka#1017): a new producer sends it once more.
                if producer is not None:
                    self._retire(producer)
                if attempt:
                    raise self._unavailable(topic, exc) from exc
                sent = None
                continue
            except KafkaError as exc:
                # The idempotent producer retries in flight without end; it fails a batch only when its
                # partition had no leader for request_timeout_ms, or on a fatal error. A batch failed
                # after a retry may have been written: the caller's retry can write it again, and the
                # event's idempotency key (or id, for audit) tells the two apart. The failed batch
                # had its sequence numbers: the next one on that partition would be refused.
                if producer is not None:
                    self._retire(producer)
                raise self._unavailable(topic, exc) from exc
            return Position(meta.topic, meta.partition, meta.offset)
        raise AssertionError("unreachable")

    async def append_many(self, events: Sequence[Event]) -> list[Position]:
        """Queued one after the other (in order on the session's partition), then awaited together. Each
        event keeps `append`'s retry: a batch refused as broken is sent once more by a new producer, and
        when the call raises, the sends under way or done are kept for a retry of the same events."""
        if not events:
            return []
        data = [self._encoded(e, f"events[{i}]") for i, e in enumerate(events)]  # all checked before any is sent
        if any(e.namespace != events[0].namespace for e in events):
            raise InvalidInput("events", "a batch goes to one namespace's log")
        topic = names.topic(events[0].namespace, self.topic_prefix)
        positions: list[Position | None] = [None] * len(events)
        landed: list[tuple[Event, Any]] = []  # sends done: kept for a retry if the call raises
        todo = list(range(len(events)))
        for attempt in range(2):
            producer, sends = await self._queue([events[i] for i in todo], [data[i] for i in todo])
            waits = [self._unclaimed.wait(events[i].event_id, sent) for i, sent in zip(todo, sends, strict=True)]
            got = await asyncio.gather(*waits, return_exceptions=True)
            broken, failed = [], None
            for i, sent, result in zip(todo, sends, got, strict=True):
                if isinstance(result, BROKEN):
                    broken.append(result)  # nothing written (see `append`)
                elif isinstance(result, BaseException):
                    failed = failed or result
                else:
                    positions[i] = Position(result.topic, result.partition, result.offset)
                    landed.append((events[i], sent))
            if producer is not None and (broken or failed is not None):
                self._retire(producer)
            if broken and failed is None and not attempt:
                todo = [i for i, result in zip(todo, got, strict=True) if isinstance(result, BROKEN)]
                continue
            error = failed if failed is not None else (broken[0] if broken else None)
            if error is not None:
                for event, sent in landed:
                    self._unclaimed.remember(event.event_id, sent)
                if isinstance(error, KafkaError):
                    raise self._unavailable(topic, error) from error
                raise error
            break
        return [p for p in positions if p is not None]

    async def _queue(self, events: Sequence[Event], data: Sequence[bytes]) -> tuple[Producer | None, list[Any]]:
        """Each event's send queued in order (or the one under way from an earlier call): the producer used
        (None if none was), and the sends. A send not queued raises; those queued before it are kept."""
        producer, sends = None, []
        try:
            for event, value in zip(events, data, strict=True):
                sent = self._unclaimed.take(event.event_id)
                if sent is None:
                    producer = await self._started()
                    topic = await self.ensure_topic(event.namespace)
                    try:
                        sent = await producer.send(topic, value, key=event.session_id.encode())
                    except KafkaError as exc:  # not queued: nothing of it was written
                        self._retire(producer, broken=False)
                        raise self._unavailable(topic, exc) from exc
                sends.append(sent)
        except BaseException:
            for event, sent in zip(events, sends, strict=False):
                self._unclaimed.remember(event.event_id, sent)
            raise
        return producer, sends

    def _encoded(self, event: Event, what: str = "event") -> bytes:
        data = self.codec.encode(event)
        if len(data) > MAX_EVENT_BYTES:
            raise EventTooLarge(what, f"encodes to {len(data)} bytes, over the {MAX_EVENT_BYTES} limit")
        return data

    def _retire(self, producer: Producer, *, broken: bool = True) -> None:
        """Stop using `producer` if it cannot send again: its sequence numbers went wrong (`broken`:
        aiokafka does not renumber after a failed batch, so every later batch on that partition gets
        OutOfOrderSequenceNumber, for good), or its sender stopped (it fails every later send then).
        The next append starts a new producer, with a new producer id and fresh sequences."""
        task = getattr(getattr(producer, "_sender", None), "sender_task", None)
        dead = task is not None and task.done()
        stop = producer.stop
        if self._producer is not producer or not (broken or dead):
            return
        self._producer = None
        self.replaced += 1
        # In the background: stopping flushes the batches other appends still wait for.
        stopping = asyncio.ensure_future(stop())
        self._stopping.add(stopping)
        stopping.add_done_callback(self._stopping.discard)

    def _unavailable(self, topic: str, exc: Exception) -> KafkaUnavailable:
        return KafkaUnavailable(
            f"could not append to {topic} at {self.bootstrap_servers}: {exc!r}. The producer already "
            "retried; check the brokers (scripts/services status)."
        )

    async def read(
        self,
        namespace: str,
        *,
        session_id: str | None = None,
        on_bad: OnBad | None = None,
        start: Mapping[int, int] | None = None,
        on_end: OnEnd | None = None,
    ) -> AsyncIterator[Record]:
        """Everything on the topic up to its end when the read starts, partition by partition.

        With `on_bad`, records `Checker` refuses are reported to it and passed over (see `EventLog.read`)."""
        topic = names.topic(namespace, self.topic_prefix)
        check = None if on_bad is None else Checker(self.topic_prefix)
        want = None if session_id is None else session_id.encode()
        consumer = clients.consumer(self.bootstrap_servers)
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in await self.partitions_of(topic)]
            await track(consumer, {topic})  # else end_offsets waits a retry backoff (100 ms) for metadata
            ends = await consumer.end_offsets(tps)
            for tp in tps:
                first = 0 if start is None else max(0, start.get(tp.partition, 0))
                if ends[tp] <= first:
                    if on_end is not None:
                        on_end(tp.partition, first)
                    continue
                consumer.assign([tp])
                if first:
                    consumer.seek(tp, first)
                else:
                    await consumer.seek_to_beginning(tp)
                done = False
                while not done:
                    batch = await consumer.getmany(tp, timeout_ms=1000)
                    for msg in batch.get(tp, []):
                        if msg.offset >= ends[tp]:
                            done = True
                            break
                        # With `on_bad`, a record keyed otherwise that claims this session (or no one)
                        # is judged too: the projector refuses it, and this read reports it.
                        if want is not None and (
                            msg.key != want if check is None else not concerns(want, msg.key, msg.value)
                        ):
                            continue
                        position = Position(topic, tp.partition, msg.offset)
                        if check is None:
                            yield Record(self.codec.decode(msg.value), position)
                            continue
                        try:
                            event = check.use(self.codec.read, msg.value, topic, msg.key)
                        except Exception as exc:  # what the projector dead-letters, the reader skips
                            assert on_bad is not None
                            on_bad(skipped(position, exc, msg.value, msg.key))
                            continue
                        yield Record(event, position)
                    if await consumer.position(tp) >= ends[tp]:
                        done = True
                if on_end is not None:
                    on_end(tp.partition, ends[tp])
        finally:
            await consumer.stop()

    async def _admin_client(self) -> Admin:
        if self._admin is None:
            admin = clients.admin(self.bootstrap_servers)
            try:
                await admin.start()
            except BaseException:
                await admin.close()
                raise
            self._admin = admin
        return self._admin

    async def partitions_of(self, topic: str) -> list[int]:
        """The topic's partitions; none if it does not exist."""
        try:
            (described,) = await (await self._admin_client()).describe_topics([topic])
        except KafkaError as exc:
            raise KafkaUnavailable(f"could not describe {topic} at {self.bootstrap_servers}: {exc!r}") from exc
        if described["error_code"] != 0:
            return []
        return sorted(p["partition"] for p in described["partitions"])

    async def ends(self, namespace: str) -> dict[int, int]:
        topic = names.topic(namespace, self.topic_prefix)
        try:
            tps = [TopicPartition(topic, p) for p in await self.partitions_of(topic)]
            if not tps:
                return {}
            if self._ends is None:
                consumer = clients.consumer(self.bootstrap_servers, from_start=False)
                try:
                    await consumer.start()
                except BaseException:
                    await consumer.stop()
                    raise
                self._ends = consumer
            await track(self._ends, {topic})
            return {tp.partition: end for tp, end in (await self._ends.end_offsets(tps)).items()}
        except KafkaError as exc:
            raise KafkaUnavailable(f"could not read where {topic} ends at {self.bootstrap_servers}: {exc!r}") from exc

    def partition(self, session_id: str, partitions: int) -> int:
        return int(murmur2(session_id.encode()) & 0x7FFFFFFF) % partitions  # as KeyPartitioner's

    async def namespaces(self) -> list[str]:
        prefix = self.topic_prefix + "."
        try:
            topics = await (await self._admin_client()).list_topics()
        except KafkaError as exc:  # a listing asked while the brokers are down: retry later, not a crash
            raise KafkaUnavailable(f"could not list the topics at {self.bootstrap_servers}: {exc!r}") from exc
        return sorted(names.namespace_of(t, self.topic_prefix) for t in topics if t.startswith(prefix))

    async def close(self) -> None:
        if self._uses is not None:
            await self._uses.close()  # what reads returned goes out with the producer still up
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
        await asyncio.gather(*self._stopping, return_exceptions=True)
        if self._ends is not None:
            await self._ends.stop()
            self._ends = None
        if self._admin is not None:
            await self._admin.close()
            self._admin = None

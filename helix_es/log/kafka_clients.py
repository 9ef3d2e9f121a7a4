"""Every Kafka client helix-es makes: consumers, producers, admin and metadata clients, built here.

The rest of helix-es never imports aiokafka: it asks this module for clients and uses the names it
passes on (`TopicPartition`, `RebalanceListener`); outside the log layer, partitions and records are
the log's own (`helix_es.log.port`). No consumer commits offsets: the
views' checkpoints say where reading resumes. A site's own tuning (fetch sizes and waits, group
membership, producer batching) is passed as the client's keyword options.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection
from typing import Any, TypeAlias

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient
from aiokafka.consumer.subscription_state import ManualSubscription, TopicPartitionState
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

__all__ = [
    "CLIENT_LOGGER",
    "Admin",
    "Consumer",
    "MetadataClient",
    "Producer",
    "RebalanceListener",
    "TopicPartition",
    "add_partitions",
    "admin",
    "admin_session",
    "consumer",
    "fold_consumer",
    "metadata_client",
    "producer",
]

# aiokafka is untyped: these name what a client is, for annotations outside the log layer.
Consumer: TypeAlias = AIOKafkaConsumer
Producer: TypeAlias = AIOKafkaProducer
Admin: TypeAlias = AIOKafkaAdminClient
MetadataClient: TypeAlias = AIOKafkaClient
RebalanceListener: TypeAlias = ConsumerRebalanceListener  # a group member's hooks: subclass it

CLIENT_LOGGER = "aiokafka"  # the logger the clients write to (the CLI keeps it to warnings)
FOLD_METADATA_AGE_MS = 30_000  # leaders are looked up again at once on a fetch error anyway
FOLD_FETCH_BYTES = 4 * 1024 * 1024  # per partition and fetch


def consumer(
    bootstrap_servers: str, *, from_start: bool = True, committed_only: bool = True, **options: Any
) -> Consumer:
    """A consumer that commits no offsets. `from_start`: a partition without a position is read from where
    the log begins (else from its end); `committed_only`: read_committed (else read_uncommitted, the
    client's default). A group's partitions are dealt round robin (the client's default too)."""
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        enable_auto_commit=False,
        auto_offset_reset="earliest" if from_start else "latest",
        isolation_level="read_committed" if committed_only else "read_uncommitted",
        partition_assignment_strategy=(RoundRobinPartitionAssignor,),
        **options,
    )


def fold_consumer(bootstrap_servers: str, fetch_max_wait_ms: int) -> Consumer:
    """A projector's consumer of partitions assigned by hand, read from the views' checkpoints."""
    return consumer(
        bootstrap_servers,
        metadata_max_age_ms=FOLD_METADATA_AGE_MS,
        max_partition_fetch_bytes=FOLD_FETCH_BYTES,
        fetch_max_wait_ms=fetch_max_wait_ms,
    )


def add_partitions(consumer: Consumer, partitions: Collection[TopicPartition]) -> None:
    """Add `partitions` to a consumer's assignment made by hand, the others' fetch state kept (seek the new ones).

    aiokafka's `assign` replaces the whole assignment: the fetch in flight is cancelled and what was
    fetched but not taken is dropped, for every partition, and each needs a seek. A projector adds a
    new namespace's partitions about once a second, so they join the assignment in place. This reaches
    into the client's state (aiokafka 0.11-0.14, the versions pyproject allows; tests/test_kafka_clients.py
    fails on one where it no longer holds).
    """
    subscription = consumer._subscription.subscription
    assignment = getattr(subscription, "assignment", None)
    if not isinstance(subscription, ManualSubscription) or assignment is None or not assignment.active:
        raise ValueError("add_partitions needs an assignment made by hand (assign)")
    new = frozenset(partitions) - assignment.tps
    if new:
        assignment._topic_partitions = assignment._topic_partitions | new
        for tp in new:
            assignment._tp_state[tp] = TopicPartitionState(assignment)
        subscription._topics = subscription._topics | {tp.topic for tp in new}
        consumer._client.set_topics(list(subscription._topics))  # the new topics' leaders


def producer(bootstrap_servers: str, **options: Any) -> Producer:
    """An idempotent producer whose sends wait for every replica in sync (acks=all)."""
    return AIOKafkaProducer(bootstrap_servers=bootstrap_servers, acks="all", enable_idempotence=True, **options)


def admin(bootstrap_servers: str) -> Admin:
    """An admin client, not started."""
    return AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)


@contextlib.asynccontextmanager
async def admin_session(bootstrap_servers: str) -> AsyncIterator[Admin]:
    """An admin client started for a few requests, and closed after them."""
    client = admin(bootstrap_servers)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def metadata_client(bootstrap_servers: str) -> MetadataClient:
    """A bare client, bootstrapped, for the cluster's metadata (`fetch_all_metadata`) on connections of its own."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap_servers)
    await client.bootstrap()
    return client

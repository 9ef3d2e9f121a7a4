"""Partitions added to a consumer's hand-made assignment in place: the others keep their positions and pauses."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from helix_es.log import kafka_clients as clients
from helix_es.log.kafka_clients import TopicPartition
from tests.conftest import unique


async def _records(consumer: clients.Consumer, want: int, within: float = 15.0) -> list[tuple[TopicPartition, bytes]]:
    got: list[tuple[TopicPartition, bytes]] = []
    deadline = asyncio.get_running_loop().time() + within
    while len(got) < want and asyncio.get_running_loop().time() < deadline:
        for tp, records in (await consumer.getmany(timeout_ms=200)).items():
            got += [(tp, r.value) for r in records]
    return got


async def test_added_partitions_are_fetched_and_the_others_keep_their_positions_and_pauses(
    kafka_bootstrap: str,
) -> None:
    one, two = unique("add-a"), unique("add-b")
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(one, 2, 1), NewTopic(two, 1, 1)])
    finally:
        await admin.close()
    a, paused, b = TopicPartition(one, 0), TopicPartition(one, 1), TopicPartition(two, 0)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    consumer = clients.fold_consumer(kafka_bootstrap, 50)
    await consumer.start()
    try:
        for value, tp in ((b"a0", a), (b"a1", a), (b"p0", paused)):
            await producer.send_and_wait(tp.topic, value, partition=tp.partition)
        consumer.assign([a, paused])
        consumer.seek(a, 0)
        consumer.seek(paused, 0)
        consumer.pause(paused)
        assert await _records(consumer, 2) == [(a, b"a0"), (a, b"a1")]
        before = consumer._subscription.subscription.assignment

        await producer.send_and_wait(two, b"b0", partition=0)
        clients.add_partitions(consumer, [b, a])  # a is there already: left as it is
        consumer.seek(b, 0)
        assert consumer.assignment() == {a, paused, b}
        assert consumer._subscription.subscription.assignment is before  # not a new assignment
        # a is not read again from the start, the paused one stays paused, b is read.
        assert await _records(consumer, 2, within=3) == [(b, b"b0")]
        await producer.send_and_wait(one, b"a2", partition=0)
        assert await _records(consumer, 1) == [(a, b"a2")]
        consumer.resume(paused)
        assert await _records(consumer, 1) == [(paused, b"p0")]
    finally:
        await consumer.stop()
        await producer.stop()


async def test_adding_to_a_consumer_without_a_hand_made_assignment_is_refused(kafka_bootstrap: str) -> None:
    consumer = clients.fold_consumer(kafka_bootstrap, 50)  # not started: nothing to close
    with pytest.raises(ValueError, match="assignment made by hand"):
        clients.add_partitions(consumer, [TopicPartition(unique("none"), 0)])

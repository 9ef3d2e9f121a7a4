"""Dead letters on Kafka: records a projector cannot use are parked, with the error and their source.

A record lands here when `helix_es.log.check.Checker` refuses it: no schema in `schemas/` decodes
it, or it breaks the rules a helix-es writer keeps (a message that fails validation, an envelope
naming another namespace than its topic, a key that is not its session id). The rules live in the
library because rebuild, audit and forget skip the same records. Each view parks its own copy
(header `helix.view`), on `helix.dlq.<namespace>` (`<prefix>-dlq.<namespace>` for another prefix).
"""

from __future__ import annotations

import logging

from helix_es.log import kafka_clients as clients
from helix_es.log.kafka import create_topic
from helix_es.log.kafka_clients import Producer
from helix_es.log.port import RawRecord
from helix_es.model import names

log = logging.getLogger(__name__)


class DeadLetters:
    """Parks records on the dead-letter topic of their namespace, creating it on first use."""

    def __init__(self, bootstrap_servers: str, prefix: str = names.DEFAULT_TOPIC_PREFIX) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.prefix = prefix
        self._producer: Producer | None = None
        self._topics: set[str] = set()

    async def park(self, record: RawRecord, error: Exception, view: str) -> str:
        source = f"{record.topic}:{record.partition}:{record.offset}"
        topic = await self._send(
            record.topic, record.value, record.key, source, view, f"{type(error).__name__}: {error}"
        )
        log.error(
            "%s: %s[%d]@%d cannot be used (%s); parked on %s",
            view,
            record.topic,
            record.partition,
            record.offset,
            error,
            topic,
        )
        return topic

    async def park_note(
        self, from_topic: str, key: bytes | None, note: bytes, source: str, view: str, error: str
    ) -> str:
        """Park what a worker could not do (a JSON `note`: an extraction that failed, naming its turns)."""
        topic = await self._send(from_topic, note, key, source, view, error)
        log.error("%s: %s could not be done (%s); parked on %s", view, source, error, topic)
        return topic

    async def _send(
        self, from_topic: str, value: bytes | None, key: bytes | None, source: str, view: str, error: str
    ) -> str:
        topic = names.dlq_topic(names.namespace_of(from_topic, self.prefix), self.prefix)
        if self._producer is None:
            self._producer = clients.producer(self.bootstrap_servers)
            await self._producer.start()
        if topic not in self._topics:
            async with clients.admin_session(self.bootstrap_servers) as admin:
                # As many replicas as the topic it came from: on a cluster it outlives a broker too.
                (described,) = await admin.describe_topics([from_topic])
                replicas = max((len(p["replicas"]) for p in described["partitions"]), default=1)
                await create_topic(admin, topic, 1, replicas)
            self._topics.add(topic)
        headers = [
            ("helix.source", source.encode()),
            ("helix.view", view.encode()),
            ("helix.error", error.encode()[:1000]),
        ]
        await self._producer.send_and_wait(topic, value, key=key, headers=headers)
        return topic

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

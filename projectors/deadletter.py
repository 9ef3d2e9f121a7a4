"""Dead letters: records a projector cannot use are parked, with the error and their source, and it moves on.

A record lands here when no schema in `schemas/` decodes it, or when it decodes but breaks the
rules a helix-es writer keeps (a message that fails validation, an envelope naming another
namespace than its topic, a key that is not its session id): a foreign producer must not be
able to write into other sessions' views. Each view parks its own copy (header `helix.view`),
on `helix.dlq.<namespace>` (`<prefix>-dlq.<namespace>` for another topic prefix).
"""

from __future__ import annotations

import logging

from aiokafka import AIOKafkaProducer, ConsumerRecord
from aiokafka.admin import AIOKafkaAdminClient

from helix_es.log.kafka import create_topic
from helix_es.model import names
from helix_es.model.errors import InvalidInput
from helix_es.model.events import Event, MessageAdded

log = logging.getLogger(__name__)


class Checker:
    """Raises `InvalidInput` if a decoded event breaks what a helix-es writer guarantees.

    Called on every record a projector or a rebuild reads: each topic's namespace and each session
    id already found valid are remembered (bounded), so a record costs its message's checks."""

    def __init__(self, prefix: str = names.DEFAULT_TOPIC_PREFIX, keep: int = 100_000) -> None:
        self.prefix = prefix
        self.keep = keep
        self._namespaces: dict[str, str] = {}
        self._sessions: set[str] = set()

    def __call__(self, event: Event, topic: str, key: bytes | None) -> None:
        namespace = self._namespaces.get(topic)
        if namespace is None:
            namespace = self._namespaces[topic] = names.namespace_of(topic, self.prefix)
        if event.namespace != namespace:
            raise InvalidInput("namespace", f"the envelope says {event.namespace!r} but the topic is {topic!r}")
        session_id = event.session_id
        if session_id not in self._sessions:
            names.check_session_id(session_id)
            if len(self._sessions) >= self.keep:
                self._sessions.clear()
            self._sessions.add(session_id)
        if key != session_id.encode():
            raise InvalidInput("key", f"the record key {key!r} is not the session id {session_id!r}")
        if isinstance(event.payload, MessageAdded):
            event.payload.message.check()  # decoded without checks: apply Message()'s rules


class DeadLetters:
    """Parks records on the dead-letter topic of their namespace, creating it on first use."""

    def __init__(self, bootstrap_servers: str, prefix: str = names.DEFAULT_TOPIC_PREFIX) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.prefix = prefix
        self._producer: AIOKafkaProducer | None = None
        self._topics: set[str] = set()

    async def park(self, record: ConsumerRecord[bytes, bytes], error: Exception, view: str) -> str:
        topic = names.dlq_topic(names.namespace_of(record.topic, self.prefix), self.prefix)
        if self._producer is None:
            self._producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap_servers, acks="all", enable_idempotence=True
            )
            await self._producer.start()
        if topic not in self._topics:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers)
            await admin.start()
            try:
                await create_topic(admin, topic, 1, 1)
            finally:
                await admin.close()
            self._topics.add(topic)
        headers = [
            ("helix.source", f"{record.topic}:{record.partition}:{record.offset}".encode()),
            ("helix.view", view.encode()),
            ("helix.error", f"{type(error).__name__}: {error}".encode()[:1000]),
        ]
        await self._producer.send_and_wait(topic, record.value, key=record.key, headers=headers)
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

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

"""The forgetting policy worker on Kafka: `helix-es project` runs it beside each view with `forget:`.

A namespace's policy is applied by one process: the one whose projector holds the namespace's
partition 0 in the view's consumer group, so a budget counts every partition and no two processes
record the same forgetting. It reads the namespace's log into a `PolicyIndex` (from where it read
last), and every `every` seconds appends the `MemoryForgotten` events the policy decides; the
projectors fold them like any event. Reads by clients in other processes are not on the log: the
clients send what they returned to the namespace's uses topic (`helix_es.log.kafka_uses`), read
here before each round (from its start on a restart). A facts view's policy reads the facts from
the view the projector keeps (a fact is a fold of many events, not one).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from datetime import UTC, datetime
from typing import cast

from helix_es.config import LogConfig, MemoryConfig
from helix_es.log.check import Skipped
from helix_es.log.kafka import KafkaLog
from helix_es.model import names
from helix_es.model.events import Event
from helix_es.model.facts import make_facts_ask
from helix_es.model.forget_events import Use
from helix_es.projection.forgetting import FactsPolicy, PolicyIndex, forgotten_items
from helix_es.projection.protocol import Knower
from helix_es.views.base import View
from helix_es.views.facts import Facts
from projectors.follow import TargetFollower

log = logging.getLogger("helix_es.project")


class Forgetter:
    """The policy worker of one view, for the namespaces whose partition 0 its projector holds."""

    def __init__(self, part: MemoryConfig, follower: TargetFollower, log_config: LogConfig) -> None:
        assert part.forget is not None
        self.part, self.policy, self.follower = part, part.forget, follower
        self.prefix = log_config.topic_prefix
        self.log = KafkaLog(log_config.bootstrap_servers, topic_prefix=self.prefix)
        self.views = tuple(p.view.name for p in part.parts)
        self.forgotten = 0  # items this process's rounds forgot
        self._indexes: dict[str, PolicyIndex] = {}
        self._facts: dict[str, FactsPolicy] = {}
        self._ends: dict[str, dict[int, int]] = {}
        self._uses_from: dict[str, int] = {}  # namespace -> the next offset of its uses topic

    def _leading(self) -> list[str]:
        projector = self.follower.projector
        held = projector.progress.assigned if projector is not None else ()
        return sorted({names.namespace_of(tp.topic, self.prefix) for tp in held if tp.partition == 0})

    async def round(self, now: datetime | None = None) -> int:
        """Apply the policy in every namespace this process leads; the items forgotten."""
        count = 0
        for namespace in self._leading():
            events = await self._decide(namespace, now or datetime.now(UTC))
            if events:
                await self.log.append_many(events)
                count += sum(forgotten_items(e) for e in events)
        self.forgotten += count
        return count

    async def _decide(self, namespace: str, now: datetime) -> list[Event]:
        if isinstance(self.part.view, Facts):  # a facts view's items are read from the view itself
            policy = self._facts.get(namespace)
            if policy is None:
                policy = self._facts[namespace] = FactsPolicy(namespace, self.part.view.name, self.policy)
            projection = self.follower.projection
            facts = await cast(Knower, projection).facts(namespace, make_facts_ask()) if projection else None
            for use in await self._uses(namespace):
                policy.used(_when(use), use.facts)
            return policy.due(facts or [], now)
        index = self._indexes.get(namespace)
        if index is None:
            whole = isinstance(self.part.view, View)
            index = self._indexes[namespace] = PolicyIndex(namespace, self.views, self.policy, whole_sessions=whole)
        ends = self._ends.setdefault(namespace, {})
        async for record in self.log.read(namespace, on_bad=_passed_over, start=dict(ends), on_end=ends.__setitem__):
            index.note(record)
        for use in await self._uses(namespace):  # after the log: the items they name are in the index
            index.used(_when(use), use.session_id, messages=use.messages, whole=use.whole)
        return await index.adue(now)

    async def _uses(self, namespace: str) -> list[Use]:
        """What clients' reads of this view returned since the last round (`helix_es.log.kafka_uses`)."""
        found, self._uses_from[namespace] = await self.log.uses.read(namespace, self._uses_from.get(namespace, 0))
        mine = {v.partition("@")[0] for v in self.views}
        return [u for u in found if u.view in mine]  # the folds this process runs go on between its steps

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                waiter = asyncio.ensure_future(stop.wait())
                try:
                    await asyncio.wait({waiter}, timeout=self.policy.every)
                finally:
                    waiter.cancel()
                if stop.is_set():
                    break
                try:
                    await self.round()
                except Exception as exc:  # a broker hiccup: the next round reads on and decides again
                    log.warning("forgetting for view %s failed: %s", self.part.view.name, exc)
        finally:
            await self.log.close()


def _when(use: Use) -> datetime:
    return datetime.fromtimestamp(use.at / 1e6, UTC)


def _passed_over(bad: Skipped) -> None:
    """A record the projectors dead-letter holds no item: the policy passes over it too."""


def forgetters(parts: Collection[tuple[MemoryConfig, TargetFollower]], log_config: LogConfig) -> list[Forgetter]:
    """A `Forgetter` for every served view with a forgetting policy."""
    return [Forgetter(part, follower, log_config) for part, follower in parts if part.forget is not None]

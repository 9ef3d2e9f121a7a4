"""Knowledge on a memory: `facts` reads the facts view; people's corrections are events on the log.

`assert_fact`, `retract_fact`, `merge_facts` and `unmerge_facts` each append one event to the
memory's session (its provenance) and return its position; the facts view folds them like any
other event, so a rebuild keeps every correction and no model can undo one.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from helix_es.model.errors import InvalidInput
from helix_es.model.events import FactAsserted, FactRetracted, FactsMerged, FactsUnmerged, Position
from helix_es.model.facts import Fact, FactsAsk, check_fact_text, check_time, make_facts_ask
from helix_es.model.message import check_text
from helix_es.projection.protocol import Knower

MAX_MERGED = 100


class Knowledge:
    """Mixed into `ViewMemory`: it supplies `projection`, `key`, `_read` and `_append`."""

    def _knower(self) -> Knower:
        projection = cast(Any, self).projection
        if not isinstance(projection, Knower):
            raise InvalidInput("memory", f"view {projection.name} holds no facts: facts are served by a facts view")
        return projection

    async def facts(
        self,
        subject: str | None = None,
        predicate: str | None = None,
        as_of: datetime | None = None,
        known_as_of: datetime | None = None,
        history: bool = False,
    ) -> list[Fact]:
        """The facts that held at valid time `as_of` as the memory knew them at `known_as_of` (both
        default to now); `history=True`: every fact of the subject and predicate, superseded and
        retracted ones included."""
        ask = make_facts_ask(subject, predicate, as_of, known_as_of, history)
        self._knower()
        return await self._facts(ask)

    async def _facts(self, ask: FactsAsk) -> list[Fact]:
        me = cast(Any, self)
        found: list[Fact] = await me._read(lambda want: cast(Knower, me.projection).facts(me.namespace, ask, want))
        me.backend.used_facts(me.source.name, me.namespace, [f.id for f in found])
        return found

    async def extract_now(self) -> int:
        """Run the facts view's extraction of this namespace to the end now: the turns covered. On the
        embedded log the worker runs in this process (in the background, by `batch:`); on Kafka it runs
        beside `helix-es project`, and this returns 0 (read `facts` after `helix-es lag` shows no pending turns)."""
        self._knower()
        me = cast(Any, self)
        covered: int = await me.backend.extract(me.namespace)
        return covered

    async def assert_fact(
        self, subject: str, predicate: str, value: str, valid_from: datetime | None = None, *, reason: str | None = None
    ) -> Position:
        """A person states a fact (`FactAsserted`): it outranks what the model drew from earlier turns."""
        self._knower()
        check_text(reason, "reason", optional=True, error=InvalidInput)
        event = FactAsserted(
            check_fact_text(subject, "subject"),
            check_fact_text(predicate, "predicate").casefold().replace(" ", "_"),
            check_fact_text(value, "value"),
            check_time(valid_from, "valid_from"),
            reason,
        )
        return await self._write(event)

    async def retract_fact(self, fact_id: str, reason: str | None = None) -> Position:
        """Take a fact back (`FactRetracted`); the model saying it again from earlier turns cannot revive it."""
        self._knower()
        fact_id = check_fact_text(fact_id, "fact_id")
        if reason is not None:
            check_text(reason, "reason", error=InvalidInput)
        fact = await self._find(fact_id)
        return await self._write(FactRetracted(fact.id, fact.subject, fact.predicate, fact.value, reason))

    async def merge_facts(self, fact_ids: Sequence[str]) -> Position:
        """Record that the facts are one (`FactsMerged`): the first id survives, the others point to it."""
        self._knower()
        if isinstance(fact_ids, str) or not isinstance(fact_ids, Sequence):
            raise InvalidInput("fact_ids", f"must be a list of fact ids, got {fact_ids!r}")
        ids = [check_fact_text(i, f"fact_ids[{n}]") for n, i in enumerate(fact_ids)]
        if len(ids) < 2 or len(set(ids)) != len(ids) or len(ids) > MAX_MERGED:
            raise InvalidInput("fact_ids", f"must be 2-{MAX_MERGED} distinct fact ids, got {len(ids)}")
        for fact_id in ids:
            await self._find(fact_id)
        return await self._write(FactsMerged(tuple(ids)))

    async def unmerge_facts(self, position: Position) -> Position:
        """Undo the merge recorded at `position` (what `merge_facts` returned): `FactsUnmerged`."""
        self._knower()
        if not isinstance(position, Position):
            raise InvalidInput("position", f"must be the Position merge_facts returned, got {position!r}")
        return await self._write(FactsUnmerged(position))

    async def _find(self, fact_id: str) -> Fact:
        every = await self._facts(FactsAsk(history=True))
        for fact in every:
            if fact.id == fact_id:
                return fact
        raise InvalidInput("fact_id", f"no fact {fact_id!r} in this namespace (facts() lists their ids)")

    async def _write(self, payload: FactAsserted | FactRetracted | FactsMerged | FactsUnmerged) -> Position:
        position: Position = await cast(Any, self)._append(payload, None)
        return position

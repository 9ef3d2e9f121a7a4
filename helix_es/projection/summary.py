"""The summary view's projection: the pure fold, plus asking the summariser when the view is live.

Summaries are planned on message counts alone, after every event, as if each summary were
folded the moment it was asked for: a new summary is due when the messages not yet covered
by the newest summary (recorded or still on its way) exceed `max_messages`, and it covers the
oldest half of them. So the summaries asked for are the same whichever way events are
batched, and a batch that replays history with its recorded summaries asks for none. One that
fell due in replayed history and was not recorded by the end of it (the projector was down
when it was added) is asked for when the projection reaches the end of its partition's log
(a projector that stops before then leaves it to the session's next add).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from helix_es.model.events import Event, Record, SummaryRecorded
from helix_es.model.message import Message
from helix_es.projection.fold import Observer, fold_batch
from helix_es.projection.session import SessionProjection
from helix_es.providers.summarise import Summariser
from helix_es.stores.ports import Applied, SessionKey
from helix_es.views.base import State
from helix_es.views.summary import Summary, split


@dataclass
class _Plan:
    epoch: str
    base: int  # covered by the newest summary whose text is known (recorded, or asked before)
    text: str  # that summary's text
    asks: list[tuple[int, tuple[Message, ...]]] = field(default_factory=list)  # (covers after, messages)

    @property
    def covers(self) -> int:
        return self.asks[-1][0] if self.asks else self.base


@dataclass
class SummaryProjection(SessionProjection):
    reentrant: ClassVar[bool] = False  # a batch's plans are kept on the projection until it asks
    summariser: Summariser = field(kw_only=True)
    # The newest summary asked for but not folded yet, per session: (epoch, covers, text).
    _asked: dict[SessionKey, tuple[str, int, str]] = field(default_factory=dict, init=False)
    _plans: dict[SessionKey, _Plan] = field(default_factory=dict, init=False)
    # Summaries that fell due in history replayed after the checkpoint (a restart, a backlog), per
    # topic-partition: asked once a live batch of that partition shows none was recorded meanwhile.
    _owed: dict[tuple[str, int], dict[SessionKey, _Plan]] = field(default_factory=dict, init=False)

    def _planner(self, owed: dict[SessionKey, _Plan]) -> Observer:
        plans: dict[SessionKey, _Plan] = {}
        self._plans = plans
        view = self.view
        assert isinstance(view, Summary)

        def observe(key: SessionKey, state: State) -> None:
            header, recent = split(state)
            plan = plans.get(key)
            if plan is None or plan.epoch != header.epoch:
                plan = plans[key] = self._resumed(key, header.epoch, header.covers, header.text, owed)
            if header.covers > plan.base:  # a recorded summary arrived: plan again from it
                plan.base, plan.text, plan.asks = header.covers, header.text, []
            open_ = recent[plan.covers - header.covers :]
            half = view.oldest_half(open_)
            if half:
                plan.asks.append((plan.covers + half, open_[:half]))

        return observe

    def _resumed(self, key: SessionKey, epoch: str, covers: int, text: str, owed: dict[SessionKey, _Plan]) -> _Plan:
        """Where a session's plan goes on from: summaries owed from an earlier batch, else the newest asked."""
        held = owed.get(key)
        if held is not None and held.epoch == epoch and held.covers > covers:
            return held  # planning afresh from the stored view would cut where one-by-one folding does not
        asked = self._asked.get(key)
        if asked is not None and asked[0] == epoch and asked[1] > covers:
            return _Plan(*asked)
        return _Plan(epoch, covers, text)

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        view = self.view
        assert isinstance(view, Summary)
        if not records:
            return Applied((await fold_batch(view, self.store, records)).applied)
        here = (records[0].position.topic, records[0].position.partition)
        owed = self._owed.setdefault(here, {})
        folded = await fold_batch(view, self.store, records, observer=lambda: self._planner(owed))
        derived: list[Event] = []
        for key, plan in self._plans.items():
            owed.pop(key, None)  # this batch planned the session afresh
            if plan.asks and not live:
                owed[key] = plan  # another projector may have recorded it further on: wait for the end
        if not live:
            return Applied(folded.applied)
        due = {**owed, **{k: p for k, p in self._plans.items() if p.asks}}
        owed.clear()
        for key, plan in due.items():
            text = plan.text
            for covers, messages in plan.asks:
                text = await self.summariser.summarise(text, messages)
                self._asked[key] = (plan.epoch, covers, text)
                event = SummaryRecorded(view.name, plan.epoch, covers, text, self.summariser.model)
                derived.append(Event(key.namespace, key.session_id, event))
        return Applied(folded.applied, tuple(derived))

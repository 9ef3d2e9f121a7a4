"""Compaction on a memory: `compact` records a summary that stands for a session's oldest messages,
`expand` returns what a summary stood for. Mixed into `ViewMemory`.

The summary is recorded (`SessionCompacted`), so every view and every rebuild show the same one
without asking the summariser again; the messages stay on the log, and `expand` reads them back.
With `compact_at_tokens:`, an add that takes the view over that many tokens starts a compaction in
the background (the oldest half goes), so the add itself never waits for a summariser.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

from helix_es.config import MemoryConfig
from helix_es.model.errors import InvalidInput
from helix_es.model.events import Position, Record, SessionCompacted
from helix_es.model.message import Message
from helix_es.model.tokenizers import ESTIMATE
from helix_es.model.tokens import message_tokens
from helix_es.projection import compaction
from helix_es.views.base import View, parse_position

log = logging.getLogger(__name__)
Opener = Callable[[list[Message]], Awaitable[list[Message]]]
Sealer = Callable[[str], Awaitable[str]]
ATTEMPTS = 3  # summaries asked for before a compaction gives up on a session whose window keeps moving
KEEP = 4  # messages `compact()` keeps as they are by default (whole tool exchanges: maybe more)


class Compaction:
    """Mixed into `ViewMemory`: it supplies `backend`, `namespace`, `session_id`, `key`, `config`, `_append`."""

    _compacting: asyncio.Task[None] | None = None

    def _compactable(self) -> MemoryConfig:
        part: MemoryConfig | None = cast(Any, self).config
        view = part.view if part is not None else None
        if part is None or not isinstance(view, View) or not view.compacts or part.summariser is None:
            name = view.name if view is not None else "this memory"
            raise InvalidInput(
                "memory", f"view {name} does not compact: compaction is for conversation and window views"
            )
        return part

    async def _session(self) -> list[Record]:
        me = cast(Any, self)
        return [r async for r in me.backend.log.read(me.namespace, session_id=me.session_id, on_bad=_passed_over)]

    async def compact(self, *, keep: int = KEEP, reason: str = "request") -> Position | None:
        """Record a summary (the view's `summariser:`) standing for all but the newest `keep` messages the
        view holds; its position, or None when there is nothing to compact."""
        return await self._compact(keep, reason)

    async def _compact(
        self, keep: int, reason: str, opened: Opener | None = None, sealed: Sealer | None = None
    ) -> Position | None:
        """`compact`; a middleware that seals content (encryption) passes how to open the messages for the
        summariser and how to seal its summary for the log."""
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise InvalidInput("keep", f"must be a whole number >= 0, got {keep!r}")
        part = self._compactable()
        assert part.summariser is not None
        me = cast(Any, self)
        for _ in range(ATTEMPTS):
            records = await self._session()
            plan = compaction.plan(await compaction.view_of(part, records, me.key), keep, records)
            if plan is None:
                return None
            covered, earlier = plan.messages, plan.summaries
            if opened is not None:
                covered, earlier = await opened(covered), await opened(earlier)
            summary = await part.summariser.summarise("\n".join(m.content for m in earlier), covered)
            if sealed is not None:
                summary = await sealed(summary)
            records = await self._session()  # adds landed while the summariser ran: a window may have evicted
            if compaction.still_oldest(await compaction.view_of(part, records, me.key), records, plan):
                payload = SessionCompacted(
                    part.view.name, summary, plan.first, plan.last, plan.covers, part.summariser.model, reason
                )
                position: Position = await me._append(payload, None)
                return position
        log.warning("compaction of %s gave up: its oldest messages kept moving", me.session_id)
        return None

    async def expand(self, position: Position | str) -> list[Message]:
        """The messages the summary recorded at `position` (a summary message's `compacted` metadata) stood for."""
        self._compactable()
        if isinstance(position, str):
            try:
                position = parse_position(position)
            except ValueError:
                raise InvalidInput(
                    "position", f"must be a compaction's position (topic:partition:offset), got {position!r}"
                ) from None
        if not isinstance(position, Position):
            raise InvalidInput("position", f"must be a Position or its text, got {type(position).__name__}")
        me = cast(Any, self)
        try:
            return await compaction.expand(me.config, await self._session(), position, me.key)
        except LookupError as exc:
            raise InvalidInput("position", str(exc)) from None

    def _after_add(self) -> None:
        """With `compact_at_tokens:`, look in the background whether the view holds more tokens now."""
        part: MemoryConfig | None = cast(Any, self).config
        if part is None or part.compact_at_tokens is None:
            return
        if self._compacting is None or self._compacting.done():
            self._compacting = asyncio.get_running_loop().create_task(
                self._compact_if_over(part, part.compact_at_tokens)
            )

    async def _compact_if_over(self, part: MemoryConfig, threshold: int) -> None:
        try:
            messages: list[Message] = await cast(Any, self).get()
            tokenizer = getattr(part.view, "tokenizer", None) or ESTIMATE
            if sum(message_tokens(m, tokenizer) for m in messages) > threshold:  # the oldest half goes
                await self.compact(keep=len(messages) // 2, reason=f"compact_at_tokens={threshold}")
        except Exception as exc:  # the next add over the threshold tries again
            log.warning("compaction of %s failed: %s", cast(Any, self).session_id, exc)

    async def compacted(self) -> None:
        """Wait for a compaction an add started (`compact_at_tokens:`), if one runs."""
        if self._compacting is not None:
            await asyncio.shield(self._compacting)


def _passed_over(bad: object) -> None:
    """A record the projectors dead-letter folds into no view: compaction passes over it too."""

"""The one read-your-writes wait (`helix_es.client.wait`): every client's reads poll their view through it."""

from __future__ import annotations

import time

import pytest

from helix_es.client.wait import FIRST_POLL, Written, poll
from helix_es.model.errors import ConsistencyTimeout
from helix_es.model.events import Position


async def test_poll_looks_until_an_answer_and_gives_none_after_the_timeout() -> None:
    looks = []

    async def third() -> str | None:
        looks.append(time.monotonic())
        return "seen" if len(looks) == 3 else None

    assert await poll(third, 5.0) == "seen"
    assert len(looks) == 3 and looks[1] - looks[0] >= FIRST_POLL

    async def never() -> None:
        return None

    started = time.monotonic()
    assert await poll(never, 0.05) is None
    assert 0.05 <= time.monotonic() - started < 1.0


class _View:
    name = "v"

    def __init__(self, applied: int) -> None:
        self.applied = applied
        self.asked: list[list[Position]] = []

    async def behind(self, wants: list[Position]) -> Position | None:
        self.asked.append(list(wants))
        return next((w for w in wants if w.offset > self.applied), None)


async def test_written_waits_for_its_writes_and_asks_the_one_behind_first() -> None:
    written = Written("ns", read_timeout=0.05)
    written.wrote(Position("t", 0, 5))
    written.wrote(Position("t", 1, 9))
    view = _View(applied=5)
    with pytest.raises(ConsistencyTimeout, match=r"offset 9 of t\[1\]"):
        await written.wait(view)
    assert view.asked[-1][0] == Position("t", 1, 9)
    view.applied = 9
    await written.wait(view)
    asked = len(view.asked)
    await written.wait(view)  # seen covered: no look again
    assert len(view.asked) == asked

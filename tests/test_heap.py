"""projectors.heap: the long-lived heap frozen out of the collector's passes, garbage never frozen."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from projectors import heap


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_a_round_collects_garbage_cycles_before_freezing_the_rest() -> None:
    try:
        kept = Node()
        gone = cycle()
        heap.settle(1)
        assert gone() is None  # collected, not frozen
        assert gc.get_freeze_count() > 0
        later = cycle()
        heap.settle(2)  # a young cycle: collected though older objects are frozen
        assert later() is None
        frozen = gc.get_freeze_count()
        heap.settle(heap.THAW_EVERY)  # the full round: everything thawed, collected, frozen again
        assert gc.get_freeze_count() <= frozen + 1000
        assert kept.other is None
    finally:
        gc.unfreeze()


async def test_keep_short_runs_rounds_until_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    rounds: list[int] = []
    monkeypatch.setattr(heap, "FIRST_FREEZE_SECONDS", 0.01)
    monkeypatch.setattr(heap, "FREEZE_SECONDS", 0.01)
    monkeypatch.setattr(heap, "settle", rounds.append)
    stop = asyncio.Event()
    task = asyncio.create_task(heap.keep_short(stop))
    while len(rounds) < 3:
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 1)
    assert rounds[:3] == [0, 1, 2]

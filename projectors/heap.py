"""Keep the cyclic garbage collector's full passes short in a long-running projector.

A projector of a thousand namespaces holds a large, long-lived heap (Kafka clients' metadata and
partition state, the views' per-partition state), and CPython's full collection walks all of it:
measured 45-70 ms every few seconds at 1,000 partitions, every busy partition stalled meanwhile,
which made add-to-visible p99 several times p50. So every `FREEZE_SECONDS` the young heap is
collected (cheap: frozen objects are not walked) and what survives is frozen out of later passes
(`gc.freeze`). A frozen object that later becomes part of a garbage cycle would stay, so every
`THAW_EVERY`-th round unfreezes first and collects all of it: one long pass in that many minutes.
"""

from __future__ import annotations

import asyncio
import gc

FREEZE_SECONDS = 60.0
FIRST_FREEZE_SECONDS = 10.0  # after start-up: clients made, partitions dealt
THAW_EVERY = 10


def settle(rounds: int) -> None:
    """One round: collect what is young (or everything, every THAW_EVERY-th), then freeze the rest."""
    if rounds % THAW_EVERY == 0:
        gc.unfreeze()
    gc.collect()
    gc.freeze()


async def keep_short(stop: asyncio.Event) -> None:
    """Run `settle` now and then until `stop` is set."""
    wait = FIRST_FREEZE_SECONDS
    rounds = 0
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), wait)
            return
        except TimeoutError:
            pass
        settle(rounds)
        rounds += 1
        wait = FREEZE_SECONDS

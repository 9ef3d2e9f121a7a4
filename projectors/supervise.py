"""Supervision: which failures waiting cures, and projectors started again after them.

The loop (`projectors.runner`) retries a write that failed transiently for as long as it takes;
a transient failure anywhere else ends a projector's run, and `supervise` starts it again after
a backoff (0.5 s doubling to 30 s). `helix-es project` does not exit for an outage, only for a
fault that waiting does not cure: `run_projectors` then stops every view.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Protocol, TypeVar

from helix_es.log import kafka_errors
from helix_es.projection.protocol import Projection
from helix_es.stores import registry
from helix_es.stores.ports import StaleWrite

log = logging.getLogger(__name__)

RESTART_FIRST = 0.5  # seconds before a projector stopped by an outage starts again; doubles up to RESTART_MAX
RESTART_MAX = 30.0

_TRANSIENT: tuple[type[BaseException], ...] = (
    OSError,  # refused, reset, unreachable: ConnectionError and socket timeouts are OSErrors
    TimeoutError,
    StaleWrite,  # another projector kept winning the session guards: reload and try again
)


_LOCAL_OS_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


def transient(exc: BaseException) -> bool:
    """A failure that waiting cures: a store or broker that is down, restarting or busy."""
    for cause in (exc, exc.__cause__):
        if isinstance(cause, _LOCAL_OS_ERRORS):
            return False
        if isinstance(cause, _TRANSIENT):
            return True
        if cause is not None and kafka_errors.transient(cause):  # the brokers away, or a retriable error
            return True
        if cause is not None and registry.transient(cause):  # a store's service away, restarting or busy
            return True
    return False


class Restarts(Protocol):
    """What a run reports (`projectors.runner.Progress`): here, how often it was started again."""

    restarts: int


P = TypeVar("P", bound=Restarts)


class Runnable(Protocol[P]):
    """A `Projector`, or what runs one (`projectors.follow.TargetFollower`)."""

    projection: Projection
    progress: P

    async def run(self, stop: asyncio.Event) -> P: ...


async def supervise(projector: Runnable[P], stop: asyncio.Event) -> P:
    """Run `projector` until `stop`; a transient failure starts it again after a backoff, any other raises."""
    loop = asyncio.get_running_loop()
    delay = RESTART_FIRST
    while True:
        started = loop.time()
        try:
            return await projector.run(stop)
        except Exception as exc:
            if stop.is_set() or not transient(exc):
                raise
            if loop.time() - started > 4 * RESTART_MAX:
                delay = RESTART_FIRST  # it ran a good while: a new outage starts the backoff afresh
            projector.progress.restarts += 1
            log.warning(
                "%s: stopped by %s: %s; starting again in %.1fs",
                projector.projection.name,
                type(exc).__name__,
                exc,
                delay,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            if stop.is_set():
                return projector.progress
            delay = min(delay * 2, RESTART_MAX)


async def run_projectors(projectors: Sequence[Runnable[P]], stop: asyncio.Event) -> list[P]:
    """Run several views side by side until `stop`, each restarted after outages; a fault stops them all."""
    tasks = [asyncio.create_task(supervise(p, stop)) for p in projectors]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise

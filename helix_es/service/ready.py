"""Readiness: the log and every view's store answer, and the projectors keep up.

The log is asked which namespaces it holds; each view's store for a checkpoint (one round trip
each, `timeout` seconds at most). The projectors' lag comes from a function the command line
passes in (`helix-es serve` takes it from the projectors' own lag report; the library never
imports the projectors); it is cached for `LAG_CACHE` seconds, as scrapes and probes come often.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from helix_es.config import Config, MemoryConfig
from helix_es.log.port import EventLog
from helix_es.model import names
from helix_es.projection.factory import open_log, open_projection
from helix_es.projection.protocol import Projection

LagFn = Callable[[], Awaitable[dict[str, int]]]  # view name -> records of the log it has not applied
LAG_CACHE = 2.0


class Readiness:
    def __init__(
        self, config: Config, lag: LagFn | None = None, lag_bound: int | None = None, timeout: float = 3.0
    ) -> None:
        self.config = config
        self.lag_fn = lag
        self.lag_bound = lag_bound
        self.timeout = timeout
        ns = config.memory.namespace
        self._topic = names.topic_name(ns if not names.is_pattern(ns) else "readyz", config.log.topic_prefix)
        self._log: EventLog | None = None
        self._probes: dict[int, Projection] = {}
        self._lag: tuple[float, dict[str, int]] | None = None

    async def lag(self) -> dict[str, int] | None:
        """Each view's lag (cached briefly), None without a lag function; raises if it cannot be read."""
        if self.lag_fn is None:
            return None
        if self._lag is None or time.monotonic() - self._lag[0] > LAG_CACHE:
            self._lag = (time.monotonic(), await asyncio.wait_for(self.lag_fn(), self.timeout * 3))
        return self._lag[1]

    async def check(self) -> tuple[bool, dict[str, Any]]:
        """Whether the server is ready, and what each check found."""
        report: dict[str, Any] = {"log": await self._ask(self._log_answers())}
        report["stores"] = {
            part.view.name: await self._ask(self._store_answers(i, part))
            for i, part in enumerate(self.config.memory.parts)
        }
        ready = report["log"] == "ok" and all(v == "ok" for v in report["stores"].values())
        if self.lag_fn is not None:
            try:
                lag = await self.lag()
            except Exception as exc:
                report["lag"], ready = f"unknown: {type(exc).__name__}: {exc}", False
            else:
                report["lag"] = lag
                if self.lag_bound is not None and lag is not None:
                    report["lag_bound"] = self.lag_bound
                    over = sorted(v for v, n in lag.items() if n > self.lag_bound)
                    if over:
                        report["behind"], ready = over, False
        return ready, report

    async def _ask(self, probe: Awaitable[None]) -> str:
        try:
            await asyncio.wait_for(probe, self.timeout)
        except TimeoutError:
            return f"no answer in {self.timeout}s"
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return "ok"

    async def _log_answers(self) -> None:
        if self._log is None:
            self._log = open_log(self.config.log)
        await self._log.namespaces()

    async def _store_answers(self, i: int, part: MemoryConfig) -> None:
        probe = self._probes.get(i)
        if probe is None:
            probe = self._probes[i] = open_projection(part)
        await probe.checkpoint(self._topic, 0)

    async def close(self) -> None:
        probes, self._probes = list(self._probes.values()), {}
        for probe in probes:
            await probe.close()
        if self._log is not None:
            await self._log.close()
            self._log = None

"""A rebuild's progress on stderr: a bar on a terminal (events done, events/s, remaining lag, ETA), else lines."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from projectors.rebuild.status import Status


class Display:
    """Progress on `stream`: a bar redrawn in place on a terminal, else a plain line every `interval` s."""

    def __init__(self, stream: TextIO | None = None, *, interval: float = 5.0, tty: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval = 0.2 if self.tty else interval
        self._next = 0.0
        self._drawn = False
        self._phase = ""

    def __call__(self, status: Status, *, force: bool = False) -> None:
        now = time.monotonic()
        moved = status.phase != self._phase  # a new phase is always shown, on a line of its own
        if not force and not moved and now < self._next:
            return
        self._next = now + self.interval
        if self.tty:
            if moved and self._drawn:
                self.stream.write("\n")
            self.stream.write("\r" + self.bar(status).ljust(118)[:118])
            self._drawn = True
        else:
            self.stream.write(self.line(status) + "\n")
        self._phase = status.phase
        self.stream.flush()

    def finish(self) -> None:
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    @staticmethod
    def bar(status: Status, width: int = 24) -> str:
        total = status.read + status.lag
        frac = status.read / total if total else 1.0
        filled = round(frac * width)
        rate = status.rate
        eta = f"{status.lag / rate:,.0f}s" if rate > 0 and status.lag else "-"
        return (
            f"{status.target} [{'#' * filled}{'.' * (width - filled)}] {frac:4.0%} {status.phase}  "
            f"{status.read:,} events  {rate:,.0f}/s  lag {status.lag:,}  eta {eta}"
        )

    @staticmethod
    def line(status: Status) -> str:
        return (
            f"rebuild {status.view} -> {status.target}: {status.phase}, {status.read} read, {status.events} "
            f"folded, {status.skipped} skipped, {status.rate:.0f} events/s, lag {status.lag}"
        )

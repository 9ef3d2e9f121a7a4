"""What a rebuild shows while it runs (`Status`) and what it reports when done."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from helix_es.model.errors import HelixError


class RebuildError(HelixError):
    """The rebuild could not finish as asked (the alias moved meanwhile, a target in use, ...)."""


@dataclass
class Status:
    view: str
    target: str
    phase: str = "starting"  # building | built | switching | handover
    read: int = 0  # records read from the log
    events: int = 0  # events folded into the target
    skipped: int = 0  # records a projector would dead-letter (undecodable or invalid)
    lag: int = 0  # records between what was read and the log's end, as last seen
    started: float = field(default_factory=time.monotonic)

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    @property
    def rate(self) -> float:
        return self.read / self.seconds if self.seconds > 0 else 0.0


@dataclass
class RebuildReport:
    """What `rebuild` did; `--json` prints it."""

    view: str
    store: str
    old_target: str
    target: str
    events: int  # folded into the target (records at or below a resumed target's checkpoint not counted)
    read: int  # records read from the log
    skipped: int  # undecodable or invalid records, skipped as the projector dead-letters them
    seconds: float
    events_per_second: float  # records read per second, build phase
    namespaces: int
    switched: bool
    handed_over: bool | None  # a projector service announced the new target (None: not waited for)
    dropped: list[str] = field(default_factory=list)
    workers: int = 0  # processes that shared the partitions out (0: this one alone)
    # --group: the most processes in the target's group at once, this one included (0: no group). `read`
    # then counts every member's records (from the target's checkpoints); `events`, `skipped` this one's.
    members: int = 0
    extracted: dict[str, Any] | None = None  # --re-extract: calls, prompt tokens, facts (dry: what it would cost)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


ProgressCallback = Callable[[Status], None]


@dataclass
class DropReport:
    """What `drop` did; `--drop NAME --json` prints it."""

    view: str
    store: str
    dropped: str
    namespaces: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

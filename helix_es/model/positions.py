"""Where an event sits on the log."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """Where an event sits on the log: Kafka's (topic, partition, offset)."""

    topic: str
    partition: int
    offset: int

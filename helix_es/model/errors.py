"""Every error helix-es raises on purpose; each one says what is wrong and what to do."""

from __future__ import annotations


class HelixError(Exception):
    """Base class of helix-es errors."""


class InvalidInput(HelixError, ValueError):
    """Input that is rejected before anything is written. `field` names the culprit."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class InvalidMessage(InvalidInput):
    """A `Message` field is invalid; nothing was written."""


class ConfigError(InvalidInput):
    """A configuration key is missing or has a bad value; `field` is its path (`memory.window_size`)."""


class EventTooLarge(InvalidInput):
    """The encoded event exceeds the log's limit; nothing was written."""


class LogCorrupted(HelixError):
    """An embedded log file is damaged before its tail; it is never skipped silently."""


class UnknownSchema(HelixError):
    """An event was written with a schema whose fingerprint is not in `schemas/`."""


class ConsistencyTimeout(HelixError, TimeoutError):
    """A read-your-writes read waited longer than `read_timeout` for its view to catch up."""

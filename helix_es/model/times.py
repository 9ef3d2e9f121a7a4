"""Times and durations people give: ISO-8601 (naive means UTC), `now`, a time ago (`-10m`, `2d ago`),
and Go durations for `ttl`."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

from helix_es.model.errors import ConfigError, InvalidInput


def utc(at: datetime) -> datetime:
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_AGO = re.compile(rf"-\s*((?:{_PART.pattern})+)|((?:{_PART.pattern})+)\s+ago")


def parse_time(value: datetime | str, *, field: str = "as_of", now: datetime | None = None) -> datetime:
    """A moment in UTC from ISO-8601 (naive means UTC), `now`, or relative: `-10m`, `-1h30m`, `2d ago`.

    `InvalidInput` naming `field` for text that is not a time, or a time outside years 1-9999 in UTC."""
    if isinstance(value, datetime):
        return _in_range(value, value, field)
    if not isinstance(value, str):
        raise InvalidInput(field, f"must be a time, got {type(value).__name__}")
    text = value.strip()
    now = utc(now) if now is not None else datetime.now(UTC)
    if text.lower() == "now":
        return now
    ago = _AGO.fullmatch(text.lower())
    if ago:
        spec = ago.group(1) or ago.group(4)
        seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(spec))
        try:
            return now - timedelta(seconds=seconds)
        except OverflowError:  # timedelta past 999,999,999 days, or a moment before year 1
            raise InvalidInput(field, f"{value!r} reaches before year 1: give a shorter time ago") from None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(
            field,
            f"cannot read {value!r} as a time; give ISO-8601 like 2024-05-01T12:00:00Z or 2024-05-01 12:00 "
            "(no zone means UTC), `now`, or a time ago like -10m, -1h30m, 2d ago",
        ) from None
    return _in_range(at, value, field)


def _in_range(at: datetime, value: object, field: str) -> datetime:
    try:
        return utc(at)
    except OverflowError:  # 0001-01-01T00:00+01:00 is in year 0 in UTC, 9999-12-31T23:00-02:00 in 10000
        raise InvalidInput(field, f"{value!r} is outside years 1-9999 in UTC") from None


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION = re.compile(rf"(?:{_DURATION_PART.pattern})+")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_ttl(value: object, where: str) -> float | None:
    """`ttl`: a Go duration as in the seed ("168h", "30m", "45s", "1h30m") or a number of seconds.

    Seconds, or None when absent. Only Redis-stored views expire; other stores ignore it.
    """
    if value is None:
        return None
    if isinstance(value, str) and _DURATION.fullmatch(value.strip()):
        seconds = sum(float(n) * _DURATION_UNITS[unit] for n, unit in _DURATION_PART.findall(value))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ConfigError(where, f"must be a duration (168h, 30m, 45s, 1h30m) or a number of seconds, got {value!r}")
    if not math.isfinite(seconds) or seconds < 0.001:  # Redis expires in whole milliseconds
        raise ConfigError(where, f"must be finite and at least 1ms, got {value!r}")
    return seconds

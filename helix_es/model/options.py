"""Checks of one configuration value each: every error is a `ConfigError` naming the key it is about.

Below every layer that reads options (providers, views, config), so each checks its own keys alike.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from helix_es.model.errors import ConfigError


def only_keys(raw: Mapping[str, Any], known: set[str] | frozenset[str], where: str, what: str = "") -> None:
    """An unknown key is an error naming it (a typo must not be ignored)."""
    unknown = set(raw) - known
    if unknown:
        raise ConfigError(f"{where}.{sorted(unknown)[0]}", f"unknown key of {what or where}; known: {sorted(known)}")


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(where, f"must be a mapping, got {type(value).__name__}")
    return value


def whole_number(options: Mapping[str, Any], key: str, where: str, default: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}.{key}", f"must be a whole number, got {value!r}")
    return value


def seconds(value: Any, where: str) -> float:
    """A positive, finite number of seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(where, f"must be a positive (finite) number of seconds, got {value!r}")
    return float(value)


def text(value: Any, where: str) -> str:
    """A non-empty string (not only blanks)."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(where, f"must be a non-empty string, got {value!r}")
    return value


def url(value: Any, where: str, schemes: tuple[str, ...], env: str) -> str:
    """A URL with one of `schemes`; `env` names the variable it may have come from."""
    origin = f" (from {env})" if os.environ.get(env) else ""
    if not isinstance(value, str) or not value.startswith(tuple(f"{s}://" for s in schemes)):
        want = " or ".join(f"{s}://..." for s in schemes)
        # Never the whole value: it may hold a password.
        got = f"a URL starting {value.partition('://')[0][:20]!r}" if isinstance(value, str) else type(value).__name__
        raise ConfigError(where, f"must be a URL {want}{origin}, got {got}")
    return value

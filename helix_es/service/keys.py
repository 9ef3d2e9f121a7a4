"""API keys (`helix-es serve --keys FILE`): which namespaces each key may use.

The file is one JSON object. Each entry maps a key to the namespaces it may use (names or globs,
`"*"` for all), or to `{"namespaces": [...], "admin": true}` for a key that may also forget
sessions. A key may be written as `"sha256:<64 hex>"` (its SHA-256) so the file holds no secret:

    {"k-3f9a...": ["tenant-a", "tenant-a-*"], "sha256:9f86d0...": {"namespaces": ["*"], "admin": true}}

Only digests are kept in memory. A presented key is hashed and compared with every stored digest
(`hmac.compare_digest`, no early exit), so the time taken does not tell how much of a key matched.
A bad file fails at start, naming the entry (by position and the first characters of its key).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helix_es.model import names
from helix_es.model.errors import ConfigError, InvalidInput

MIN_KEY_LENGTH = 16  # a plain key shorter than this is guessable; give it hashed if it must be short
HASHED = re.compile(r"sha256:([0-9a-fA-F]{64})")

__all__ = ["Grant", "Keys", "load_keys"]


@dataclass(frozen=True)
class Grant:
    """What one key may do: use `namespaces` (names or globs); forget sessions there when `admin`."""

    namespaces: tuple[str, ...]
    admin: bool
    _matcher: re.Pattern[str]

    def allows(self, namespace: str) -> bool:
        return self._matcher.fullmatch(namespace) is not None


class Keys:
    """The keys of one file, as SHA-256 digests."""

    def __init__(self, entries: Sequence[tuple[bytes, Grant]]) -> None:
        self._entries = list(entries)

    def __len__(self) -> int:
        return len(self._entries)

    def grant(self, presented: str) -> Grant | None:
        """The grant of `presented`, or None for an unknown key."""
        digest = hashlib.sha256(presented.encode("utf-8", "surrogateescape")).digest()
        found = None
        for stored, grant in self._entries:
            if hmac.compare_digest(digest, stored):  # every entry is compared, whichever matches
                found = grant
        return found

    @classmethod
    def parse(cls, doc: Any, where: str = "keys") -> Keys:
        if not isinstance(doc, Mapping) or not doc:
            raise ConfigError(where, 'must be a JSON object of keys, e.g. {"<key>": ["ns1", "tenant-*"]}')
        entries: list[tuple[bytes, Grant]] = []
        seen: set[bytes] = set()
        for i, (key, value) in enumerate(doc.items(), 1):
            field = f"{where}: entry {i} ({_shown(key)})"
            digest = _digest(key, field)
            if digest in seen:
                raise ConfigError(field, "repeats a key given earlier (plain or hashed): give each key once")
            seen.add(digest)
            entries.append((digest, _grant(value, field)))
        return cls(entries)


def load_keys(path: str | Path) -> Keys:
    """The keys file at `path`; `ConfigError` naming the file and the bad entry."""
    where = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(where, f"cannot read the keys file: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text, object_pairs_hook=_no_repeats)
    except ValueError as exc:
        raise ConfigError(where, f"is not JSON: {exc}") from None
    return Keys.parse(doc, where)


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {_shown(key)} appears twice")
        out[key] = value
    return out


def _shown(key: object) -> str:
    """Enough of a key to find its entry, not enough to use it."""
    if not isinstance(key, str):
        return repr(key)
    if HASHED.fullmatch(key):
        return key[:15] + "..."
    return f"key starting {key[:4]!r}" if len(key) > 8 else "a short key"


def _digest(key: str, field: str) -> bytes:
    hashed = HASHED.fullmatch(key)
    if hashed:
        return bytes.fromhex(hashed.group(1))
    if key.startswith("sha256:"):
        raise ConfigError(field, "a hashed key is sha256: and 64 hexadecimal digits (sha256sum of the key)")
    if len(key) < MIN_KEY_LENGTH or not key.isprintable() or key != key.strip():
        raise ConfigError(
            field,
            f"a key is at least {MIN_KEY_LENGTH} printable characters without surrounding spaces "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')",
        )
    return hashlib.sha256(key.encode()).digest()


def _grant(value: Any, field: str) -> Grant:
    admin = False
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - {"namespaces", "admin"})
        if unknown:
            raise ConfigError(field, f"unknown field {unknown[0]!r}: an entry has namespaces and admin")
        admin = value.get("admin", False)
        if not isinstance(admin, bool):
            raise ConfigError(field, f"admin must be true or false, got {admin!r}")
        value = value.get("namespaces")
    if not isinstance(value, list) or not value:
        raise ConfigError(field, 'give a non-empty list of namespaces or globs ("*" for all)')
    for ns in value:
        try:
            names.check_namespace_pattern(ns, "namespace")
        except InvalidInput as exc:
            raise ConfigError(field, exc.problem) from None
    return Grant(tuple(value), admin, names.namespace_matcher(value))

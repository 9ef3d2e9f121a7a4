"""Data keys that can be destroyed: envelope encryption for crypto-shredding (`helix-es forget`).

Every (namespace, session) gets its own random 256-bit data key, which seals that session's
content (`helix_es.encryption`). The data key is stored only wrapped (AES-256-GCM) by a key
derived from the master key (`HELIX_ENCRYPTION_KEY`), in a `KeyStore` that can delete it:

- `PostgresKeyStore`: table `helix_keys (namespace, session_id, key_id, wrapped_key, wrapped_by,
  created_at, erased_at)`; at most one live key per session (a partial unique index).
- `RedisKeyStore`: one hash per session, `helix:keys:<ns>:{<sid>}` (same hash slot as its views).
- `FileKeyStore`: a JSON file per session under a directory (the embedded mode), written atomically.

Erasing a session sets `wrapped_key` to NULL and stamps `erased_at`; the row stays as a tombstone
so reads and audits can tell "erased" from "never existed". Without the data key, and with
the master unable to recreate it (it is random, not derived), no one can open what it sealed.
A session written to after its erasure gets a new data key with a new id.

`StoredSessionKeys` is the `KeyProvider` over a store. Its async `prepare` (awaited by
`EncryptedMemory`) loads a session's keys, creating the first one on write, and keeps them in a
process cache for `cache_ttl` seconds (`HELIX_KEY_CACHE_TTL`, default 60): a process other than
the one that ran `forget` can still open the session until its cache entry expires.

YAML `memory_middleware: [encryption]` uses this provider when `HELIX_KEY_STORE` is set
(`postgres | redis | file`; where: `HELIX_KEY_STORE_URL`, else `HELIX_POSTGRES_DSN`,
`HELIX_REDIS_URL`, or `.helix/keys`), one per store and settings in each runtime
(`helix_es.client.runtime`, which closes it). Unset, it derives session keys from the master
(`DerivedSessionKeys`), which cannot be shredded. Events sealed before a switch to a store
stay readable (their key id is the master's, so the provider derives them) but cannot be
shredded; `forget` counts them.
"""

from __future__ import annotations

import os
import secrets
import struct
import time
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from helix_es.client.encryption import (
    AES_KEY_SIZES,
    NONCE_BYTES,
    DerivedSessionKeys,
    EncryptionError,
    KeyErased,
    KeyNotFound,
    KeyProvider,
    KeyRing,
    keys_from_env,
)
from helix_es.model.errors import ConfigError
from helix_es.stores import registry
from helix_es.stores.file.keys import DEFAULT_DIRECTORY
from helix_es.stores.ports import KeyRow, KeyStore

ENV_STORE = "HELIX_KEY_STORE"
ENV_STORE_URL = "HELIX_KEY_STORE_URL"
ENV_CACHE_TTL = "HELIX_KEY_CACHE_TTL"
KEY_STORES = tuple(registry.offering("keys"))
DEFAULT_FILE_STORE = DEFAULT_DIRECTORY
DEFAULT_CACHE_TTL = 60.0
CACHE_SESSIONS = 10_000  # sessions whose keys a provider keeps in memory
DATA_KEY_BYTES = 32


@runtime_checkable
class ShreddableKeys(KeyProvider, Protocol):
    """A `KeyProvider` whose per-session keys can be destroyed: what `forget` needs."""

    async def prepare(
        self, namespace: str, session_id: str, *, write: bool = False, key_ids: Collection[str] = ()
    ) -> None: ...

    async def rows(self, namespace: str, session_id: str) -> list[KeyRow]: ...

    async def erase(self, namespace: str, session_id: str) -> list[str]: ...


# -- wrapping ------------------------------------------------------------------------------


def _lv(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def wrapping_key(master: bytes) -> bytes:
    # Its own key, not the master itself: the master is also HKDF input for DerivedSessionKeys.
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"helix-es key wrapping v1").derive(master)


def _wrap_aad(namespace: str, session_id: str, key_id: str, master_id: str) -> bytes:
    # Bound to its session and id: a wrapped key copied onto another row does not unwrap.
    return b"".join(_lv(p.encode()) for p in ("helix-es wrapped key v1", namespace, session_id, key_id, master_id))


def wrap(master: bytes, master_id: str, namespace: str, session_id: str, key_id: str, key: bytes) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    aad = _wrap_aad(namespace, session_id, key_id, master_id)
    return nonce + AESGCM(wrapping_key(master)).encrypt(nonce, key, aad)


def unwrap(master: bytes, master_id: str, namespace: str, session_id: str, key_id: str, wrapped: bytes) -> bytes:
    aad = _wrap_aad(namespace, session_id, key_id, master_id)
    try:
        return AESGCM(wrapping_key(master)).decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], aad)
    except InvalidTag:
        raise EncryptionError(
            f"data key {key_id!r} of {namespace}/{session_id} does not unwrap with master {master_id!r}: "
            "the key store row was altered or copied from another session"
        ) from None


def new_key_id() -> str:
    """Random, so a session forgotten and written again never reuses an id (matches KEY_ID_RE)."""
    return "dk-" + secrets.token_hex(8)


# -- the provider --------------------------------------------------------------------------


@dataclass
class _Session:
    loaded: float  # time.monotonic() of the load
    keys: dict[str, bytes]  # live data keys by id, unwrapped
    erased: dict[str, datetime]  # erased key id -> when
    current: str | None  # the live key new writes use
    problems: dict[str, str] = field(default_factory=dict)  # key id -> why it cannot be opened


class StoredSessionKeys:
    """A random data key per session, kept wrapped by the master in `store`; `erase` shreds it.

    `master` is the wrapping master key or a `KeyRing` of them (rotation: the current one wraps
    new keys, the old ones still unwrap theirs). `derive_legacy` opens events sealed before the
    switch to a key store (key id = a master's id, key = `DerivedSessionKeys`); they are not
    shreddable. Call `await prepare(...)` before `current_key`/`key` (EncryptedMemory does).
    """

    def __init__(
        self,
        store: KeyStore,
        master: bytes | KeyRing,
        *,
        cache_ttl: float = DEFAULT_CACHE_TTL,
        derive_legacy: bool = True,
    ) -> None:
        self.store = store
        self.ring = master if isinstance(master, KeyRing) else KeyRing.of(master, sizes=AES_KEY_SIZES)
        self.cache_ttl = cache_ttl
        self.legacy = (
            DerivedSessionKeys(self.ring)
            if derive_legacy and all(len(k) >= 32 for k in self.ring.keys.values())
            else None
        )
        self._cache: OrderedDict[tuple[str, str], _Session] = OrderedDict()

    def __repr__(self) -> str:
        return f"StoredSessionKeys({self.store.kind}, {self.ring!r})"

    async def prepare(
        self, namespace: str, session_id: str, *, write: bool = False, key_ids: Collection[str] = ()
    ) -> None:
        """Load the session's keys (again, past `cache_ttl` or for an id not seen); on write, make its first."""
        where = (namespace, session_id)
        entry = self._cache.get(where)
        if entry is not None and time.monotonic() - entry.loaded < self.cache_ttl:
            self._cache.move_to_end(where)
            known = entry.keys.keys() | entry.erased.keys() | entry.problems.keys() | self.ring.keys.keys()
            if all(k in known for k in key_ids) and (not write or entry.current is not None):
                return
        entry = await self._load(namespace, session_id)
        if write and entry.current is None:
            key_id, key = new_key_id(), os.urandom(DATA_KEY_BYTES)
            wrapped = wrap(self.ring.keys[self.ring.current], self.ring.current, namespace, session_id, key_id, key)
            await self.store.insert(
                KeyRow(namespace, session_id, key_id, wrapped, self.ring.current, datetime.now(UTC))
            )
            entry = await self._load(namespace, session_id)  # a racing writer's key may have won
            if entry.current is None:
                raise EncryptionError(f"the {self.store.kind} key store kept no key for {namespace}/{session_id}")

    async def _load(self, namespace: str, session_id: str) -> _Session:
        entry = _Session(time.monotonic(), {}, {}, None)
        live: list[KeyRow] = []
        for row in await self.store.rows(namespace, session_id):
            if row.erased_at is not None or row.wrapped_key is None:
                entry.erased[row.key_id] = row.erased_at or datetime.now(UTC)
                continue
            master = self.ring.keys.get(row.wrapped_by or "")
            if master is None:
                entry.problems[row.key_id] = (
                    f"it is wrapped by master key {row.wrapped_by!r}, which is not configured "
                    "(list it in HELIX_ENCRYPTION_OLD_KEYS)"
                )
                continue
            entry.keys[row.key_id] = unwrap(
                master, row.wrapped_by or "", namespace, session_id, row.key_id, row.wrapped_key
            )
            live.append(row)
        if live:
            entry.current = max(live, key=lambda r: r.created_at).key_id
        self._cache[(namespace, session_id)] = entry
        self._cache.move_to_end((namespace, session_id))
        while len(self._cache) > CACHE_SESSIONS:
            self._cache.popitem(last=False)
        return entry

    def current_key(self, namespace: str, session_id: str) -> tuple[str, bytes]:
        entry = self._cache.get((namespace, session_id))
        if entry is None or entry.current is None:
            raise KeyNotFound(
                f"no data key loaded for {namespace}/{session_id}: await keys.prepare(namespace, session_id, "
                "write=True) first (EncryptedMemory does)"
            )
        return entry.current, entry.keys[entry.current]

    def key(self, namespace: str, session_id: str, key_id: str) -> bytes | None:
        entry = self._cache.get((namespace, session_id))
        if entry is not None:
            if key_id in entry.erased:
                raise KeyErased(
                    f"key {key_id!r} of {namespace}/{session_id} was destroyed at {entry.erased[key_id].isoformat()} "
                    "(helix-es forget): what it sealed cannot be opened"
                )
            if key_id in entry.problems:
                raise KeyNotFound(
                    f"key {key_id!r} of {namespace}/{session_id} cannot be opened: {entry.problems[key_id]}"
                )
            if key_id in entry.keys:
                return entry.keys[key_id]
        if self.legacy is not None and key_id in self.ring.keys:
            return self.legacy.key(namespace, session_id, key_id)  # sealed before the key store: not shreddable
        return None

    async def rows(self, namespace: str, session_id: str) -> list[KeyRow]:
        return await self.store.rows(namespace, session_id)

    async def erase(self, namespace: str, session_id: str) -> list[str]:
        """Destroy the session's live keys; from now on this process raises `KeyErased` for them."""
        erased = await self.store.erase(namespace, session_id, datetime.now(UTC))
        await self._load(namespace, session_id)
        return erased

    async def is_erased(self, namespace: str, session_id: str) -> bool:
        """The session had keys and none is live: what it wrote before can no longer be read."""
        rows = await self.store.rows(namespace, session_id)
        return bool(rows) and all(r.erased for r in rows)

    async def close(self) -> None:
        await self.store.close()


def shreddable(keys: object) -> bool:
    """Whether `forget` can destroy this provider's per-session keys."""
    return isinstance(keys, ShreddableKeys)


# -- from the environment ------------------------------------------------------------------


def open_key_store(kind: str, location: str | None = None, environ: Mapping[str, str] | None = None) -> KeyStore:
    """A key store of `kind` at `location`, else at the deployment's address for that kind."""
    env = os.environ if environ is None else environ
    found = registry.KINDS.get(kind)
    if found is None or found.keys is None:
        raise ConfigError(ENV_STORE, f"must be one of {', '.join(KEY_STORES)}, got {kind!r}")
    if found.address == "dsn":
        location = location or env.get("HELIX_POSTGRES_DSN")
        if not location:
            raise ConfigError(ENV_STORE_URL, "HELIX_KEY_STORE=postgres needs a DSN here or in HELIX_POSTGRES_DSN")
    elif found.address == "redis_url":
        location = location or env.get("HELIX_REDIS_URL")
        if not location:
            raise ConfigError(ENV_STORE_URL, "HELIX_KEY_STORE=redis needs a URL here or in HELIX_REDIS_URL")
    return found.keys(location)


def key_store_settings(environ: Mapping[str, str] | None = None) -> tuple[object, ...]:
    """What tells two `HELIX_KEY_STORE` providers apart: a runtime keeps one per value of this."""
    env = os.environ if environ is None else environ
    ring = keys_from_env(env).ring
    return (
        env.get(ENV_STORE),
        env.get(ENV_STORE_URL) or None,
        env.get("HELIX_POSTGRES_DSN"),
        env.get("HELIX_REDIS_URL"),
        env.get(ENV_CACHE_TTL),
        ring.current,
        tuple(sorted(ring.keys)),
    )


def keys_from_store_env(environ: Mapping[str, str] | None = None) -> StoredSessionKeys:
    """A provider over the store `HELIX_KEY_STORE` names (a new one, with its own pool: a
    `helix_es.client.runtime.Runtime` keeps one per settings and closes it)."""
    env = os.environ if environ is None else environ
    kind = env.get(ENV_STORE, "")
    if kind not in KEY_STORES:
        raise ConfigError(ENV_STORE, f"must be one of {', '.join(KEY_STORES)}, got {kind!r}")
    try:
        ttl = float(env.get(ENV_CACHE_TTL, DEFAULT_CACHE_TTL))
    except ValueError:
        raise ConfigError(ENV_CACHE_TTL, "must be a number of seconds") from None
    if not ttl >= 0:
        raise ConfigError(ENV_CACHE_TTL, f"must be >= 0, got {ttl}")
    ring = keys_from_env(env).ring  # HELIX_ENCRYPTION_KEY wraps; HELIX_ENCRYPTION_OLD_KEYS still unwrap
    location = env.get(ENV_STORE_URL) or None
    return StoredSessionKeys(open_key_store(kind, location, env), ring, cache_ttl=ttl)

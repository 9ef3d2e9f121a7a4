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
`HELIX_REDIS_URL`, or `.helix/keys`). Unset, it derives session keys from the master
(`DerivedSessionKeys`), which cannot be shredded. Events sealed before a switch to a store
stay readable (their key id is the master's, so the provider derives them) but cannot be
shredded; `forget` counts them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import struct
import time
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

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
from helix_es.model import names
from helix_es.model.errors import ConfigError

ENV_STORE = "HELIX_KEY_STORE"
ENV_STORE_URL = "HELIX_KEY_STORE_URL"
ENV_CACHE_TTL = "HELIX_KEY_CACHE_TTL"
KEY_STORES = ("postgres", "redis", "file")
DEFAULT_FILE_STORE = ".helix/keys"  # beside the embedded log's default .helix/log
DEFAULT_CACHE_TTL = 60.0
CACHE_SESSIONS = 10_000  # sessions whose keys a provider keeps in memory
DATA_KEY_BYTES = 32


@dataclass(frozen=True)
class KeyRow:
    """One data key of a session, as its store keeps it: wrapped, or erased (a tombstone)."""

    namespace: str
    session_id: str
    key_id: str
    wrapped_key: bytes | None = field(repr=False)  # None once erased
    wrapped_by: str | None  # id of the master key that wrapped it
    created_at: datetime
    erased_at: datetime | None = None

    @property
    def erased(self) -> bool:
        return self.erased_at is not None


@runtime_checkable
class KeyStore(Protocol):
    """Where wrapped data keys live; `erase` must really delete the wrapped key."""

    kind: str

    async def rows(self, namespace: str, session_id: str) -> list[KeyRow]:
        """Every key row of the session, erased ones included, oldest first."""
        ...

    async def insert(self, row: KeyRow) -> None:
        """Keep `row`, unless the session already has a live key (a racing writer made it): then nothing."""
        ...

    async def erase(self, namespace: str, session_id: str, at: datetime) -> list[str]:
        """Delete every live wrapped key of the session, keeping tombstones; the ids erased by this call."""
        ...

    async def close(self) -> None: ...


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
            DerivedSessionKeys(self.ring) if derive_legacy and all(len(k) >= 32 for k in self.ring.keys.values())
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
            entry.keys[row.key_id] = unwrap(master, row.wrapped_by or "", namespace, session_id, row.key_id,
                                            row.wrapped_key)
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
                raise KeyNotFound(f"key {key_id!r} of {namespace}/{session_id} cannot be opened: "
                                  f"{entry.problems[key_id]}")
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


# -- stores --------------------------------------------------------------------------------

_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS helix_keys (
    namespace text NOT NULL,
    session_id text NOT NULL,
    key_id text NOT NULL,
    wrapped_key bytea,
    wrapped_by text,
    created_at timestamptz NOT NULL,
    erased_at timestamptz,
    PRIMARY KEY (namespace, session_id, key_id),
    CHECK ((erased_at IS NULL) = (wrapped_key IS NOT NULL))
);
CREATE UNIQUE INDEX IF NOT EXISTS helix_keys_live ON helix_keys (namespace, session_id) WHERE erased_at IS NULL;
"""

_PG_ROWS = """
SELECT key_id, wrapped_key, wrapped_by, created_at, erased_at FROM helix_keys
WHERE namespace = $1 AND session_id = $2 ORDER BY created_at, key_id
"""

# No conflict target: the primary key or the one-live-key index; a racing writer's key wins.
_PG_INSERT = """
INSERT INTO helix_keys (namespace, session_id, key_id, wrapped_key, wrapped_by, created_at)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING
"""

_PG_ERASE = """
UPDATE helix_keys SET wrapped_key = NULL, erased_at = $3
WHERE namespace = $1 AND session_id = $2 AND erased_at IS NULL RETURNING key_id
"""


class PostgresKeyStore:
    """`helix_keys` in PostgreSQL. An erased row keeps its id and `erased_at`; its wrapped key is NULL.

    PostgreSQL keeps the old row version until VACUUM reclaims it, and WAL and backups keep it
    longer: all useless without the master key (see the README on backups).
    """

    kind = "postgres"

    def __init__(self, dsn: str) -> None:
        from helix_es.stores.postgres.pool import Pg  # the shared lazy pool; imported here so the module stays light

        self.dsn = dsn
        self.pg = Pg(dsn)

    def __repr__(self) -> str:
        return "PostgresKeyStore()"  # a DSN may hold a password

    async def rows(self, namespace: str, session_id: str) -> list[KeyRow]:
        pool = await self.pg.pool(_PG_SCHEMA)
        found = await pool.fetch(_PG_ROWS, namespace, session_id)
        return [KeyRow(namespace, session_id, r["key_id"], r["wrapped_key"], r["wrapped_by"], r["created_at"],
                       r["erased_at"]) for r in found]

    async def insert(self, row: KeyRow) -> None:
        pool = await self.pg.pool(_PG_SCHEMA)
        await pool.execute(_PG_INSERT, row.namespace, row.session_id, row.key_id, row.wrapped_key, row.wrapped_by,
                           row.created_at)

    async def erase(self, namespace: str, session_id: str, at: datetime) -> list[str]:
        pool = await self.pg.pool(_PG_SCHEMA)
        return [r["key_id"] for r in await pool.fetch(_PG_ERASE, namespace, session_id, at)]

    async def close(self) -> None:
        await self.pg.close()


_LIVE = "~live"  # the hash field naming the live key; key ids never contain "~"

_REDIS_INSERT = """
if redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[1])
return 1
"""

_REDIS_ERASE = """
local erased = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if all[i] ~= ARGV[2] then
    local row = cjson.decode(all[i + 1])
    if row['erased_at'] == nil or row['erased_at'] == cjson.null then
      row['wrapped_key'] = cjson.null
      row['erased_at'] = ARGV[1]
      redis.call('HSET', KEYS[1], all[i], cjson.encode(row))
      erased[#erased + 1] = all[i]
    end
  end
end
redis.call('HDEL', KEYS[1], ARGV[2])
return erased
"""


def _row_json(row: KeyRow) -> str:
    return json.dumps({
        "wrapped_key": None if row.wrapped_key is None else base64.b64encode(row.wrapped_key).decode(),
        "wrapped_by": row.wrapped_by,
        "created_at": row.created_at.isoformat(),
        "erased_at": None if row.erased_at is None else row.erased_at.isoformat(),
    })


def _row_from(namespace: str, session_id: str, key_id: str, doc: Mapping[str, Any]) -> KeyRow:
    wrapped = doc.get("wrapped_key")
    erased = doc.get("erased_at")
    return KeyRow(namespace, session_id, key_id, None if wrapped is None else base64.b64decode(wrapped),
                  doc.get("wrapped_by"), datetime.fromisoformat(doc["created_at"]),
                  None if erased is None else datetime.fromisoformat(erased))


class RedisKeyStore:
    """A hash per session, `helix:keys:<ns>:{<sid>}`: key id -> JSON row, and `~live` -> the live id.

    Redis keeps erased values in RDB snapshots and the AOF until they are rewritten: useless
    without the master key, but see the README on backups.
    """

    kind = "redis"

    def __init__(self, url: str) -> None:
        self.url = url
        self._redis: Any = None

    def __repr__(self) -> str:
        return "RedisKeyStore()"

    @property
    def redis(self) -> Any:
        if self._redis is None:
            from helix_es.stores.redis.pool import redis_client

            self._redis = redis_client(self.url)
        return self._redis

    @staticmethod
    def key(namespace: str, session_id: str) -> str:
        # The session's hash tag: beside its views in one Redis Cluster slot.
        return f"helix:keys:{names.check_namespace(namespace)}:{{{names.check_session_id(session_id)}}}"

    async def rows(self, namespace: str, session_id: str) -> list[KeyRow]:
        found = await self.redis.hgetall(self.key(namespace, session_id))
        rows = [_row_from(namespace, session_id, k.decode(), json.loads(v)) for k, v in found.items()
                if k.decode() != _LIVE]
        return sorted(rows, key=lambda r: (r.created_at, r.key_id))

    async def insert(self, row: KeyRow) -> None:
        await self.redis.eval(_REDIS_INSERT, 1, self.key(row.namespace, row.session_id), row.key_id, _row_json(row),
                              _LIVE)

    async def erase(self, namespace: str, session_id: str, at: datetime) -> list[str]:
        erased = await self.redis.eval(_REDIS_ERASE, 1, self.key(namespace, session_id), at.isoformat(), _LIVE)
        return sorted(e.decode() if isinstance(e, bytes) else str(e) for e in erased)

    async def close(self) -> None:
        client, self._redis = self._redis, None
        if client is not None:
            await client.aclose()


class FileKeyStore:
    """A JSON file per session: `<dir>/ns-<namespace>/<sha256(session id)>.json`, mode 0600.

    Writes replace the file atomically (temp file, fsync, rename) under a lock file, so
    processes sharing the directory agree. An erased key's old file is unlinked; its blocks
    may survive on disk until reused, useless without the master key.
    """

    kind = "file"

    def __init__(self, directory: str | os.PathLike[str] = DEFAULT_FILE_STORE) -> None:
        self.directory = Path(directory).resolve()

    def __repr__(self) -> str:
        return f"FileKeyStore({str(self.directory)!r})"

    def path(self, namespace: str, session_id: str) -> Path:
        digest = hashlib.sha256(names.check_session_id(session_id).encode()).hexdigest()
        return self.directory / f"ns-{names.check_namespace(namespace)}" / f"{digest}.json"

    def _read(self, namespace: str, session_id: str) -> list[KeyRow]:
        try:
            doc = json.loads(self.path(namespace, session_id).read_text())
        except FileNotFoundError:
            return []
        return [_row_from(namespace, session_id, k["key_id"], k) for k in doc["keys"]]

    def _write(self, namespace: str, session_id: str, rows: list[KeyRow]) -> None:
        path = self.path(namespace, session_id)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        doc = {"namespace": namespace, "session_id": session_id,
               "keys": [{"key_id": r.key_id, **json.loads(_row_json(r))} for r in rows]}
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself must survive a crash
        finally:
            os.close(dir_fd)

    @contextlib.contextmanager
    def _locked(self) -> Any:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.directory / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    async def rows(self, namespace: str, session_id: str) -> list[KeyRow]:
        return sorted(self._read(namespace, session_id), key=lambda r: (r.created_at, r.key_id))

    def _insert(self, row: KeyRow) -> None:
        with self._locked():
            rows = self._read(row.namespace, row.session_id)
            if any(not r.erased for r in rows) or any(r.key_id == row.key_id for r in rows):
                return
            self._write(row.namespace, row.session_id, [*rows, row])

    async def insert(self, row: KeyRow) -> None:
        await asyncio.to_thread(self._insert, row)

    def _erase(self, namespace: str, session_id: str, at: datetime) -> list[str]:
        with self._locked():
            rows = self._read(namespace, session_id)
            live = [r.key_id for r in rows if not r.erased]
            if live:
                self._write(namespace, session_id, [
                    r if r.erased else KeyRow(r.namespace, r.session_id, r.key_id, None, r.wrapped_by, r.created_at, at)
                    for r in rows
                ])
            return sorted(live)

    async def erase(self, namespace: str, session_id: str, at: datetime) -> list[str]:
        return await asyncio.to_thread(self._erase, namespace, session_id, at)

    async def close(self) -> None:
        pass


# -- from the environment ------------------------------------------------------------------


def open_key_store(kind: str, location: str | None = None, environ: Mapping[str, str] | None = None) -> KeyStore:
    """A key store of `kind` at `location`, else at the deployment's address for that kind."""
    env = os.environ if environ is None else environ
    if kind == "postgres":
        dsn = location or env.get("HELIX_POSTGRES_DSN")
        if not dsn:
            raise ConfigError(ENV_STORE_URL, "HELIX_KEY_STORE=postgres needs a DSN here or in HELIX_POSTGRES_DSN")
        return PostgresKeyStore(dsn)
    if kind == "redis":
        url = location or env.get("HELIX_REDIS_URL")
        if not url:
            raise ConfigError(ENV_STORE_URL, "HELIX_KEY_STORE=redis needs a URL here or in HELIX_REDIS_URL")
        return RedisKeyStore(url)
    if kind == "file":
        return FileKeyStore(location or DEFAULT_FILE_STORE)
    raise ConfigError(ENV_STORE, f"must be one of {', '.join(KEY_STORES)}, got {kind!r}")


_shared: dict[tuple[object, ...], StoredSessionKeys] = {}


def keys_from_store_env(environ: Mapping[str, str] | None = None) -> StoredSessionKeys:
    """The provider `HELIX_KEY_STORE` names, shared per process and event loop (one pool per store)."""
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
    try:
        loop: int | None = id(asyncio.get_running_loop())
    except RuntimeError:
        loop = None
    ident = (loop, kind, location, env.get("HELIX_POSTGRES_DSN"), env.get("HELIX_REDIS_URL"), ttl,
             ring.current, tuple(sorted(ring.keys)))
    keys = _shared.get(ident)
    if keys is None:
        keys = _shared[ident] = StoredSessionKeys(open_key_store(kind, location, env), ring, cache_ttl=ttl)
    return keys


def provider_from_env(environ: Mapping[str, str] | None = None) -> KeyProvider:
    """The provider YAML `memory_middleware: [encryption]` uses: a key store's if HELIX_KEY_STORE is set."""
    env = os.environ if environ is None else environ
    return keys_from_store_env(env) if env.get(ENV_STORE) else keys_from_env(env)


async def close_shared_keys() -> None:
    """Close the shared providers of the running event loop (their store connections)."""
    loop = id(asyncio.get_running_loop())
    for ident in [i for i in _shared if i[0] == loop]:
        await _shared.pop(ident).close()

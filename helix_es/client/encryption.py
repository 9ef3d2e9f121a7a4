"""Encryption middleware: message text is sealed with AES-GCM before the event is written.

What is encrypted: `content`, every tool call's `arguments` and every metadata value (the
OpenAI Agents SDK session keeps each item whole in one). What stays clear: role, name, tool
call ids and names, `tool_call_id`, metadata keys, and the event envelope (namespace, session
id, time), because views, consumer groups and audits route and order by them. AES-GCM hides
the text but not its length. Metadata values of events sealed before metadata was (plaintext
values) are read as they are.

An encrypted field is `helix-enc:v1:<key_id>:<base64(nonce | ciphertext+tag)>`; tool
arguments hold it as a JSON string literal so they stay JSON text. The AAD binds it to
its namespace, session, role and field (and a tool call's id and name), so ciphertext
moved to another session, role or tool call fails authentication. The key id names the
key that sealed it, so old keys still open old events after a rotation.

Keys that can be destroyed (crypto-shredding, `helix_es.keystore`): a provider may have an async
`prepare(namespace, session_id, *, write, key_ids)`, awaited before sealing and opening so it can
load keys from its store, and raise `KeyErased` for a key that `helix-es forget` destroyed. Reads
leave out messages sealed with an erased key instead of failing: that content is gone.

Search cannot look inside ciphertext at the store, so `EncryptedMemory.search` decrypts
what `get()` returns and matches there (case-insensitive substring, oldest first). It
works for views whose `get` returns the messages (conversation, sliding-window); it cannot
work for store-side search (long-term ILIKE, vector similarity), which sees only ciphertext.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn, Protocol, cast, runtime_checkable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from helix_es.client.middleware import Middleware, add_many
from helix_es.client.protocol import Memory
from helix_es.model.batch import check_batch
from helix_es.model.errors import ConfigError, HelixError, InvalidInput, InvalidMessage
from helix_es.model.events import Position
from helix_es.model.message import SEALED_OVERHEAD, SEALED_PREFIX, Message, ToolCall

PREFIX = SEALED_PREFIX
KEY_ID_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
AES_KEY_SIZES = (16, 24, 32)
NONCE_BYTES = 12
ENV_KEY = "HELIX_ENCRYPTION_KEY"
ENV_OLD_KEYS = "HELIX_ENCRYPTION_OLD_KEYS"
OPENED_CACHE = 1024  # opened messages kept per session memory


class EncryptionError(HelixError):
    """Base of encryption errors."""


class KeyNotFound(EncryptionError, LookupError):
    """The key provider has no key for this namespace/session, or none with the key id a field names."""


class KeyErased(KeyNotFound):
    """The key was destroyed (`helix-es forget`): what it sealed can never be opened again."""


class DecryptionError(EncryptionError):
    """A field failed to decrypt: wrong key, tampered or moved ciphertext, or plaintext where ciphertext belongs."""


@runtime_checkable
class KeyProvider(Protocol):
    """Gives the key to seal new fields with, and finds any key (old ones too) by its id."""

    def current_key(self, namespace: str, session_id: str) -> tuple[str, bytes]:
        """`(key_id, key)` for new writes; raise `KeyNotFound` if there is none. Key ids match KEY_ID_RE."""
        ...

    def key(self, namespace: str, session_id: str, key_id: str) -> bytes | None:
        """The key with `key_id` for this namespace/session, or None if unknown."""
        ...


def key_id_of(key: bytes) -> str:
    """A stable id for a key that reveals nothing about it (a truncated HMAC keyed by the key itself)."""
    return hmac.new(key, b"helix-es key id v1", hashlib.sha256).hexdigest()[:16]


def _check_key(key: object, what: str, sizes: Iterable[int]) -> bytes:
    sizes = tuple(sizes)
    if not isinstance(key, (bytes, bytearray)):
        raise InvalidInput(what, f"must be bytes, got {type(key).__name__}")
    if len(key) not in sizes:
        raise InvalidInput(what, f"must be {' or '.join(map(str, sizes))} bytes, got {len(key)}")
    return bytes(key)


@dataclass(frozen=True)
class KeyRing:
    """Keys by id; `current` seals new writes, the others only open old ones (rotation)."""

    keys: Mapping[str, bytes]
    current: str
    sizes: tuple[int, ...] = field(default=AES_KEY_SIZES, repr=False)

    def __post_init__(self) -> None:
        checked = {}
        for key_id, key in self.keys.items():
            if not isinstance(key_id, str) or not KEY_ID_RE.fullmatch(key_id):
                raise InvalidInput("key_id", f"must match {KEY_ID_RE.pattern}, got {key_id!r}")
            checked[key_id] = _check_key(key, f"keys[{key_id!r}]", self.sizes)
        if self.current not in checked:
            raise InvalidInput("current", f"{self.current!r} is not one of the key ids {sorted(checked)}")
        object.__setattr__(self, "keys", checked)

    def __repr__(self) -> str:  # never print key bytes
        return f"KeyRing(current={self.current!r}, ids={sorted(self.keys)})"

    @classmethod
    def of(cls, current: bytes, *old: bytes, sizes: tuple[int, ...] = AES_KEY_SIZES) -> KeyRing:
        """Ids from `key_id_of`: rotate by passing the new key first and the old ones after it."""
        keys = {key_id_of(bytes(k)): bytes(k) for k in (current, *old)}
        return cls(keys, key_id_of(bytes(current)), sizes)


class NamespaceKeys:
    """One key (or key ring) per namespace, shared by all its sessions."""

    def __init__(self, keys: Mapping[str, bytes | KeyRing]) -> None:
        self.rings = {ns: ring if isinstance(ring, KeyRing) else KeyRing.of(ring) for ns, ring in keys.items()}

    def __repr__(self) -> str:
        return f"NamespaceKeys({sorted(self.rings)})"

    def _ring(self, namespace: str) -> KeyRing:
        ring = self.rings.get(namespace)
        if ring is None:
            raise KeyNotFound(f"no encryption key for namespace {namespace!r}; keys exist for {sorted(self.rings)}")
        return ring

    def current_key(self, namespace: str, session_id: str) -> tuple[str, bytes]:
        ring = self._ring(namespace)
        return ring.current, ring.keys[ring.current]

    def key(self, namespace: str, session_id: str, key_id: str) -> bytes | None:
        return self._ring(namespace).keys.get(key_id)


class DerivedSessionKeys:
    """A key per session, HKDF-SHA256 of a master key with the namespace and session id as info.

    The key id is the master key's id, so rotating the master (new first, old after) keeps
    old events readable. One leaked session key exposes that session only.
    """

    def __init__(self, master: bytes | KeyRing) -> None:
        # Masters are HKDF input keying material, not AES keys: at least 32 bytes.
        self.ring = master if isinstance(master, KeyRing) else KeyRing.of(master, sizes=tuple(range(32, 129)))

    def __repr__(self) -> str:
        return f"DerivedSessionKeys({self.ring!r})"

    @staticmethod
    def derive(master: bytes, namespace: str, session_id: str) -> bytes:
        # Length-prefixed parts: no two (namespace, session) pairs share an info string.
        info = b"helix-es session key v1" + _lv(namespace.encode()) + _lv(session_id.encode())
        return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(master)

    def current_key(self, namespace: str, session_id: str) -> tuple[str, bytes]:
        return self.ring.current, self.derive(self.ring.keys[self.ring.current], namespace, session_id)

    def key(self, namespace: str, session_id: str, key_id: str) -> bytes | None:
        master = self.ring.keys.get(key_id)
        return None if master is None else self.derive(master, namespace, session_id)


def envelope_key_id(value: str) -> str | None:
    """The key id a stored field's envelope names (content, or tool arguments as a JSON string); None if plaintext."""
    if value.startswith('"'):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, str) or not value.startswith(PREFIX):
        return None
    key_id = value[len(PREFIX) :].partition(":")[0]
    return key_id if KEY_ID_RE.fullmatch(key_id) else None


def sealable(message: Message) -> tuple[str, ...]:
    """The fields encryption seals, as stored: content, each tool call's arguments, each metadata value."""
    return (message.content, *(c.arguments for c in message.tool_calls), *message.metadata.values())


def envelope_key_ids(message: Message) -> set[str]:
    """The key ids named by a stored message's envelopes."""
    ids = (envelope_key_id(v) for v in sealable(message))
    return {i for i in ids if i is not None}


def _lv(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _aad(key_id: str, namespace: str, session_id: str, role: str, field: str) -> bytes:
    parts = (PREFIX, key_id, namespace, session_id, role, field)
    return b"".join(_lv(p.encode()) for p in parts)


class EncryptedMemory:
    """Seals content and tool arguments on `add`, opens them on `get`/`search`.

    `accept_plaintext=True` returns fields that are not envelopes as they are (events
    written before encryption was turned on); by default such a field raises
    `DecryptionError`, since anyone who can write the log could plant it.
    """

    def __init__(
        self,
        inner: Memory,
        keys: KeyProvider,
        *,
        namespace: str | None = None,
        session_id: str | None = None,
        accept_plaintext: bool = False,
    ) -> None:
        self.inner = inner
        self.keys = keys
        ns = namespace if namespace is not None else getattr(inner, "namespace", None)
        sid = session_id if session_id is not None else getattr(inner, "session_id", None)
        if not isinstance(ns, str) or not isinstance(sid, str):
            # The AAD and per-session keys need them; a custom Memory must say which session it serves.
            raise InvalidInput(
                "memory", f"{type(inner).__name__} has no .namespace/.session_id; pass namespace= and session_id="
            )
        self.namespace: str = ns
        self.session_id: str = sid
        self.accept_plaintext = accept_plaintext
        self._ciphers: dict[str, AESGCM] = {}  # key id -> cipher, for opening (ids never change meaning)
        # Stored message -> opened one. Windows re-read the same messages on every get; a hit is
        # the exact ciphertext and context that already authenticated, so it needs no second check.
        self._opened: dict[Message, Message] = {}

    def __getattr__(self, name: str) -> object:
        if name == "inner":  # not set yet (copy, unpickling): do not recurse
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"EncryptedMemory({self.namespace}/{self.session_id}, {self.keys!r})"

    # -- sealing ---------------------------------------------------------------------------

    def _seal(self, key_id: str, cipher: AESGCM, text: str, role: str, field: str) -> str:
        nonce = os.urandom(NONCE_BYTES)
        sealed = cipher.encrypt(nonce, text.encode(), _aad(key_id, self.namespace, self.session_id, role, field))
        return f"{PREFIX}{key_id}:{base64.b64encode(nonce + sealed).decode('ascii')}"

    def encrypt(self, message: Message) -> Message:
        """The message as it goes on the log: content, tool arguments and metadata values sealed, the rest clear."""
        key_id, key = self.keys.current_key(self.namespace, self.session_id)
        if not isinstance(key_id, str) or not KEY_ID_RE.fullmatch(key_id):
            raise EncryptionError(f"key provider gave key id {key_id!r}; key ids must match {KEY_ID_RE.pattern}")
        cipher = AESGCM(_check_key(key, "key", AES_KEY_SIZES))
        content = self._seal(key_id, cipher, message.content, message.role, "content")
        calls = tuple(
            ToolCall(c.id, c.name, json.dumps(self._seal(key_id, cipher, c.arguments, message.role, _arg_field(c))))
            for c in message.tool_calls
        )
        meta = {k: self._seal(key_id, cipher, v, message.role, _meta_field(k)) for k, v in message.metadata.items()}
        return replace(message, content=content, tool_calls=calls, metadata=meta)

    # -- opening ---------------------------------------------------------------------------

    def _cipher(self, key_id: str) -> AESGCM:
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            key = self.keys.key(self.namespace, self.session_id, key_id)
            if key is None:
                raise KeyNotFound(
                    f"no key with id {key_id!r} for {self.namespace}/{self.session_id}: the event was sealed "
                    "with another key (a different master or namespace key), or that key was rotated out; "
                    "give the old key to the key provider (KeyRing.of(new, old))"
                )
            cipher = AESGCM(_check_key(key, "key", AES_KEY_SIZES))
            if not hasattr(self.keys, "prepare"):  # a key store's provider decides how long a key lives
                self._ciphers[key_id] = cipher
        return cipher

    def _open(self, value: str, role: str, field: str, *, plain: bool = False) -> str:
        where = f"{field} of a {role} message in {self.namespace}/{self.session_id}"
        if not value.startswith(PREFIX):
            if self.accept_plaintext or plain:
                return value
            raise DecryptionError(
                f"{where} is not encrypted (no {PREFIX} envelope): it was written without the encryption "
                "middleware, or altered; pass accept_plaintext=True to read events from before encryption"
            )
        key_id, sep, body = value[len(PREFIX) :].partition(":")
        try:
            raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if not sep or not KEY_ID_RE.fullmatch(key_id) or len(raw) < SEALED_OVERHEAD:
            raise DecryptionError(f"{where} is a malformed {PREFIX} envelope (tampered or truncated)")
        cipher = self._cipher(key_id)
        aad = _aad(key_id, self.namespace, self.session_id, role, field)
        try:
            return cipher.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], aad).decode()
        except InvalidTag:
            raise DecryptionError(
                f"{where} failed authentication with key {key_id!r}: wrong key, or the ciphertext was "
                "tampered with or moved from another session, role or field"
            ) from None

    def decrypt(self, message: Message) -> Message:
        """The message as the agent wrote it. Raises `DecryptionError` / `KeyNotFound`."""
        opened = self._opened.get(message)
        if opened is None:
            opened = self._decrypt(message)
            if len(self._opened) >= OPENED_CACHE:
                self._opened.clear()
            self._opened[message] = opened
        return opened

    def _decrypt(self, message: Message) -> Message:
        content = self._open(message.content, message.role, "content")
        calls = []
        for c in message.tool_calls:
            field = _arg_field(c)
            try:
                sealed = json.loads(c.arguments)
            except ValueError:
                sealed = None
            if isinstance(sealed, str) and sealed.startswith(PREFIX):
                calls.append({"id": c.id, "name": c.name, "arguments": self._open(sealed, message.role, field)})
            else:
                calls.append({"id": c.id, "name": c.name, "arguments": self._open(c.arguments, message.role, field)})
        record = message.to_record()
        record["content"] = content
        record["tool_calls"] = calls
        # Plaintext values: events sealed before metadata was.
        record["metadata"] = {
            k: self._open(v, message.role, _meta_field(k), plain=True) for k, v in message.metadata.items()
        }
        return Message.from_record(record)  # trusted: it authenticated, and it was validated before sealing

    # -- Memory ----------------------------------------------------------------------------

    async def _prepare(self, stored: list[Message] | None = None) -> None:
        # Providers with a key store load (or, to write, create) the session's keys before the sync calls.
        prepare = getattr(self.keys, "prepare", None)
        if prepare is None:
            return
        ids: set[str] = set()
        for m in stored or ():
            if m not in self._opened:
                ids |= envelope_key_ids(m)
        await prepare(self.namespace, self.session_id, write=stored is None, key_ids=ids)

    async def add(self, message: Message, *, idempotency_key: str | None = None) -> Position:
        if not isinstance(message, Message):
            raise InvalidMessage("message", f"must be a helix_es.Message, got {type(message).__name__}")
        await self._prepare()
        return await self.inner.add(self.encrypt(message), idempotency_key=idempotency_key)

    async def add_many(
        self, messages: Iterable[Message], *, idempotency_keys: Sequence[str | None] | None = None
    ) -> list[Position]:
        batch, keys = check_batch(messages, idempotency_keys)  # sealing needs Messages: check them first
        await self._prepare()
        return await add_many(self.inner, [self.encrypt(m) for m in batch], idempotency_keys=keys)

    async def get(self) -> list[Message]:
        stored = await self.inner.get()
        await self._prepare(stored)
        opened = []
        for m in stored:
            try:
                opened.append(self.decrypt(m))
            except KeyErased:
                continue  # forgotten: its key is destroyed, and the views drop it once they apply the erasure
        return opened

    async def recall(self, query: str, limit: int | None = None, **filters: object) -> NoReturn:
        """Refused: recall ranks what the views keep, and an encrypted memory's views keep ciphertext."""
        raise InvalidInput(
            "memory",
            "an encrypted memory cannot recall: its views rank ciphertext; use search, which reads the decrypted get()",
        )

    async def search(self, query: str, limit: int = 10) -> list[Message]:
        """Case-insensitive substring match over the decrypted `get()`, oldest first, at most `limit`."""
        if not isinstance(query, str):
            raise InvalidInput("query", f"must be a string, got {type(query).__name__}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidInput("limit", f"must be a whole number >= 1, got {limit!r}")
        needle = query.casefold()
        return [m for m in await self.get() if needle in m.content.casefold()][:limit]

    async def clear(self, *, idempotency_key: str | None = None) -> Position:
        return await self.inner.clear(idempotency_key=idempotency_key)

    async def compact(self, *, keep: int = 4, reason: str = "request") -> Position | None:
        """The inner memory's compaction, its summariser reading the opened messages and its summary sealed
        with the session's key (a shredded session's summary is gone with the rest)."""
        compact = getattr(self.inner, "_compact", None)
        if compact is None:
            raise InvalidInput("memory", f"{type(self.inner).__name__} does not compact")

        async def opened(messages: list[Message]) -> list[Message]:
            await self._prepare(messages)
            return [self.decrypt(m) for m in messages]

        async def sealed(text: str) -> str:
            await self._prepare()
            return self.encrypt(Message("system", text)).content

        position: Position | None = await compact(keep, reason, opened, sealed)
        return position

    async def expand(self, position: Position | str) -> list[Message]:
        found: list[Message] = await cast(Any, self.inner).expand(position)
        await self._prepare(found)
        return [self.decrypt(m) for m in found]


def _arg_field(call: ToolCall) -> str:
    # Bound to the call's clear id and name: sealed arguments cannot be moved onto another tool.
    return f"tool_calls[{json.dumps([call.id, call.name], ensure_ascii=False)}].arguments"


def _meta_field(key: str) -> str:
    # Bound to the key: a sealed value cannot be moved under another metadata key.
    return f"metadata[{json.dumps(key, ensure_ascii=False)}]"


def encryption_middleware(keys: KeyProvider, *, accept_plaintext: bool = False) -> Middleware:
    """Wrap memories so their text is sealed with `keys`; put it innermost of the text-changing middleware."""
    if not isinstance(keys, KeyProvider):
        raise InvalidInput("keys", f"must be a KeyProvider, got {type(keys).__name__}")
    return lambda memory: EncryptedMemory(memory, keys, accept_plaintext=accept_plaintext)


def _env_key(name: str, text: str) -> bytes:
    # Never echo the value: it is (or was meant to be) a secret.
    try:
        key = base64.b64decode(text.strip().replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(name, "is not valid base64") from None
    if len(key) != 32:
        raise ConfigError(name, f"must decode to 32 bytes, got {len(key)}")
    return key


def keys_from_env(environ: Mapping[str, str] | None = None) -> DerivedSessionKeys:
    """Per-session keys from `HELIX_ENCRYPTION_KEY` (base64, 32 bytes); `HELIX_ENCRYPTION_OLD_KEYS`
    (comma-separated, same form) still open events sealed before a rotation."""
    env = os.environ if environ is None else environ
    current = env.get(ENV_KEY)
    if not current:
        raise ConfigError(
            ENV_KEY,
            "is not set; the encryption middleware needs a base64 32-byte master key, e.g. from "
            "`python -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())'`",
        )
    master = _env_key(ENV_KEY, current)
    old = [
        _env_key(f"{ENV_OLD_KEYS}[{i}]", text)
        for i, text in enumerate(env.get(ENV_OLD_KEYS, "").split(","))
        if text.strip()
    ]
    return DerivedSessionKeys(KeyRing.of(master, *old, sizes=(32,)))

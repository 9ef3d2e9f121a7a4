"""Sealing a LangGraph thread's values with its data key, so `helix-es forget` can shred them.

With `checkpoints: {encryption: true}` the saver seals the bytes of every serialized value (the
checkpoint, its metadata, each channel blob and pending write) with AES-GCM under the thread's
key (`helix_es.keystore`, the provider `HELIX_KEY_STORE` names) before the event is written.
The type tag stays clear, so the fold and the stores work as before; they never open a value.
Sealed bytes are `helix-enc:v1:<key id>:` + nonce + ciphertext; the AAD binds them to the
namespace, thread and the value's place (which checkpoint, channel, version or write), so a
value moved elsewhere fails to open. Destroying the thread's keys leaves them unreadable
everywhere: on the log, in views and in their backups.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from helix_es.client.encryption import NONCE_BYTES, DecryptionError, KeyNotFound, KeyProvider
from helix_es.model.events import ChannelBlob, CheckpointSaved, PendingWrite, Serialized, WritesSaved
from helix_es.stores.ports import CheckpointStore
from helix_es.views.checkpoints import Saved, WriteRow

PREFIX = b"helix-enc:v1:"
UNSEALED = ("empty", "null")  # types that carry no bytes worth sealing


def key_id(value: Serialized) -> str | None:
    """The key id sealed bytes name; None for a value that is not sealed."""
    if not value.data.startswith(PREFIX):
        return None
    found, sep, _ = value.data[len(PREFIX) :].partition(b":")
    return found.decode(errors="replace") if sep else None


def sealed(value: Serialized) -> bool:
    return value.type in UNSEALED or key_id(value) is not None


def _aad(kid: str, namespace: str, thread_id: str, place: str, kind: str) -> bytes:
    parts = (kid, namespace, thread_id, place, kind)
    return b"".join(len(p.encode()).to_bytes(4, "big") + p.encode() for p in parts)


class Sealer:
    def __init__(self, keys: KeyProvider) -> None:
        self.keys = keys

    async def prepare(self, namespace: str, thread_id: str, *, write: bool, key_ids: Collection[str] = ()) -> None:
        """Load (or, to write, create) the thread's keys: a key store's provider needs it first."""
        prepare = getattr(self.keys, "prepare", None)
        if prepare is not None:
            await prepare(namespace, thread_id, write=write, key_ids=key_ids)

    def seal(self, namespace: str, thread_id: str, place: str, value: Serialized) -> Serialized:
        if value.type in UNSEALED:
            return value
        kid, key = self.keys.current_key(namespace, thread_id)
        nonce = os.urandom(NONCE_BYTES)
        body = AESGCM(key).encrypt(nonce, value.data, _aad(kid, namespace, thread_id, place, value.type))
        return Serialized(value.type, PREFIX + kid.encode() + b":" + nonce + body)

    def open(self, namespace: str, thread_id: str, place: str, value: Serialized) -> Serialized:
        if value.type in UNSEALED:
            return value
        kid = key_id(value)
        if kid is None:
            raise DecryptionError(f"{place} of {namespace}/{thread_id} is not sealed: written without encryption")
        key = self.keys.key(namespace, thread_id, kid)
        if key is None:
            raise KeyNotFound(f"no key {kid!r} for {namespace}/{thread_id}: was the thread forgotten?")
        raw = value.data[len(PREFIX) + len(kid) + 1 :]
        try:
            data = AESGCM(key).decrypt(
                raw[:NONCE_BYTES], raw[NONCE_BYTES:], _aad(kid, namespace, thread_id, place, value.type)
            )
        except InvalidTag:
            raise DecryptionError(
                f"{place} of {namespace}/{thread_id} failed authentication: altered or moved"
            ) from None
        return Serialized(value.type, data)


# Where a value sits: its AAD, so that sealed bytes open only there.
def checkpoint_place(checkpoint_ns: str, checkpoint_id: str) -> str:
    return f"checkpoint:{checkpoint_ns}:{checkpoint_id}"


def metadata_place(checkpoint_ns: str, checkpoint_id: str) -> str:
    return f"metadata:{checkpoint_ns}:{checkpoint_id}"


def blob_place(checkpoint_ns: str, channel: str, version: str) -> str:
    return f"blob:{checkpoint_ns}:{channel}:{version}"


def write_place(checkpoint_ns: str, checkpoint_id: str, task_id: str, idx: int) -> str:
    return f"write:{checkpoint_ns}:{checkpoint_id}:{task_id}:{idx}"


def seal_payload(
    sealer: Sealer, namespace: str, thread_id: str, p: CheckpointSaved | WritesSaved
) -> CheckpointSaved | WritesSaved:
    """The payload with every value sealed for the thread."""

    def seal(place: str, value: Serialized) -> Serialized:
        return sealer.seal(namespace, thread_id, place, value)

    ns, cid = p.checkpoint_ns, p.checkpoint_id
    if isinstance(p, CheckpointSaved):
        blobs = tuple(
            ChannelBlob(b.channel, b.version, seal(blob_place(ns, b.channel, b.version), b.value)) for b in p.blobs
        )
        checkpoint, metadata = seal(checkpoint_place(ns, cid), p.checkpoint), seal(metadata_place(ns, cid), p.metadata)
        return CheckpointSaved(ns, cid, p.parent_checkpoint_id, checkpoint, metadata, p.run_id, blobs)
    writes = tuple(
        PendingWrite(w.idx, w.channel, seal(write_place(ns, cid, p.task_id, w.idx), w.value)) for w in p.writes
    )
    return WritesSaved(ns, cid, p.task_id, p.task_path, writes)


def values_of(p: CheckpointSaved | WritesSaved) -> list[Serialized]:
    """Every serialized value of a payload (what `forget` checks is sealed)."""
    if isinstance(p, CheckpointSaved):
        return [p.checkpoint, p.metadata, *(b.value for b in p.blobs)]
    return [w.value for w in p.writes]


class OpenedReads:
    """The reads of a checkpoint store with every value opened (what the saver reads through)."""

    def __init__(self, store: CheckpointStore, sealer: Sealer) -> None:
        self.store = store
        self.sealer = sealer

    async def _ready(self, namespace: str, thread_id: str, values: list[Serialized]) -> None:
        ids = {k for k in map(key_id, values) if k is not None}
        await self.sealer.prepare(namespace, thread_id, write=False, key_ids=ids)

    def _saved(self, namespace: str, s: Saved) -> Saved:
        def open_(place: str, value: Serialized) -> Serialized:
            return self.sealer.open(namespace, s.thread_id, place, value)

        ns, cid = s.checkpoint_ns, s.checkpoint_id
        checkpoint, metadata = (
            open_(checkpoint_place(ns, cid), s.checkpoint),
            open_(metadata_place(ns, cid), s.metadata),
        )
        return Saved(s.thread_id, ns, cid, s.parent_checkpoint_id, checkpoint, metadata, s.run_id)

    async def get(self, namespace: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None) -> Saved | None:
        found = await self.store.get(namespace, thread_id, checkpoint_ns, checkpoint_id)
        if found is None:
            return None
        await self._ready(namespace, thread_id, [found.checkpoint, found.metadata])
        return self._saved(namespace, found)

    async def listing(
        self, namespace: str, thread_id: str | None, checkpoint_ns: str | None, before: str | None, limit: int | None
    ) -> list[Saved]:
        rows = await self.store.listing(namespace, thread_id, checkpoint_ns, before, limit)
        for tid in dict.fromkeys(s.thread_id for s in rows):
            await self._ready(
                namespace, tid, [v for s in rows if s.thread_id == tid for v in (s.checkpoint, s.metadata)]
            )
        return [self._saved(namespace, s) for s in rows]

    async def latest(self, namespace: str) -> list[Saved]:
        rows = await self.store.latest(namespace)
        for s in rows:
            await self._ready(namespace, s.thread_id, [s.checkpoint, s.metadata])
        return [self._saved(namespace, s) for s in rows]

    async def blobs(
        self, namespace: str, thread_id: str, checkpoint_ns: str, versions: Sequence[tuple[str, str]]
    ) -> dict[str, Serialized]:
        found = await self.store.blobs(namespace, thread_id, checkpoint_ns, versions)
        await self._ready(namespace, thread_id, list(found.values()))
        version = dict(versions)
        return {
            ch: self.sealer.open(namespace, thread_id, blob_place(checkpoint_ns, ch, version[ch]), v)
            for ch, v in found.items()
        }

    async def writes(self, namespace: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> list[WriteRow]:
        rows = await self.store.writes(namespace, thread_id, checkpoint_ns, checkpoint_id)
        await self._ready(namespace, thread_id, [w.value for w in rows])

        def open_(w: WriteRow) -> Serialized:
            place = write_place(checkpoint_ns, checkpoint_id, w.task_id, w.idx)
            return self.sealer.open(namespace, thread_id, place, w.value)

        return [WriteRow(w.task_id, w.idx, w.channel, open_(w), w.task_path) for w in rows]

    async def runs(self, namespace: str, run_ids: Collection[str]) -> list[str]:
        return await self.store.runs(namespace, run_ids)

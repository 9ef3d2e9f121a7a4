"""Retried writes: a keyed event whose key the session saw before is folded as nothing.

Every projection the factory opens claims its batch's idempotency keys in its own store
(`IdempotencyStore`) before it folds the batch, and the records it finds to be retries go to the
fold marked `duplicate_of` (the offset of the key's first event): session views move their guard
past them, namespace-wide views skip them. The first event with a key is the write; the log keeps
the retry, and audit shows it as a duplicate (docs/usage.md, "Retries and idempotency keys").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from helix_es.model.events import Position, Record
from helix_es.model.message import Message
from helix_es.projection.protocol import Projection
from helix_es.stores.ports import Applied, Claim, IdempotencyStore, SessionKey


async def mark_duplicates(
    store: IdempotencyStore, view: str, records: Sequence[Record], *, ttl: float | None = None
) -> Sequence[Record]:
    """`records` (one topic-partition, offset order), retries marked with the offset they repeat."""
    claims = [
        Claim(SessionKey(r.event.namespace, r.event.session_id), r.event.idempotency_key, r.position.offset)
        for r in records
        if r.event.idempotency_key is not None
    ]
    if not claims:
        return records
    firsts = iter(await store.claim(view, claims, ttl=ttl))
    out = []
    for r in records:
        if r.event.idempotency_key is not None:
            first = next(firsts)
            if first != r.position.offset:
                r = replace(r, duplicate_of=first)
        out.append(r)
    return out


class IdempotentProjection:
    """`inner` with its batches' retries marked; reads, checkpoints and names are the inner projection's."""

    def __init__(self, inner: Projection, keys: IdempotencyStore, *, ttl: float | None = None) -> None:
        self.inner = inner
        self.keys = keys
        self.ttl = ttl

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def kind(self) -> str:
        return self.inner.kind

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # what a caller knows of one kind of projection (a vector's embedder)

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        marked = await mark_duplicates(self.keys, self.inner.name, records, ttl=self.ttl)
        return await self.inner.apply(marked, live=live)

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        return await self.inner.checkpoint(topic, partition)

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        await self.inner.advance(topic, partition, offset)

    async def get(self, key: SessionKey, want: Position | None) -> list[Message] | None:
        return await self.inner.get(key, want)

    async def search(self, key: SessionKey, query: str, limit: int, want: Position | None) -> list[Message] | None:
        return await self.inner.search(key, query, limit, want)

    async def applied(self, key: SessionKey, want: Position) -> int | None:
        return await self.inner.applied(key, want)

    async def close(self) -> None:
        try:
            await self.inner.close()
        finally:
            await self.keys.close()

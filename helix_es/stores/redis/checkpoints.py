"""Redis checkpoint view: a thread's checkpoints, blobs and writes as hashes in its own hash slot.

Keys: `helix_es.stores.redis.checkpoint_keys`. `apply` reads the partition checkpoint and, for the
threads a batch deletes from, their (checkpoint, run id) index, folds the batch in Python into
commands, and sends them with every thread's guard and the partition checkpoint. On one server
that is one MULTI/EXEC under WATCH of the batch's thread guards: atomic, and a batch another
projector raced (a guard moved) is refused whole (`StaleWrite`). On a cluster the threads' slots
are written first and the checkpoint after; a thread's guard skips what it folded already on a
replay.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from redis import exceptions as redis_errors

from helix_es.model import names
from helix_es.model.events import Record, Serialized
from helix_es.stores.ports import Applied, StaleWrite
from helix_es.stores.redis.checkpoint_keys import (
    SEP,
    ThreadKeys,
    blob_of,
    blob_value,
    namespace_glob,
    saved_of,
    saved_value,
    threads_key,
    write_of,
    write_value,
)
from helix_es.stores.redis.pool import Lazy, is_cluster, text
from helix_es.stores.redis.views import ADVANCE, advance_checkpoint, delete_matching, drop_checkpoints
from helix_es.views.checkpoints import (
    EMPTY,
    VIEW_NAME,
    CheckpointOp,
    DeleteCheckpoints,
    DropThread,
    PutCheckpoint,
    PutWrites,
    Ref,
    Saved,
    WriteRow,
    record_op,
)

Index = dict[Ref, str | None]  # a checkpoint -> its run id
Thread = tuple[str, str]  # (namespace, thread id)
# thread, its fresh records' ops (decoded once: the deletion check reads them too), index, writes held
Plan = tuple[Thread, list[Record], list[CheckpointOp | None], Index | None, set[str]]


def _index(raw: dict[bytes, bytes]) -> Index:
    out: Index = {}
    for field, run in raw.items():
        cns, _, cid = field.decode().partition(SEP)
        out[(cns, cid)] = run.decode() or None  # kept as "" for none
    return out


class RedisCheckpoints:
    kind = "redis"

    def __init__(self, url: str, name: str = VIEW_NAME) -> None:
        self.url = url
        self.name = name
        self._client = Lazy(url)

    def _keys(self, namespace: str, thread_id: str) -> ThreadKeys:
        return ThreadKeys(self.name, namespace, thread_id)

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        if not records:
            return Applied(0)
        client = await self._client()
        p = records[0].position
        cp_key, field = names.checkpoint_key(self.name), f"{p.topic}:{p.partition}"
        by_thread: dict[tuple[str, str], list[Record]] = {}
        for r in records:
            by_thread.setdefault((r.event.namespace, r.event.session_id), []).append(r)
        keys = {t: self._keys(*t) for t in by_thread}
        guards = [keys[t].applied for t in by_thread]
        if is_cluster(client):
            return await self._apply_cluster(client, records, by_thread, keys)
        async with client.pipeline(transaction=True) as pipe:
            try:
                # The guards only: batches of other partitions move the shared checkpoint hash meanwhile.
                await pipe.watch(*guards)
                done = int(await pipe.hget(cp_key, field) or -1)
                applied = [int(v) if v is not None else -1 for v in await pipe.mget(guards)]
                plans = await self._plans(pipe, by_thread, keys, done, applied)
                pipe.multi()  # type: ignore[no-untyped-call]
                count = self._queue(pipe, plans, keys)
                # Forward only, in the same transaction; also past records every guard had (a cluster's replay).
                if records[-1].position.offset > done:
                    pipe.eval(ADVANCE, 1, cp_key, field, records[-1].position.offset, 0)
                await pipe.execute()
            except redis_errors.WatchError:
                raise StaleWrite(f"{self.name}: another writer moved {field} or a thread of its batch") from None
        return Applied(count)

    async def _apply_cluster(
        self,
        client: Any,
        records: Sequence[Record],
        by_thread: dict[tuple[str, str], list[Record]],
        keys: dict[tuple[str, str], ThreadKeys],
    ) -> Applied:
        p = records[0].position
        done = int(await client.hget(names.checkpoint_key(self.name), f"{p.topic}:{p.partition}") or -1)
        applied = [int(v) if v is not None else -1 for v in [await client.get(keys[t].applied) for t in by_thread]]
        plans = await self._plans(client, by_thread, keys, done, applied)
        async with client.pipeline(transaction=False) as pipe:
            count = self._queue(pipe, plans, keys)
            await pipe.execute()
        if records[-1].position.offset > done:  # also past records every guard had: a replay after a kill
            await advance_checkpoint(client, self.name, p.topic, p.partition, records[-1].position.offset)
        return Applied(count)

    async def _plans(
        self,
        reader: Any,
        by_thread: dict[tuple[str, str], list[Record]],
        keys: dict[tuple[str, str], ThreadKeys],
        done: int,
        applied: list[int],
    ) -> list[Plan]:
        """Per thread, the records past both the checkpoint and its guard, and what a deletion needs: the
        index, and the checkpoints that hold writes (a checkpoint deleted before its writes came too)."""
        plans = []
        for (t, recs), guard in zip(by_thread.items(), applied, strict=True):
            fresh = [r for r in recs if r.position.offset > max(done, guard)]
            if not fresh:
                continue
            ops = [record_op(r) for r in fresh]
            deletes = any(isinstance(op, DeleteCheckpoints | DropThread) for op in ops)
            index = _index(await reader.hgetall(keys[t].runs)) if deletes else None
            wrote = {text(m) for m in await reader.smembers(keys[t].wrote)} if deletes else set()
            plans.append((t, fresh, ops, index, wrote))
        return plans

    def _queue(self, pipe: Any, plans: list[Plan], keys: Any) -> int:
        count = 0
        for t, fresh, ops, index, wrote in plans:
            k = keys[t]
            for op in ops:
                self._fold(pipe, k, t, op, index, wrote)
            pipe.set(k.applied, fresh[-1].position.offset)
            count += len(fresh)
        return count

    def _fold(
        self,
        pipe: Any,
        k: ThreadKeys,
        t: tuple[str, str],
        op: CheckpointOp | None,
        index: Index | None,
        wrote: set[str],
    ) -> None:
        namespace, thread_id = t
        if isinstance(op, PutCheckpoint):
            cns, cid = op.ref
            member = f"{cns}{SEP}{cid}"
            pipe.hset(k.cp, member, saved_value(op.row))
            pipe.zadd(k.ids(cns), {cid: 0})
            pipe.sadd(k.nss, cns)
            pipe.hset(k.runs, member, op.row.run_id or "")
            pipe.sadd(threads_key(self.name, namespace), thread_id)
            if op.blobs:
                pipe.hset(k.blobs, mapping={SEP.join(ref): blob_value(value) for ref, value in op.blobs})
            if index is not None:
                index[op.ref] = op.row.run_id
        elif isinstance(op, PutWrites):
            key = k.writes(*op.ref)
            member = SEP.join(op.ref)
            pipe.sadd(k.wrote, member)
            wrote.add(member)
            for w in op.rows:
                (pipe.hset if op.replaces(w) else pipe.hsetnx)(key, f"{w.task_id}{SEP}{w.idx}", write_value(w))
        elif isinstance(op, DeleteCheckpoints | DropThread):
            assert index is not None
            if isinstance(op, DropThread) and op.spares(index):
                return
            for cns, cid in list(index) if isinstance(op, DropThread) else op.doomed(index):
                member = f"{cns}{SEP}{cid}"
                pipe.hdel(k.cp, member)
                pipe.hdel(k.runs, member)
                pipe.zrem(k.ids(cns), cid)
                pipe.delete(k.writes(cns, cid))
                pipe.srem(k.wrote, member)
                wrote.discard(member)
                del index[(cns, cid)]
            if isinstance(op, DropThread):  # with the writes of checkpoints deleted before them
                for member in wrote:
                    pipe.delete(k.writes(*member.split(SEP, 1)))
                wrote.clear()
                pipe.delete(k.cp, k.runs, k.nss, k.blobs, k.wrote)
                pipe.srem(threads_key(self.name, namespace), thread_id)
            elif op.blobs:
                pipe.hdel(k.blobs, *(SEP.join(ref) for ref in op.blobs))

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        value = await (await self._client()).hget(names.checkpoint_key(self.name), f"{topic}:{partition}")
        return None if value is None else int(value)

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        await advance_checkpoint(await self._client(), self.name, topic, partition, offset)

    async def get(self, namespace: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None) -> Saved | None:
        client = await self._client()
        k = self._keys(namespace, thread_id)
        if checkpoint_id is None:
            newest = await client.zrevrangebylex(k.ids(checkpoint_ns), "+", "-", start=0, num=1)
            if not newest:
                return None
            checkpoint_id = text(newest[0])
        value = await client.hget(k.cp, f"{checkpoint_ns}{SEP}{checkpoint_id}")
        return None if value is None else saved_of(thread_id, checkpoint_ns, checkpoint_id, value)

    async def listing(
        self,
        namespace: str,
        thread_id: str | None,
        checkpoint_ns: str | None,
        before: str | None,
        limit: int | None,
    ) -> list[Saved]:
        client = await self._client()
        if thread_id is not None:
            threads = [thread_id]
        else:
            threads = sorted((text(t) for t in await client.smembers(threads_key(self.name, namespace))), reverse=True)
        found: list[Saved] = []
        top = "+" if before is None else f"({before}"
        for tid in threads:
            k = self._keys(namespace, tid)
            nss = [checkpoint_ns] if checkpoint_ns is not None else [text(n) for n in await client.smembers(k.nss)]
            rows: list[Saved] = []
            for cns in nss:
                page = {"start": 0, "num": limit} if limit is not None else {}
                ids = [text(i) for i in await client.zrevrangebylex(k.ids(cns), top, "-", **page)]
                if ids:
                    values = await client.hmget(k.cp, [f"{cns}{SEP}{i}" for i in ids])
                    rows += [saved_of(tid, cns, i, v) for i, v in zip(ids, values, strict=True) if v is not None]
            found += sorted(rows, key=lambda s: s.checkpoint_id, reverse=True)
            if limit is not None and len(found) >= limit:
                return found[:limit]
        return found

    async def latest(self, namespace: str) -> list[Saved]:
        client = await self._client()
        found = []
        for tid in sorted(text(t) for t in await client.smembers(threads_key(self.name, namespace))):
            nss = [text(n) for n in await client.smembers(self._keys(namespace, tid).nss)]
            newest = [s for s in [await self.get(namespace, tid, cns, None) for cns in nss] if s is not None]
            if newest:
                found.append(max(newest, key=lambda s: s.checkpoint_id))
        return found

    async def blobs(
        self, namespace: str, thread_id: str, checkpoint_ns: str, versions: Sequence[tuple[str, str]]
    ) -> dict[str, Serialized]:
        if not versions:
            return {}
        k = self._keys(namespace, thread_id)
        fields = [f"{checkpoint_ns}{SEP}{ch}{SEP}{v}" for ch, v in versions]
        values = await (await self._client()).hmget(k.blobs, fields)
        out = {}
        for (channel, _), value in zip(versions, values, strict=True):
            if value is not None:
                blob = blob_of(value)
                if blob.type != EMPTY:
                    out[channel] = blob
        return out

    async def writes(self, namespace: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> list[WriteRow]:
        raw = await (await self._client()).hgetall(
            self._keys(namespace, thread_id).writes(checkpoint_ns, checkpoint_id)
        )
        return [write_of(f, v) for f, v in raw.items()]

    async def runs(self, namespace: str, run_ids: Collection[str]) -> list[str]:
        client = await self._client()
        wanted = set(run_ids)
        found = []
        for t in sorted(text(t) for t in await client.smembers(threads_key(self.name, namespace))):
            if wanted & {text(r) for r in await client.hvals(self._keys(namespace, t).runs)}:
                found.append(t)
        return found

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        client = await self._client()
        for ns in namespaces:
            await delete_matching(client, *namespace_glob(self.name, ns))
            await client.delete(threads_key(self.name, ns))
        await drop_checkpoints(client, self.name, topics)

    async def close(self) -> None:
        await self._client.close()

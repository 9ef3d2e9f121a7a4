r"""Redis long-term memory: one key per message, an ordered index, a clear watermark.

Layout, for view `<view>` (`long-term`) of namespace `<ns>`:

- `helix:memory:<ns>:<view>:m:<order>`: one message, a JSON string
  `{"session_id", "at" (event time, µs since 1970), "position" ("<topic>:<partition>:<offset>"),
  "message" (the Message's JSON)}`. `<order>` is `<µs:020d>,<topic>,<partition:010d>,<offset:020d>`:
  its byte order is the view's order (`,` sorts below every topic character), and it is the
  row key, so a re-delivered event rewrites the same key with the same value.
- `helix:memory:<ns>:<view>:index`: a sorted set of those `<order>` members, all scored 0,
  so `ZRANGE` returns them in byte order and a clear finds its range with `ZRANGEBYLEX`.
- `helix:memory:<ns>:<view>:cleared`: the `cleared_at` watermark, µs.
- `helix:memory:<ns>:<view>:s:<session id>`: a sorted set of the session's `<order>` members,
  scored by offset, so a retraction or an erasure reads the session's rows, not the namespace's.
  Kept where `helix:memory:<ns>:<view>:by-session` exists: set when the namespace's first row is
  written by this version (an index made before has no session sets, so its retractions and
  erasures scan the index, as they did, until a rebuild or a clear empties it).
- `helix:memory:<ns>:<view>:sessions`: the sessions with a set there, so a clear takes the rows it
  drops out of their sets too (and a set it empties out of `sessions`).
- `helix:memory:<ns>:<view>:retracted`: the retractions applied (`<topic>:<partition>:<offset>`).
- `helix:checkpoint:<view>`: hash `<topic>:<partition>` -> last applied offset (as every view).

On a Redis Cluster every key of a namespace carries its hash tag, `helix:memory:{<ns>}:<view>:...`
(same layout), so a namespace's rows, index and watermark share one slot. Single servers keep the
names above: nothing moves for existing deployments (no cluster deployment existed before).

`apply` on one server is one Lua script: it reads the partition checkpoint, skips what it covers,
folds the rest (inserts newer than the watermark, clears) and moves the checkpoint, all atomically.
On a cluster it reads the checkpoint, runs one script per namespace (in its slot), waits for a
replica of each (`WAIT`, `helix_es.stores.redis.cluster`), then moves the checkpoint forward: the
checkpoint never covers a row a failover could lose, and a row applied twice is the same row.

`get` is one Lua script: the checkpoint (when a `want` is given; no data is sent while behind),
`ZRANGE` of the index and `MGET`s. `search` walks the namespace's index in the view's order, one
script call per `PAGE` rows (the first also checks the checkpoint), and stops at `limit` hits: each
call does bounded work, so other clients' commands wait at most one page (docs/speed.md). The script
tests ASCII contents itself (ASCII lower case equals casefold there) and passes non-ASCII ones on;
Python applies `casefold`, so the result is exactly the memory store's. Pages are read one after the
other, so a search that runs while rows are added sees each page as it was when read.

Event times before 1970 count as 1970 here (the order key has no sign); helix-es never writes such.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from typing import Any

from redis.asyncio.cluster import RedisCluster

from helix_es.model import names
from helix_es.model.events import Position, Record, micros
from helix_es.model.message import Message, decode_json
from helix_es.stores.ports import Applied, CheckpointLost, SessionKey
from helix_es.stores.redis.cluster import Script, replicated
from helix_es.stores.redis.long_term_lua import APPLY, APPLY_NAMESPACE, ERASE, GET, PAGE, PAGE_READ
from helix_es.stores.redis.pool import text
from helix_es.stores.redis.views import ADVANCE, delete_matching
from helix_es.stores.redis.wide import WideStore
from helix_es.views.long_term import VIEW_NAME, Op, OrderKey, matches, ops


def member(order: OrderKey) -> str:
    """The index member (and message key suffix) of a row: byte order is the view's order."""
    at, topic, partition, offset = order
    return f"{max(at, 0):020d},{topic},{partition:010d},{offset:020d}"


def prefix(namespace: str, view: str = VIEW_NAME, *, cluster: bool = False) -> str:
    """`helix:memory:<ns>:<view>:`; on a Redis Cluster `helix:memory:{<ns>}:<view>:`, one slot per namespace."""
    ns = names.check_namespace(namespace)
    return f"helix:memory:{{{ns}}}:{view}:" if cluster else f"helix:memory:{ns}:{view}:"


def _value(op: Op, message: Message, at: int) -> str:
    # json.dumps({...}, ensure_ascii=False, separators=(",", ":")) byte for byte, with the message's own
    # compact JSON spliced in; assembled by hand, as every event of a rebuild passes here.
    p = op.record.position
    return (
        f'{{"session_id":{_encode_str(op.session_id)},"at":{at},"position":'
        f'{_encode_str(f"{p.topic}:{p.partition}:{p.offset}")},"message":{message.to_json()}}}'
    )


_encode_str = json.encoder.encode_basestring  # json.dumps(ensure_ascii=False)'s own string encoder (C)


_MESSAGE_FIELD = b',"message":'  # cannot occur inside a JSON string (its quotes would be escaped)


def _message(value: bytes) -> Message:
    """The stored message, through the shared decode cache: every `get` rereads the same values."""
    start = value.find(_MESSAGE_FIELD)
    if start < 0 or not value.endswith(b"}"):
        return Message.from_record(json.loads(value)["message"])
    return decode_json(value[start + len(_MESSAGE_FIELD) : -1])


class RedisLongTerm(WideStore):
    kind = "redis"
    SCRIPTS = (("apply", APPLY), ("get", GET), ("page", PAGE_READ), ("erase", ERASE))

    def __init__(self, url: str, *, name: str = VIEW_NAME) -> None:
        super().__init__(url, name)

    def _prefix(self, namespace: str) -> str:
        return prefix(namespace, self.name, cluster=self._cluster)

    async def _run(self, script: str, keys: list[str], args: list[str | int]) -> Any:
        client = await self._open()
        return await self._scripts[script](keys=keys, args=args, client=client)

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        if not records:
            return Applied(0)
        client = await self._open()
        topic, partition, batch = ops(records)
        erasures = [op for op in batch if op.erased]
        for e in erasures:  # first: a crash before the apply script re-delivers the erasure with the batch
            base = self._prefix(e.namespace)
            await self._run("erase", [base + "index"], [base, e.session_id, topic, partition, e.offset])
        field = f"{topic}:{partition}"
        # A message no newer than a clear of its namespace in this batch is gone once the batch is applied,
        # wherever it stands in the batch (a clear drops the rows up to its time, and no row up to the
        # watermark is added): sent as nothing to do, it is neither written nor deleted again.
        cleared: dict[str, int] = {}
        for op in batch:
            if op.clear:
                cleared[op.namespace] = max(cleared.get(op.namespace, -1), max(micros(op.at), 0))
        rows: list[list[str]] = []
        for op in batch:
            at = max(micros(op.at), 0)
            offset = str(op.offset)
            if (
                op.message is not None
                and at > cleared.get(op.namespace, -1)
                and not any(e.erases(op.session_id, topic, partition, op.offset) for e in erasures)
            ):
                row = ["a", offset, op.namespace, str(at), member(op.order), _value(op, op.message, at), op.session_id]
                rows.append(row)
            elif op.clear:
                rows.append(["c", offset, op.namespace, str(at), f"({at + 1:020d}", ""])  # members with time <= at
            elif op.retract:
                rows.append(["r", offset, op.namespace, str(at), topic, op.session_id, str(partition)])
            else:
                rows.append(["-", offset, op.namespace, str(at), "", ""])  # other events: only the checkpoint moves
        if isinstance(client, RedisCluster):
            applied = await self._apply_on_cluster(client, field, rows, str(batch[-1].offset))
        else:
            ops_json = json.dumps(rows, ensure_ascii=False, separators=(",", ":"))
            args: list[str | int] = [field, self.name, int(field in self._checkpoints.seen), ops_json]
            applied = await self._run("apply", [names.checkpoint_key(self.name)], args)
        if applied == -1:
            self._checkpoints.seen.discard(field)
            raise CheckpointLost(f"{self.name}: the checkpoint of {topic}[{partition}] is gone from Redis")
        self._checkpoints.seen.add(field)
        return Applied(int(applied))

    async def _apply_on_cluster(self, client: RedisCluster, field: str, rows: list[list[str]], last: str) -> int:
        # One script per namespace (its own slot), WAIT for the replicas, then the checkpoint: it never
        # covers a row that is not on a replica, and a re-delivered row is rewritten as it was.
        checkpoint, seen = names.checkpoint_key(self.name), int(field in self._checkpoints.seen)
        current = await client.hget(checkpoint, field)
        if seen and current is None:
            return -1
        by_namespace: dict[str, list[list[str]]] = {}
        for row in rows:
            by_namespace.setdefault(row[2], []).append(row)
        scripts: list[Script] = []
        for ns, ns_rows in by_namespace.items():
            base = self._prefix(ns)
            ops_json = json.dumps(ns_rows, ensure_ascii=False, separators=(",", ":"))
            scripts.append((APPLY_NAMESPACE, [base + "index"], [int(current or -1), base, ops_json]))
        replies = await replicated(client, self.name, scripts)
        applied: int = sum(int(n) for n in replies)
        moved = await client.eval(ADVANCE, 1, checkpoint, field, last, seen)  # forward only, as on one server
        return applied if moved != -1 else -1

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        return await self._checkpoints.read(await self._open(), topic, partition)

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        await self._checkpoints.advance(await self._open(), topic, partition, offset)

    async def _reading(self, namespace: str, want: Position | None) -> tuple[list[str], list[str | int]] | None:
        """The keys and `want` arguments of a read script, or None while the view is behind `want`.

        On one server the script checks the checkpoint itself (KEYS[1]); on a cluster the checkpoint is
        in another slot, so it is read first and the script gets the index twice (one slot, no check).
        """
        client = await self._open()
        index = self._prefix(namespace) + "index"
        if want is None:
            return [index, index], ["", 0]
        if not self._cluster:
            return [names.checkpoint_key(self.name), index], [f"{want.topic}:{want.partition}", want.offset]
        applied = await client.hget(names.checkpoint_key(self.name), f"{want.topic}:{want.partition}")
        return None if applied is None or int(applied) < want.offset else ([index, index], ["", 0])

    async def get(self, key: SessionKey, want: Position | None) -> list[Message] | None:
        reading = await self._reading(key.namespace, want)
        if reading is None:
            return None
        reply = await self._run("get", reading[0], [*reading[1], self._prefix(key.namespace) + "m:"])
        if reply[0] == b"wait":
            return None
        return [_message(v) for v in reply[1:]]

    async def search(self, key: SessionKey, query: str, limit: int, want: Position | None) -> list[Message] | None:
        needle = query.casefold()
        reading = await self._reading(key.namespace, want)
        if reading is None:
            return None
        keys, behind = reading
        rows = self._prefix(key.namespace) + "m:"
        hits: list[Message] = []
        start = "-"
        while True:  # page by page through the index, in the view's order: each call reads PAGE rows at most
            reply = await self._run("page", keys, [*behind, start, PAGE, needle, int(needle.isascii()), rows])
            if reply[0] == b"wait":
                return None
            behind = ["", 0]  # the first page waited for `want`: the rest need not
            for value in reply[3:]:
                message = _message(value)
                if matches(needle, message.content):
                    hits.append(message)
                    if len(hits) == limit:
                        return hits
            if int(reply[2]) < PAGE:
                return hits
            start = "(" + text(reply[1])

    async def applied(self, key: SessionKey, want: Position) -> int | None:
        return await self.checkpoint(want.topic, want.partition)

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        client = await self._open()
        for ns in namespaces:
            head = self._prefix(ns)
            await delete_matching(client, head + "*", re.compile(re.escape(head)))
        await self._checkpoints.drop(client, topics)

    async def close(self) -> None:
        await self._client.close()
        self._scripts.clear()

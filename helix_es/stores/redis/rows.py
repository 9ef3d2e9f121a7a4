r"""Redis rows (`helix_es.views.rows`): a view's tables in hashes and sorted sets, one slot per namespace.

Layout, for view `<view>` (the store's name) and namespace `<ns>`; every key carries the hash tag
`{<ns>}`, on one server as on a cluster, so a namespace's rows share one slot. `rows` is the key
family; a view kind may name its own (the facts view's keys are `helix:facts:{<ns>}:<view>:...`):

- `helix:rows:{<ns>}:<view>:<table>:r`: a hash, a row's order encoding -> the row: its columns but
  the json ones as compact JSON (times as µs since 1970, the namespace left out: the key holds it),
  its lookup columns first, then for each json column a 0x01 byte and the document's text as it was
  put (nothing: None). No JSON text holds a bare 0x00 or 0x01 (a json column's is refused if it does),
  so a reader cuts a document out without decoding the row, and a page of values joins on 0x00.
- `helix:rows:{<ns>}:<view>:<table>:o`: a sorted set of those order encodings, all scored 0, so
  ZRANGEBYLEX reads the table in order and a cut (floor is the order's first column) is a lex range.
- `helix:rows:{<ns>}:<view>:<table>:l:<column>:<value>`: per lookup column and value, a sorted set
  of the order encodings of the rows holding it (scored 0: read in order too). `<value>` is the
  value's compact JSON, a string's without its quotes (`s1`, `42`; a time's µs).
- `helix:rows:{<ns>}:<view>:<table>:lookups`: a set of the lookup sets the table has (`<column>:<value>`),
  so a cut takes its range out of each of them without reading a row.
- `helix:rows:{<ns>}:<view>:marks`: a hash, mark name -> its value (an int: a floor's µs or int).
- `helix:checkpoint:<view>`: hash `<topic>:<partition>` -> last applied offset (as every view).

A row's order encoding is its identity (the order ends with the key, and a row's order columns
never change): its order columns after the namespace, each encoded so bytes sort as
`Table.order_of` does. An int is 8 bytes big-endian of value + 2^63, a time its µs so (before 1970
too); text is its UTF-8 with 0x00 and 0x01 escaped (0x01 0x01, 0x01 0x02) and a 0x00 terminator, so
a prefix sorts first and the columns after it never decide. A json column cannot be ordered. A
replace or a delete finds the lookup sets a row is in from its stored JSON (lookup columns first).

`apply` on one server is one script (`rows_lua.APPLY`): it checks the checkpoint is `after`, applies
the changes in order and moves the checkpoint. The changes travel as two arguments whatever their
number: a JSON spec (per change, or per run of alike puts, its kind, table, lengths and lookup
values) and one string of their binary parts (order encodings, stored values) end to end. Plain puts
are written a run at a time (`rows_lua`: a few commands for thousands of rows). On a cluster the
checkpoint lives in another slot: it is read first (a moved one refuses the batch before anything is
written), then each namespace's changes run as one script in its slot, all in one pipeline, followed
by `WAIT 1` on every master with a replica (`helix_es.stores.redis.cluster`), then a script moves
the checkpoint if it is still `after`. Every change is idempotent (a put of a present row keeps it,
a delete or a cut again finds nothing), so a batch applied again by a projector that lost the race
changes nothing.

A scan reads its index a page per script call (`PAGE` members: no call holds Redis up for long) and
the rows' values beside it, joined into one reply string (one element to parse, not one per row);
`where` reads the smallest of its lookup sets and keeps members in the others, `contains` is
Python's casefold over the text column (the script only drops ASCII rows that cannot hold the
needle). The rows it returns decode lazily: a json column asked for is its stored text, cut out;
any other column decodes the row's JSON, once. On one server the first page checks the checkpoint
of `want` in the same script; on a cluster the checkpoint is read just before (rows read after it
are at least as new).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from redis import exceptions as redis_errors
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from helix_es.model import names
from helix_es.model.events import Position
from helix_es.stores.ports import CheckpointLost, RetiredLayout, StaleWrite
from helix_es.stores.redis.cluster import WAIT_MS
from helix_es.stores.redis.pool import Client, text
from helix_es.stores.redis.row_codec import ROWS_GAP, SHIFT, LazyRow, RowCodec, fits, lookup, tokens
from helix_es.stores.redis.rows_lua import APPLY, APPLY_NAMESPACE, MOVE, SCAN
from helix_es.stores.redis.views import delete_matching
from helix_es.stores.redis.wide import WideStore
from helix_es.views.rows import (
    NAMESPACE,
    Cut,
    Put,
    Row,
    RowChange,
    Scan,
    Table,
    check_scan,
)

PAGE = 500  # index members a scan reads per script call
_UNENCODABLE = (KeyError, TypeError, AttributeError, OverflowError, UnicodeEncodeError, struct.error)
Retired = Callable[[str, str, bool], tuple[str, list[str]]]


def prefix(namespace: str, view: str, family: str = "rows") -> str:
    """`helix:<family>:{<ns>}:<view>:`: every key of the namespace in this view, one hash slot."""
    return f"helix:{family}:{{{names.check_namespace(namespace)}}}:{view}:"


class RedisRows(WideStore):
    kind = "redis"
    SCRIPTS = (("apply", APPLY), ("namespace", APPLY_NAMESPACE), ("move", MOVE), ("scan", SCAN))

    def __init__(
        self, url: str, name: str, tables: Sequence[Table], *, retired: Retired | None = None, family: str = "rows"
    ) -> None:
        """`retired`: a layout this view's data once had (`helix_es.stores.redis.retired`), as
        (namespace, view, cluster?) -> (its key prefix, keys any of which tell a namespace holds it):
        such a namespace is refused (`RetiredLayout`), and `drop` deletes its old keys too."""
        super().__init__(url, name)
        self.family = family  # the keys' second part: `rows`, or a view family's own (`facts`)
        self._retired = retired
        self._current: set[tuple[str, str]] = set()  # (view, namespace) known to hold no retired data
        self.tables: Mapping[str, Table] = {t.name: t for t in tables}
        self._codecs = {t.name: RowCodec(t) for t in tables}
        self._index = {t.name: i for i, t in enumerate(tables, 1)}  # a table's place in a script's spec
        self._spec_tables = [[t.name, list(t.lookups)] for t in tables]

    # --- writes ---

    def _encode(self, changes: Sequence[RowChange]) -> dict[str, tuple[list[Any], list[bytes]]]:
        """Per namespace, the script's changes and their binary parts, refusing bad changes as
        `check_changes` does (nothing is sent yet): a row's types are checked by its table's compiled
        test, and by `Table.check` only to say what is wrong. Consecutive puts of a namespace into one
        table, alike in floor and mode, are one entry: their lengths and lookup values in two arrays."""
        out: dict[str, tuple[list[Any], list[bytes]]] = {}
        checked: set[str] = set()
        run: tuple[Any, ...] = ()  # the put entry open: (namespace, table, floor, replace)
        lens: list[int] = []
        looks: list[str] = []
        parts: list[bytes] = []
        for change in changes:
            codec = self._codecs.get(change.table)
            if codec is None:
                raise ValueError(f"no table {change.table!r}")
            table = codec.table
            if type(change) is Put:
                row = change.row
                ns = row.get(NAMESPACE)
                key = (ns, change.table, change.floor, change.replace)
                if key != run:  # another entry: its namespace, table and floor checked once
                    if type(ns) is not str or ns not in checked:
                        ns = names.check_namespace(ns)
                        checked.add(ns)
                    if change.floor is not None and table.floor is None:
                        raise ValueError(f"table {table.name!r} has no floor column for a floored put")
                    spec, parts = out.get(ns) or out.setdefault(ns, ([], []))
                    lens, looks = [], []
                    spec.append([0, self._index[change.table], int(change.replace), change.floor or "", lens, looks])
                    run = key
                try:
                    if not codec.fits(row):
                        table.check(row)  # says what is wrong
                    member, text, found = codec.put(row)
                    value = text.encode()  # a lone surrogate fails here, not on the wire
                except _UNENCODABLE as exc:
                    raise ValueError(f"table {change.table!r}: cannot encode {row!r}: {exc!r}") from exc
                lens += (len(member), len(value))
                looks += found
                parts += (member, value)
                continue
            run = ()
            ti = self._index[change.table]
            if isinstance(change, Cut):
                if table.floor is None:
                    raise ValueError(f"table {table.name!r} has no floor column to cut")
                if not -SHIFT <= change.upto < SHIFT:
                    raise ValueError(f"cut of {change.table!r}: {change.upto} is not a 64-bit int")
                ns = names.check_namespace(change.namespace)
                out.setdefault(ns, ([], []))[0].append([2, ti, change.mark, str(change.upto)])
                continue
            ns = names.check_namespace(change.row.get(NAMESPACE))
            try:
                member = codec.member(change.row)  # a delete's order columns
            except _UNENCODABLE as exc:
                raise ValueError(f"table {change.table!r}: cannot encode {change.row!r}: {exc!r}") from exc
            spec, parts = out.setdefault(ns, ([], []))
            spec.append([1, ti, len(member)])
            parts.append(member)
        return out

    def _spec(self, groups: list[list[Any]]) -> str:
        """The scripts' spec: the tables, then per namespace its key prefix and its changes."""
        return json.dumps([self._spec_tables, groups], ensure_ascii=False, separators=(",", ":"))

    async def apply(
        self, topic: str, partition: int, changes: Sequence[RowChange], checkpoint: int, *, after: int | None
    ) -> None:
        by_namespace = self._encode(changes)
        client = await self._open()
        await self._refuse_retired(client, by_namespace)
        field = f"{topic}:{partition}"
        seen = int(field in self._checkpoints.seen)
        tail = [field, "" if after is None else after, checkpoint, seen]
        if isinstance(client, RedisCluster):
            reply = await self._apply_on_cluster(client, by_namespace, tail)
        else:
            groups, parts = [], []
            for ns, (spec, ns_parts) in by_namespace.items():
                groups.append([prefix(ns, self.name, self.family), spec])
                parts += ns_parts
            reply = await self._scripts["apply"](
                keys=[self._checkpoints.key], args=[*tail, self._spec(groups), b"".join(parts)], client=client
            )
            reply = reply[0].decode(), (reply[1].decode() if len(reply) > 1 else "")
        if reply[0] == "LOST":
            self._checkpoints.seen.discard(field)
            raise CheckpointLost(f"{self.name}: the checkpoint of {topic}[{partition}] is gone from Redis")
        if reply[0] == "STALE":
            raise StaleWrite(f"{self.name}: checkpoint of {topic}[{partition}] is {reply[1] or None}, not {after}")
        self._checkpoints.seen.add(field)

    async def _apply_on_cluster(
        self, client: RedisCluster, by_namespace: dict[str, tuple[list[Any], list[bytes]]], tail: list[Any]
    ) -> tuple[str, str]:
        key = self._checkpoints.key
        stored = await client.hget(key, tail[0])
        if stored is None and tail[3]:
            return "LOST", ""
        current = "" if stored is None else text(stored)
        if current != str(tail[1]):
            return "STALE", current
        if by_namespace:
            calls = []
            for ns, (spec, parts) in by_namespace.items():
                base = prefix(ns, self.name, self.family)
                calls.append(([base + "marks"], [self._spec([[base, spec]]), b"".join(parts)]))
            await self._replicated(client, calls)
        moved = await self._scripts["move"](keys=[key], args=tail, client=client)
        return ("LOST", "") if moved == -1 else ("STALE", "") if moved == -2 else ("OK", "")

    async def _replicated(self, client: RedisCluster, calls: list[tuple[list[str], list[Any]]]) -> None:
        """Each namespace's script in one pipeline, then `WAIT 1` on every master with a replica (as
        `helix_es.stores.redis.cluster.replicated`, by SHA: a batch of many namespaces sends the script
        once per node, not once per namespace)."""
        script = self._scripts["namespace"]
        masters = {}
        for keys, _ in calls:
            nodes = client.nodes_manager.slots_cache.get(key_slot(keys[0].encode()), [])
            if len(nodes) > 1:
                masters[nodes[0].name] = nodes[0]
        for attempt in (1, 2):
            async with client.pipeline(transaction=False) as pipe:
                for keys, args in calls:
                    pipe.evalsha(script.sha, len(keys), *keys, *args)
                for node in masters.values():
                    pipe.execute_command("WAIT", 1, WAIT_MS, target_nodes=node)
                replies = await pipe.execute(raise_on_error=False)
            if attempt == 1 and any(isinstance(r, redis_errors.NoScriptError) for r in replies):
                await client.script_load(script.script)  # a node new since (a failover): load it everywhere
                continue
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            break
        if any(int(acked) < 1 for acked in replies[len(calls) :]):
            await client.nodes_manager.initialize()
            raise redis_errors.ConnectionError(f"{self.name}: no replica acknowledged a write within {WAIT_MS} ms")

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        return await self._checkpoints.read(await self._open(), topic, partition)

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        await self._checkpoints.advance(await self._open(), topic, partition, offset)

    async def mark(self, namespace: str, mark: str) -> int | None:
        client = await self._open()
        value = await client.hget(prefix(namespace, self.name, self.family) + "marks", mark)
        return None if value is None else int(value)

    async def _refuse_retired(self, client: Client, namespaces: Collection[str]) -> None:
        """`RetiredLayout` for the first of `namespaces` that holds data in the retired layout."""
        if self._retired is None:
            return
        for ns in namespaces:
            if (self.name, ns) not in self._current:
                head, marks = self._retired(ns, self.name, self._cluster)
                if await client.exists(*marks):
                    layout = f"the Redis long-term layout of helix-es 0.6 and before ({head}*)"
                    raise RetiredLayout(self.name, ns, layout)
                self._current.add((self.name, ns))

    # --- reads ---

    async def _behind(self, client: Client, want: Position) -> bool:
        applied = await client.hget(self._checkpoints.key, f"{want.topic}:{want.partition}")
        return applied is None or int(applied) < want.offset

    async def scan(self, scan: Scan, want: Position | None = None) -> list[Row] | None:
        table = check_scan(self.tables, scan)
        codec = self._codecs[table.name]
        client = await self._open()
        await self._refuse_retired(client, [scan.namespace])
        head = prefix(scan.namespace, self.name, self.family) + table.name + ":"
        indexes: list[str] = []
        for column, value in scan.where.items():
            kind = table.type(column)
            if not fits(kind, value):
                indexes = []  # no row holds it
                break
            indexes.append(f"{head}l:{column}:{lookup(tokens(kind, canonical=True)(value))}")
        else:
            indexes = indexes or [head + "o"]
        if want is not None and (self._cluster or not indexes or scan.limit == 0):
            if await self._behind(client, want):
                return None
            want = None
        if not indexes or scan.limit == 0:
            return []
        keys: list[str] = [head + "r", *indexes]
        if want is not None:
            keys.append(self._checkpoints.key)
        check = ["", 0] if want is None else [f"{want.topic}:{want.partition}", want.offset]
        needle = "" if scan.contains is None else scan.contains.casefold()
        page = PAGE if needle or scan.limit is None else min(PAGE, scan.limit)
        cursor: bytes = b"+" if scan.newest_first else b"-"
        out: list[Row] = []
        # `where` is decided by the lookup sets (a value names its set), but for a json column's
        # canonical text; `contains` by Python's casefold of the text column, decoded then.
        test = needle or any(table.type(c) == "json" for c in scan.where)
        passes = scan.test(table) if test else None
        ns = scan.namespace
        while True:
            args = [len(indexes), *check, int(scan.newest_first), cursor, page, needle, int(needle.isascii())]
            reply = await self._scripts["scan"](keys=keys, args=args, client=client)
            if reply[0] == b"wait":
                return None
            check = ["", 0]  # the first page waited for `want`: the rest need not
            if len(reply) > 3:
                rows = [LazyRow(codec, ns, value) for value in reply[3].split(ROWS_GAP)]
                if passes is not None:
                    rows = [row for row in rows if passes(row)]
                if scan.limit is not None and len(out) + len(rows) >= scan.limit:
                    return out + rows[: scan.limit - len(out)]
                out += rows
            if int(reply[2]) < page:
                return out
            cursor = b"(" + reply[1]

    # --- drop, close ---

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        client = await self._open()
        heads = sorted({prefix(ns, self.name, self.family) for ns in namespaces})
        if len(heads) == 1:
            await delete_matching(client, _glob(heads[0]) + "*", re.compile(re.escape(heads[0])))
        elif heads:  # one SCAN of the keyspace for them all, not one each
            every = re.compile("|".join(map(re.escape, heads)))
            await delete_matching(client, f"helix:{self.family}:{{*}}:" + _glob(self.name) + ":*", every)
        if self._retired is not None:  # data a namespace still holds in the retired layout goes too
            for ns in namespaces:
                head = self._retired(ns, self.name, self._cluster)[0]
                await delete_matching(client, _glob(head) + "*", re.compile(re.escape(head)))
                self._current.discard((self.name, ns))
        await self._checkpoints.drop(client, topics)

    async def close(self) -> None:
        await self._client.close()
        self._scripts.clear()


def _glob(literal: str) -> str:
    """`literal` matched literally by a SCAN pattern."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", literal)

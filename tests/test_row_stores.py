"""Row stores (memory, PostgreSQL, Redis, Redis Cluster): the suite is
`tests.contracts.row_store.RowStoreContract`; each class here runs it on one adapter."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence

import asyncpg
import pytest
from redis.crc import key_slot

from helix_es.stores.memory.rows import MemoryRows
from helix_es.stores.ports import RowStore
from helix_es.stores.postgres import rows as postgres_rows
from helix_es.stores.postgres.rows import PostgresRows
from helix_es.stores.redis.rows import RedisRows, prefix
from helix_es.views.rows import Cut, Put, Scan, Table, micros_of
from tests.contracts.row_store import TOPIC, OpenRows, RowStoreContract, contents, notes, row


class TestMemoryRows(RowStoreContract):
    @pytest.fixture
    def opened(self) -> OpenRows:
        made: dict[str, MemoryRows] = {}  # the one place a memory store has: itself

        def new(name: str, tables: Sequence[Table]) -> RowStore:
            return made.setdefault(name, MemoryRows(name, tables))

        return new


class TestPostgresRows(RowStoreContract):
    copy_rows: int | None = None  # from how many puts on a run goes by COPY; None: the store's own

    @pytest.fixture
    async def opened(self, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[OpenRows]:
        if self.copy_rows is not None:
            monkeypatch.setattr(postgres_rows, "COPY_ROWS", self.copy_rows)
        made: list[PostgresRows] = []

        def new(name: str, tables: Sequence[Table]) -> RowStore:
            made.append(PostgresRows(postgres_dsn, name, tables))
            return made[-1]

        try:
            yield new
        finally:
            for store in made:
                await store.close()

    async def test_a_cut_and_concurrent_floored_puts_leave_nothing_at_or_below_the_mark(self, opened: OpenRows) -> None:
        # Two stores, two partitions: cuts raise the mark while floored puts land around it; the
        # namespace lock must serialise them, so no row at or below the final mark survives.
        tag = uuid.uuid4().hex[:10]
        table, ns = notes(f"t_{tag}"), f"ns-{tag}"
        view = f"rows-{tag}"
        cutter, putter = opened(view, [table]), opened(view, [table])
        rounds = 40

        async def cuts() -> None:
            for i in range(rounds):
                upto = micros_of(row(ns, 0, "", seconds=i)["at"])
                await cutter.apply(TOPIC, 0, [Cut(table.name, ns, "c", upto)], i + 1, after=i or None)

        async def puts() -> None:
            for i in range(rounds):
                batch = [Put(table.name, row(ns, 1000 * i + j, f"m{i}", seconds=i + j / 10), "c") for j in range(10)]
                await putter.apply(TOPIC, 1, batch, i + 1, after=i or None)

        await asyncio.gather(cuts(), puts())
        mark = await putter.mark(ns, "c")
        assert mark == micros_of(row(ns, 0, "", seconds=rounds - 1)["at"])
        left = await putter.scan(Scan(table.name, ns))
        assert left is not None and left
        assert all(micros_of(r["at"]) > mark for r in left)

    async def test_a_bulk_load_keeps_the_key_alone_until_its_end_or_its_first_scan(
        self, opened: OpenRows, postgres_dsn: str
    ) -> None:
        # Each index kept up row by row doubles a load's cost in the server: an empty target keeps
        # its primary key only; the first scan (a fold reading a session) builds the order and lookup
        # indexes it needs; `build_indexes` builds what is left. A table with rows keeps its indexes.
        tag = uuid.uuid4().hex[:10]
        table, ns = notes(f"t_{tag}"), f"ns-{tag}"
        view = f"rows-{tag}"
        first = opened(view, [table])
        await first.apply(TOPIC, 0, [], 0, after=None)  # the table and its indexes, as a live view makes them
        assert len(await indexes(postgres_dsn, table.name)) == 4  # key, order, lookup, trigram
        load = opened(view, [table])
        assert isinstance(load, PostgresRows)
        await load.start_load()
        assert await indexes(postgres_dsn, table.name) == [f"{table.name}_pkey"]
        await load.apply(
            TOPIC, 0, [Put(table.name, row(ns, i, f"m{i}", session=f"s{i % 3}")) for i in range(50)], 1, after=0
        )
        assert await indexes(postgres_dsn, table.name) == [f"{table.name}_pkey"]
        assert contents(await load.scan(Scan(table.name, ns, where={"session_id": "s1"}, limit=2))) == ["m1", "m4"]
        assert len(await indexes(postgres_dsn, table.name)) == 3  # no trigram index yet
        await load.build_indexes()
        assert len(await indexes(postgres_dsn, table.name)) == 4
        again = opened(view, [table])
        assert isinstance(again, PostgresRows)
        await again.start_load()  # rows are there: the indexes stay
        assert len(await indexes(postgres_dsn, table.name)) == 4
        await again.build_indexes()
        assert contents(await again.scan(Scan(table.name, ns, contains="m4"))) == ["m4"] + [
            f"m{i}" for i in range(40, 50)
        ]

    async def test_a_load_member_whose_first_call_is_a_scan_builds_the_indexes_it_reads_by(
        self, opened: OpenRows, postgres_dsn: str
    ) -> None:
        tag = uuid.uuid4().hex[:10]
        table, ns = notes(f"t_{tag}"), f"ns-{tag}"
        lead = opened(f"rows-{tag}", [table])
        assert isinstance(lead, PostgresRows)
        await lead.start_load()
        await lead.apply(TOPIC, 0, [Put(table.name, row(ns, 0, "m0"))], 0, after=None)
        member = opened(f"rows-{tag}", [table])  # another process of the load: a scan first
        assert isinstance(member, PostgresRows)
        member.defer_indexes()
        assert contents(await member.scan(Scan(table.name, ns, where={"session_id": "s1"}))) == ["m0"]
        assert len(await indexes(postgres_dsn, table.name)) == 3  # key, order, lookup


async def indexes(dsn: str, table: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        found = await conn.fetch(
            "SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = $1::regclass", f'"{table}"'
        )
        return sorted(r[0].strip('"') for r in found)
    finally:
        await conn.close()


class TestPostgresCopyRows(TestPostgresRows):
    """Every run of new rows by COPY (floors filtered before it, an existing key falling back to the INSERT)."""

    copy_rows = 1


class RedisRowsContract(RowStoreContract):
    url_fixture = "redis_url"

    @pytest.fixture
    async def opened(self, request: pytest.FixtureRequest) -> AsyncIterator[OpenRows]:
        url = request.getfixturevalue(self.url_fixture)
        made: list[RedisRows] = []

        def new(name: str, tables: Sequence[Table]) -> RowStore:
            made.append(RedisRows(url, name, tables))
            return made[-1]

        try:
            yield new
        finally:
            for store in made:
                await store.close()

    async def test_a_namespace_is_one_slot_and_drop_leaves_other_views(self, opened: OpenRows) -> None:
        tag = uuid.uuid4().hex[:10]
        table, ns = notes(f"t_{tag}"), f"ns-{tag}"
        store, other = opened(f"rows-{tag}", [table]), opened(f"rows-{tag}-other", [table])
        changes = [Put(table.name, row(ns, i, f"m{i}", session=f"s{i % 2}")) for i in range(3)]
        changes.append(Cut(table.name, ns, "c", 0))
        for s in (store, other):
            await s.apply(TOPIC, 0, changes, 3, after=None)
        assert isinstance(store, RedisRows)
        client = store.redis
        keys = [k async for k in client.scan_iter(match=f"helix:rows:{{{ns}}}:*", count=1000)]
        mine = [k for k in keys if k.decode().startswith(prefix(ns, store.name))]
        assert len(mine) == 6  # rows, order, two session lookups and the list of lookups, marks
        assert {key_slot(k) for k in keys} == {key_slot(ns.encode())}
        await store.drop([ns], [TOPIC])
        assert await store.scan(Scan(table.name, ns)) == [] and await store.checkpoint(TOPIC, 0) is None
        assert contents(await other.scan(Scan(table.name, ns, where={"session_id": "s0"}))) == ["m0", "m2"]
        assert await other.mark(ns, "c") == 0 and await other.checkpoint(TOPIC, 0) == 3

    async def test_documents_read_alone_are_their_text_and_bad_ones_are_refused(self, opened: OpenRows) -> None:
        tag = uuid.uuid4().hex[:10]
        twice = Table(
            f"d_{tag}",
            columns=(("namespace", "text"), ("k", "int"), ("first", "json"), ("label", "text"), ("second", "json")),
            key=("namespace", "k"),
            order=("namespace", "k"),
            lookups=("label",),
        )
        store, ns = opened(f"rows-{tag}", [twice]), f"ns-{tag}"
        spaced = '{ "a" : [1, 2],\n "b": "\\u00fc\u00fc" }'  # kept as put: spacing, escapes, newlines
        rows = [
            {"namespace": ns, "k": 0, "first": spaced, "label": "x", "second": None},
            {"namespace": ns, "k": 1, "first": None, "label": "y", "second": "[]"},
        ]
        await store.apply(TOPIC, 0, [Put(twice.name, r) for r in rows], 1, after=None)
        got = await store.scan(Scan(twice.name, ns))
        assert got is not None
        assert [(r["first"], r["second"]) for r in got] == [(spaced, None), (None, "[]")]  # cut out, undecoded
        assert got == rows and [dict(r) for r in got] == rows and [r["label"] for r in got] == ["x", "y"]
        for bad in ("", "[1,\x00 2]", "\x01"):  # no JSON document is empty or holds a bare control character
            with pytest.raises(ValueError, match="not a JSON document"):
                await store.apply(TOPIC, 0, [Put(twice.name, rows[0] | {"k": 2, "second": bad})], 2, after=1)
        assert len(await store.scan(Scan(twice.name, ns)) or []) == 2 and await store.checkpoint(TOPIC, 0) == 1


class TestRedisRows(RedisRowsContract):
    pass


class TestRedisClusterRows(RedisRowsContract):
    url_fixture = "redis_cluster_url"

"""The long-term search's pg_trgm index: the plan uses it, and results are those of the plain scan.

A table of its own per test (memory.table), so the planner's statistics are its rows only.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from helix_es import Message
from helix_es.model.events import Event, MessageAdded, Position, Record
from helix_es.projection.long_term import LongTermRows
from helix_es.stores.ports import SessionKey
from helix_es.stores.postgres import trigrams
from helix_es.stores.postgres.rows import PostgresRows
from helix_es.stores.postgres.rows_sql import index_name
from helix_es.stores.postgres.trigrams import probe, words
from helix_es.views.long_term_rows import tables
from helix_es.views.rows import Scan
from tests.conftest import unique

T0 = datetime(2030, 1, 1, tzinfo=UTC)
WORDS = ["flight", "hotel", "invoice", "meeting", "passport", "train", "budget", "dentist"]
ODD = ["Zebra 100% done", "zebra_crossing", r"back\slash zebra", "ZEBRA", "a 50%_off deal"]
COLUMNS = ["namespace", "created_at", "topic", "partition", "offset", "session_id", "role", "content", "message"]


def contents(n: int) -> list[str]:
    rows = [f"note {i} about the {WORDS[i % len(WORDS)]}" for i in range(n)]
    for j, text in enumerate(ODD):
        rows[(j + 1) * n // (len(ODD) + 1)] = text
    return rows


def rows_store(dsn: str, table: str | None = None) -> LongTermRows:
    table = table or unique("lt_trgm").replace("-", "_")
    return LongTermRows(PostgresRows(dsn, f"long-term-{table}", tables(table)), table)


def pg(store: LongTermRows) -> PostgresRows:
    assert isinstance(store.store, PostgresRows)
    return store.store


async def filled(dsn: str, n: int) -> tuple[LongTermRows, str, list[str]]:
    store = rows_store(dsn)
    ns, texts = unique("ns"), contents(n)
    await store.rows(ns)  # the schema
    conn = await asyncpg.connect(dsn)
    try:
        await conn.copy_records_to_table(
            store.table,
            records=[
                (ns, T0 + timedelta(seconds=i), "t", 0, i, "s", "user", t, Message("user", t).to_json())
                for i, t in enumerate(texts)
            ],
            columns=COLUMNS,
        )
        await conn.execute(f'ANALYZE "{store.table}"')
    finally:
        await conn.close()
    return store, ns, texts


async def drop(dsn: str, store: LongTermRows) -> None:
    await store.close()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'DROP TABLE IF EXISTS "{store.table}", "{store.table}_retracted"')
    finally:
        await conn.close()


async def explain(dsn: str, store: LongTermRows, ns: str, query: str) -> str:
    scan = Scan(store.table, ns, contains=query, limit=10, columns=("message",))
    sql, args = pg(store)._sql[store.table].select(scan, ["message"], None, want=False)
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("EXPLAIN " + sql, *args)
        return "\n".join(r[0] for r in rows)
    finally:
        await conn.close()


async def found_as_in_python(
    store: LongTermRows, ns: str, texts: list[str], queries: list[str], limits: tuple[int, ...]
) -> None:
    """Every query's results are the texts holding it, case folded, oldest first."""
    for query in queries:
        for limit in limits:
            got = await store.search(SessionKey(ns, "s"), query, limit, None)
            want = [t for t in texts if query.lower() in t.lower()][:limit]
            assert got is not None and [m.content for m in got] == want, (query, limit)


async def test_a_rare_word_is_found_through_the_trigram_index(postgres_dsn: str) -> None:
    store, ns, _ = await filled(postgres_dsn, 20_000)
    try:
        plan = await explain(postgres_dsn, store, ns, "zebra")
        assert "Bitmap Index Scan" in plan and index_name(store.table, "trgm") in plan, plan
    finally:
        await drop(postgres_dsn, store)


async def test_results_are_the_plain_scans_for_every_query(postgres_dsn: str) -> None:
    store, ns, texts = await filled(postgres_dsn, 3000)
    try:
        # Under 3 characters the index cannot narrow; wildcards and the escape are literal.
        queries = ["zebra", "ZEB", "ze", "z", "%", "_", "%_", "\\", "100%", "a_c", "hotel", "note 12", "x" * 40]
        await found_as_in_python(store, ns, texts, queries, (3, 1000))
    finally:
        await drop(postgres_dsn, store)


async def test_projectors_starting_together_make_one_index(postgres_dsn: str) -> None:
    table = unique("lt_trgm").replace("-", "_")
    stores = [rows_store(postgres_dsn, table) for _ in range(4)]
    try:
        await asyncio.gather(*(s.rows("ns") for s in stores))
        conn = await asyncpg.connect(postgres_dsn)
        try:
            n = await conn.fetchval(
                "SELECT count(*) FROM pg_index i JOIN pg_opclass o ON o.oid = i.indclass[0] "
                "WHERE i.indrelid = $1::regclass AND o.opcname = 'gin_trgm_ops' AND i.indisvalid",
                f'"{table}"',
            )
            assert n == 1
        finally:
            await conn.close()
    finally:
        await drop(postgres_dsn, stores[0])
        for s in stores[1:]:
            await s.close()


def test_the_index_probe_is_the_rare_pieces_of_the_words_in_order() -> None:
    frequent = frozenset({"ref", "eet", "the"})
    assert words("ref-653159 hé_llo, 42x") == ["ref", "653159", "hé", "llo", "42x"]
    assert probe("ref-653159", frequent) == "%653159%"
    assert probe("the meeting at 10", frequent) == "%eting%"  # 'mee' is rare but shorter than 'eting'
    assert probe("ref", frequent) is None  # nothing rare: the whole query
    assert probe("hotel", frequent) is None  # the probe would be the query itself
    assert probe("ref-653159", frozenset()) is None  # a small table, or no sample
    assert probe("50%_off the deal", frequent) == "%off%deal%"  # wildcards never reach it; "50" is too short


async def test_a_query_with_frequent_trigrams_is_probed_by_its_rare_pieces_and_rechecked(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trigrams, "SMALL_TABLE", 0)  # sample this small table as if it were big
    store, ns, _ = await filled(postgres_dsn, 3000)
    texts = [f"ref-{i:06d}: a note about the {WORDS[i % len(WORDS)]}" for i in range(3000)]
    # Rows holding the rare pieces but not the query: only the recheck keeps them out.
    texts[100] = "000042 ref- pieces in the other order"
    texts[200] = "ref-x000042 a piece with something between"
    texts[300] = "REF-000043 upper case still matches"
    texts[400] = r"ref_000044 and 100% ref\000045"
    conn = await asyncpg.connect(postgres_dsn)
    try:
        await conn.execute(
            f'UPDATE "{store.table}" r SET content = u.t, message = u.m::jsonb'
            ' FROM unnest($1::text[], $2::text[], $3::bigint[]) u(t, m, o) WHERE r."offset" = u.o',
            texts,
            [Message("user", t).to_json() for t in texts],
            list(range(len(texts))),
        )
        await conn.execute(f'ANALYZE "{store.table}"')
    finally:
        await conn.close()
    try:
        rows = pg(store)
        frequent = await rows._frequent[store.table].get(await rows._pool())
        assert {"ref", "not", "the"} <= frequent, sorted(frequent)[:50]
        queries = ["ref-000042", "ref-000043", "ref_000044", "ref-000044", "ref\\000045", "100% ref", "ref-0001",
                   "note about", "ref-000042: a note", "000042", "pieces in the other"]  # fmt: skip
        probed = [q for q in queries if probe(q, frequent) is not None]
        assert len(probed) >= 5, probed
        await found_as_in_python(store, ns, texts, queries, (2, 1000))
    finally:
        await drop(postgres_dsn, store)


async def trigram_indexes(dsn: str, table: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        n: int = await conn.fetchval(
            "SELECT count(*) FROM pg_index i JOIN pg_opclass o ON o.oid = i.indclass[0] "
            "WHERE i.indrelid = $1::regclass AND o.opcname = 'gin_trgm_ops' AND i.indisvalid",
            f'"{table}"',
        )
        return n
    finally:
        await conn.close()


def at(offset: int) -> Position:
    return Position("t", 0, offset)


async def test_a_bulk_load_builds_the_index_once_at_its_end(postgres_dsn: str) -> None:
    """A rebuild's target defers the index; `build_indexes` makes it over the rows, and search finds the same."""
    store = rows_store(postgres_dsn)
    store.defer_indexes()
    ns = unique("ns")
    texts = contents(300)
    records = [
        Record(
            Event(ns, "s", MessageAdded(Message("user", t)), timestamp=T0 + timedelta(seconds=i)), Position("t", 0, i)
        )
        for i, t in enumerate(texts)
    ]
    try:
        await store.apply(records, live=False)
        assert await trigram_indexes(postgres_dsn, store.table) == 0
        before = await store.search(SessionKey(ns, "s"), "zebra", 10, None)
        await store.build_indexes()
        await store.build_indexes()  # once: it is there
        assert await trigram_indexes(postgres_dsn, store.table) == 1
        assert await store.search(SessionKey(ns, "s"), "zebra", 10, None) == before
        assert before is not None and len(before) == 4
    finally:
        await drop(postgres_dsn, store)


async def index_oid(dsn: str, table: str) -> int | None:
    conn = await asyncpg.connect(dsn)
    try:
        oid: int | None = await conn.fetchval(
            "SELECT i.indexrelid::int FROM pg_index i JOIN pg_opclass o ON o.oid = i.indclass[0] "
            "WHERE i.indrelid = $1::regclass AND o.opcname = 'gin_trgm_ops'",
            f'"{table}"',
        )
        return oid
    finally:
        await conn.close()


async def test_a_load_into_an_empty_table_drops_the_index_left_there_and_a_table_with_rows_keeps_it(
    postgres_dsn: str,
) -> None:
    """An earlier target of the same name, its rows dropped, left its index: the load would keep it up
    row by row (10x the COPY's CPU), so it goes; rows there (a rerun, another deployment) keep theirs."""
    table = unique("lt_trgm").replace("-", "_")
    left = rows_store(postgres_dsn, table)
    await left.rows("ns")  # an earlier target's table, with its index
    oid = await index_oid(postgres_dsn, table)
    assert oid is not None
    load = rows_store(postgres_dsn, table)
    try:
        await load.start_load()
        assert await index_oid(postgres_dsn, table) is None
        ns = unique("ns")
        records = [
            Record(Event(ns, "s", MessageAdded(Message("user", t)), timestamp=T0 + timedelta(seconds=i)), at(i))
            for i, t in enumerate(contents(300))
        ]
        await load.apply(records, live=False)
        assert await index_oid(postgres_dsn, table) is None
        await load.build_indexes()
        assert await trigram_indexes(postgres_dsn, table) == 1
        again = rows_store(postgres_dsn, table)
        try:
            kept = await index_oid(postgres_dsn, table)
            await again.start_load()  # rows are there: the index stays
            assert await index_oid(postgres_dsn, table) == kept
        finally:
            await again.close()
        assert len(await load.search(SessionKey(ns, "s"), "zebra", 10, None) or []) == 4
    finally:
        await left.close()
        await drop(postgres_dsn, load)

r"""PostgreSQL rows (`helix_es.views.rows`): any view's tables, applied with their checkpoint in one transaction.

Schema (made on first use, `CREATE ... IF NOT EXISTS` under the schema lock every helix-es schema
creator takes):

- one table per `Table`, named as it is (quoted, as every column): text columns of the key or the
  order are `COLLATE "C"` (bytewise, as the other stores order), the others keep the database's
  collation so that `ILIKE` folds their case; int is bigint, time timestamptz, json jsonb (the
  document's text goes in and comes out: no decoding on the way). The key is the primary key;
  the order a unique index (the read order); each lookup an index `(namespace, column, order...)`;
  the text column a pg_trgm GIN index where the extension is installed (no pending list: every
  search would scan it).
- `helix_row_marks (view, namespace, mark, value)`: the marks cuts raise (µs for a time floor).
- `helix_checkpoints`: shared with every other view.

`apply` is one transaction: the checkpoint row is locked (or, when `after` is None, inserted, so a
concurrent first write finds it) and compared with `after`; namespaces with a floored put or a cut
take a transaction-scoped advisory lock each, in order (exclusive for a cut, shared for puts), so a
cut from another partition and a floored put serialise while puts load side by side; then the
changes run in order, consecutive puts or deletes of one table as one statement over arrays, and the
checkpoint moves. `scan` is one statement: the checkpoint of `want` and, only if it covers it, the
rows, as one array (the rows' query is planned as without `want`), of the columns the scan names
only (a json column's text passed through). A `contains` scan asks the trigram index for the query's
rare pieces only (`helix_es.stores.postgres.trigrams`: a trigram most rows hold costs the index more
than it saves) and rechecks the whole query.

A table that exists is checked before the schema runs: one of another shape is refused
(`SchemaMismatch`) and left as it is; one in a layout the view's data once had
(`helix_es.stores.postgres.retired`) refuses the view with `RetiredLayout`, and `drop` deletes
from it. A rebuild's target is a bulk load (`start_load`, `defer_indexes`, `build_indexes`): its
rows go in under the primary key alone, and the order, lookup and trigram indexes are built over
them once at the end, before readers can be switched to it (the order and lookup ones earlier if a
fold reads rows during the load); its transactions commit without waiting for the disk.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from helix_es.model.errors import HelixError
from helix_es.model.events import Position
from helix_es.stores.ports import RetiredLayout, StaleWrite
from helix_es.stores.postgres import trigrams
from helix_es.stores.postgres.pool import (
    ADVANCE,
    CHECKPOINTS,
    SCHEMA_LOCK,
    Pg,
    build_index,
    delete_rows,
    drop_checkpoints,
    transaction,
)
from helix_es.stores.postgres.retired import RetiredTables
from helix_es.stores.postgres.rows_sql import TableSql, q
from helix_es.views.rows import (
    NAMESPACE,
    Cut,
    Delete,
    Put,
    Row,
    RowChange,
    Scan,
    Table,
    check_changes,
    check_scan,
    namespace_of,
)

_MARKS = """
CREATE TABLE IF NOT EXISTS helix_row_marks (
    view text NOT NULL,
    namespace text NOT NULL,
    mark text NOT NULL,
    value bigint NOT NULL,
    PRIMARY KEY (view, namespace, mark)
);
"""
_FOLDING = """
SELECT collname FROM pg_collation WHERE collname IN ('und-x-icu', 'C.utf8', 'C.UTF-8')
ORDER BY collname = 'und-x-icu' DESC, collname LIMIT 1
"""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
BUILD_MEMORY = "256MB"  # maintenance_work_mem of a load's index builds
COPY_ROWS = 200  # from this many puts on, a run of new rows goes by COPY
_FORMAT = {"text": "text", "int": "bigint", "time": "timestamp with time zone", "json": "jsonb"}  # format_type()
_COLUMNS_OF = """
SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute
WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped
"""


log = logging.getLogger(__name__)


class SchemaMismatch(HelixError):
    """A table of a row view exists with other columns than helix-es makes; it is not altered."""


class PostgresRows:
    kind = "postgres"

    def __init__(self, dsn: str, name: str, tables: Sequence[Table], *, retired: RetiredTables | None = None) -> None:
        """`retired`: a layout this view's data once had (`helix_es.stores.postgres.retired`): a table
        in it refuses the view, a namespace its marks name refuses that namespace (`RetiredLayout`),
        and `drop` deletes from both."""
        self.dsn = dsn
        self.name = name
        self.tables: Mapping[str, Table] = {t.name: t for t in tables}
        self._sql: dict[str, TableSql] = {}  # made once the server's collations are known
        self._frequent = {t.name: trigrams.FrequentTrigrams(q(t.name), q(t.text)) for t in tables if t.text}
        self._schema = self._bare = ""
        self._retired = retired
        self._old_marks = False  # the retired layout's marks name namespaces of this view
        self._current: set[tuple[str, str]] = set()  # (view, namespace) known to hold no retired data
        self._deferred = False  # a bulk load: indexes wait for build_indexes
        self._indexed = False  # the load's order and lookup indexes are built (a scan needed them)
        self._owned: set[str] = set()  # tables start_load found empty: the load's own, indexed without CONCURRENTLY
        self.pg = Pg(dsn)

    async def _trgm(self, conn: asyncpg.Connection) -> None:
        """Trigram indexes where pg_trgm is installed: only a speed-up, as ILIKE is exact either way."""
        if self._deferred:
            return
        if await conn.fetchval("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm')"):
            # under the schema lock: two stores of one view opened at once would both create the index
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", SCHEMA_LOCK)
                for sql in self._sql.values():
                    if sql.trgm is not None:
                        await conn.execute(sql.trgm)

    async def _pool(self) -> asyncpg.Pool:
        if not self._schema:
            pool = await self.pg.pool("SELECT 1")
            async with pool.acquire() as conn:
                retired = await self._layout(conn)
                if retired:
                    assert self._retired is not None
                    raise RetiredLayout(self.name, None, self._retired.layout(retired[0]))
                if self._retired is not None and await conn.fetchval(
                    "SELECT to_regclass($1) IS NOT NULL", self._retired.marks
                ):
                    self._old_marks = await conn.fetchval(
                        f"SELECT EXISTS (SELECT 1 FROM {self._retired.marks} WHERE view = $1)", self.name
                    )
                # ILIKE folds case as the column's collation says: a database made with the C locale folds
                # ASCII only, so a text column takes a Unicode-aware collation where the server has one.
                folding = await conn.fetchval(_FOLDING)
            self._sql = {name: TableSql(t, folding) for name, t in self.tables.items()}
            self._schema = CHECKPOINTS + _MARKS + "\n".join(s.schema for s in self._sql.values())
            self._bare = CHECKPOINTS + _MARKS + "\n".join(s.bare for s in self._sql.values())
        # a bulk load makes no index but the key: `start_load` dropped those of empty tables
        return await self.pg.pool(self._bare if self._deferred else self._schema, check=self._trgm)

    async def _layout(self, conn: asyncpg.Connection) -> list[str]:
        """The view's tables that exist in the retired layout; `SchemaMismatch` for one of another shape."""
        retired = []
        for table in self.tables.values():
            found = dict(await conn.fetch(_COLUMNS_OF, q(table.name)))
            want = {c: _FORMAT[k] for c, k in table.columns}
            if not found or found == want:
                continue
            if self._retired is not None and found == dict(self._retired.columns):
                retired.append(table.name)
                continue
            missing = [c for c in want if c not in found]
            other = [c for c in want if c in found and found[c] != want[c]]
            raise SchemaMismatch(
                f"table {table.name!r} exists with columns helix-es did not make for view {self.name!r}"
                + (f" (missing: {', '.join(missing)})" if missing else "")
                + (f" (of another type: {', '.join(other)})" if other else "")
                + (f" (not its own: {', '.join(c for c in found if c not in want)})" if set(found) - set(want) else "")
                + "; it is left as it is: give the view another table (`table:` in its config)"
            )
        return retired

    async def _refuse_retired(self, conn: asyncpg.Connection | asyncpg.Pool, namespaces: Collection[str]) -> None:
        """`RetiredLayout` for the first of `namespaces` the retired layout's marks name."""
        if not self._old_marks:
            return
        fresh = sorted({ns for ns in namespaces if (self.name, ns) not in self._current})
        if not fresh:
            return
        assert self._retired is not None
        held = await conn.fetchval(
            f"SELECT min(namespace) FROM {self._retired.marks} WHERE view = $1 AND namespace = ANY($2::text[])",
            self.name,
            fresh,
        )
        if held is not None:
            raise RetiredLayout(self.name, held, self._retired.layout())
        self._current.update((self.name, ns) for ns in fresh)

    @staticmethod
    async def _drop_empty(conn: asyncpg.Connection, retired: Collection[str]) -> None:
        """Tables of the view left in the retired layout with no rows go, so that their names are the view's again."""
        for table in retired:
            await conn.execute(f"LOCK TABLE {q(table)} IN ACCESS EXCLUSIVE MODE")
            if not await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM {q(table)})"):
                await conn.execute(f"DROP TABLE {q(table)}")

    # --- a bulk load (projectors.rebuild.bulk) ---

    def defer_indexes(self) -> None:
        """A bulk load (a rebuild's target, before readers use it): the order, lookup and trigram
        indexes of the tables `start_load` found empty wait for `build_indexes` (or for the load's
        first scan, which needs the first two). Called before first use: an index kept up row by row
        costs more than the write it slows (a GIN index ten times); one built over the rows at the
        end, far less."""
        self._deferred = True

    async def start_load(self) -> None:
        """A bulk load begins (a rebuild's lead, before any process folds into the target). A table
        in the retired layout with no rows (a target dropped before the upgrade) goes; the indexes
        but the primary key of a table with no rows (an earlier target of the same name, its rows
        dropped, or one just made) go too, and `build_indexes` makes them again with a plain build. A
        table with rows (a rerun after a crash, another deployment's) keeps its indexes. Defers the
        indexes."""
        self.defer_indexes()
        async with transaction(self.dsn) as conn:
            await self._drop_empty(conn, await self._layout(conn))
        pool = await self._pool()
        for sql in self._sql.values():
            deferred = [name for name, _ in sql.secondary] + ([sql.trgm_name] if sql.trgm_create else [])
            try:
                async with pool.acquire() as conn, conn.transaction():
                    # writers wait while it looks, so no row arrives between the look and the drop
                    await conn.execute(f"LOCK TABLE {q(sql.table.name)} IN SHARE ROW EXCLUSIVE MODE")
                    if await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM {q(sql.table.name)})"):
                        continue
                    for name in deferred:
                        await conn.execute(f"DROP INDEX IF EXISTS {name}")
            except asyncpg.InsufficientPrivilegeError as e:  # not the table's owner: the load keeps them up, slower
                log.warning("rows %s: its indexes stay during the load (%s)", sql.table.name, e)
                continue
            self._owned.add(sql.table.name)

    async def _build(self, sql: TableSql, name: str, create: str) -> None:
        """Index `name` of `sql`'s table by `create`, unless it is there (if another process is
        building it, once it has): concurrently where the table is not the load's own."""
        if sql.table.name not in self._owned:  # others may write it: they go on meanwhile
            create = create.replace("CREATE INDEX", "CREATE INDEX CONCURRENTLY", 1).replace(
                "CREATE UNIQUE INDEX", "CREATE UNIQUE INDEX CONCURRENTLY", 1
            )
        found = f"FROM pg_index WHERE indexrelid = to_regclass('{name}')"
        valid, invalid = (
            f"SELECT EXISTS (SELECT 1 {found} AND indisvalid)",
            f"SELECT array(SELECT '{name}' {found} AND NOT indisvalid)",
        )
        pool = await self._pool()
        async with pool.acquire() as conn:
            # a GIN build sorts in this memory: at the default 64 MB it flushes and merges far more
            await conn.execute(f"SET maintenance_work_mem = '{BUILD_MEMORY}'")
            try:
                while not await build_index(conn, f"{name} {sql.table.name}", valid, invalid, create):
                    await asyncio.sleep(0.2)
            finally:
                await conn.execute("RESET maintenance_work_mem")

    async def _build_all(self, builds: Sequence[tuple[TableSql, str, str]]) -> None:
        """Indexes (`_build`'s arguments) built side by side where their table is the load's own, one
        server process each; one after another where not (concurrent builds of one table deadlock)."""

        async def in_turn() -> None:
            for build in builds:
                if build[0].table.name not in self._owned:
                    await self._build(*build)

        owned = [self._build(*build) for build in builds if build[0].table.name in self._owned]
        await asyncio.gather(in_turn(), *owned)

    def _secondary(self) -> list[tuple[TableSql, str, str]]:
        return [] if self._indexed else [(s, n, create) for s in self._sql.values() for n, create in s.secondary]

    async def _readable(self) -> None:
        """During a bulk load, the order and lookup indexes before the first scan (a fold's read of a
        session): without them it would read the whole table."""
        if self._deferred and not self._indexed:
            await self._pool()  # the tables' SQL, which a store whose first call is a scan has not made yet
            await self._build_all(self._secondary())
            self._indexed = True

    async def build_indexes(self) -> None:
        """The indexes a bulk load deferred, built over the rows now there, and the tables' statistics."""
        pool = await self._pool()
        trgm = await pool.fetchval("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm')")
        text = [(s, s.trgm_name, s.trgm_create) for s in self._sql.values() if s.trgm_create and trgm]
        await self._build_all(self._secondary() + text)
        self._indexed = True
        # statistics of the rows loaded, before readers come: else the planner guesses the tables' size
        await asyncio.gather(*(pool.execute(f"ANALYZE {q(table)}") for table in self.tables))
        self._deferred = False

    async def apply(
        self, topic: str, partition: int, changes: Sequence[RowChange], checkpoint: int, *, after: int | None
    ) -> None:
        check_changes(self.tables, changes)
        runs, cut, floored = _runs(changes)
        pool = await self._pool()
        async with pool.acquire() as conn, conn.transaction():
            if self._deferred:
                # A load's commits wait for no disk flush: one lost to a server crash loses its checkpoint
                # with it (folded again), and the switch to the target commits synchronously, which
                # flushes every commit before it.
                await conn.execute("SET LOCAL synchronous_commit = off")
            if self._old_marks:
                await self._refuse_retired(conn, {namespace_of(c) for c in changes})
            await self._claim(conn, topic, partition, after)
            # A cut of a namespace waits for its floored puts, from any partition, and they for it;
            # floored puts share the lock, so writers of other partitions load side by side.
            for ns in sorted(cut | floored):
                lock = "pg_advisory_xact_lock" if ns in cut else "pg_advisory_xact_lock_shared"
                await conn.execute(f"SELECT {lock}(hashtext($1), hashtext($2))", self.name, ns)
            for run in runs:
                await self._run(conn, run)
            await conn.execute(ADVANCE, self.name, topic, partition, checkpoint)

    async def _claim(self, conn: asyncpg.Connection, topic: str, partition: int, after: int | None) -> None:
        if after is None:  # a first write: the row it inserts makes a concurrent first write wait, then refuse
            made = await conn.fetchval(
                'INSERT INTO helix_checkpoints (view, topic, partition, "offset") VALUES ($1, $2, $3, -1)'
                " ON CONFLICT DO NOTHING RETURNING true",
                self.name,
                topic,
                partition,
            )
            if not made:
                raise StaleWrite(f"{self.name}: {topic}[{partition}] has a checkpoint now; reload")
            return
        stored = await conn.fetchval(
            'SELECT "offset" FROM helix_checkpoints WHERE view = $1 AND topic = $2 AND partition = $3 FOR UPDATE',
            self.name,
            topic,
            partition,
        )
        if stored != after:
            raise StaleWrite(f"{self.name}: checkpoint of {topic}[{partition}] is {stored}, not {after}; reload")

    async def _run(self, conn: asyncpg.Connection, run: Sequence[RowChange]) -> None:
        first = run[0]
        sql = self._sql[first.table]
        if isinstance(first, Cut):
            # consecutive cuts of a namespace are its highest: one statement each, not one per cut,
            # which would walk the rows the cuts before it deleted, still in the index until a vacuum
            highest: dict[tuple[str, str], Cut] = {}
            for cut in run:
                assert isinstance(cut, Cut)
                seen = highest.get((cut.namespace, cut.mark))
                if seen is None or cut.upto > seen.upto:
                    highest[(cut.namespace, cut.mark)] = cut
            for cut in highest.values():
                value = await conn.fetchval(
                    "INSERT INTO helix_row_marks (view, namespace, mark, value) VALUES ($1, $2, $3, $4)"
                    " ON CONFLICT (view, namespace, mark) DO UPDATE"
                    " SET value = greatest(helix_row_marks.value, excluded.value) RETURNING value",
                    self.name,
                    cut.namespace,
                    cut.mark,
                    cut.upto,
                )
                await conn.execute(sql.cut, cut.namespace, value)
        elif isinstance(first, Delete):
            keys = [[c.row[k] for c in run if isinstance(c, Delete)] for k in sql.table.key]
            await conn.execute(sql.delete, *keys)
        elif isinstance(first, Put):
            rows = [c.row for c in run if isinstance(c, Put)]
            if first.replace:  # one statement may not update a row twice: the last put of a key wins
                rows = list({sql.table.key_of(r): r for r in rows}.values())
            elif len(rows) >= COPY_ROWS and await self._copy(conn, sql, rows, first.floor):
                return
            statement = sql.replace if first.replace else sql.insert
            await conn.execute(statement, self.name, first.floor, *sql.arrays(rows))

    async def _copy(self, conn: asyncpg.Connection, sql: TableSql, rows: Sequence[Row], floor: str | None) -> bool:
        """Insert new `rows` by COPY (a rebuild's batches: several times the rows/s of INSERT), those at
        or below their namespace's `floor` mark left out as the INSERT leaves them (the marks stay
        fixed: apply holds the namespaces' locks). False, nothing written, if a row's key is there
        already (its checkpoint was lost, or one key twice): the INSERT, which skips them, goes instead."""
        table = sql.table
        if floor is not None:
            assert table.floor is not None
            marks = dict(
                await conn.fetch(
                    "SELECT namespace, value FROM helix_row_marks WHERE view = $1 AND mark = $2"
                    " AND namespace = ANY($3::text[])",
                    self.name,
                    floor,
                    list({r["namespace"] for r in rows}),
                )
            )
            if marks:
                at = table.floor
                if table.type(at) == "time":  # compared as times: no conversion a row
                    marks = {ns: _EPOCH + timedelta(microseconds=v) for ns, v in marks.items()}
                rows = [r for r in rows if (m := marks.get(r["namespace"])) is None or r[at] > m]
        columns = [c for c, _ in table.columns]
        try:
            async with conn.transaction():  # a savepoint, for the INSERT after it
                await conn.copy_records_to_table(table.name, records=map(sql.values, rows), columns=columns)
        except asyncpg.UniqueViolationError:
            return False
        return True

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        pool = await self._pool()
        value = await pool.fetchval(
            'SELECT "offset" FROM helix_checkpoints WHERE view = $1 AND topic = $2 AND partition = $3',
            self.name,
            topic,
            partition,
        )
        return None if value is None or value < 0 else int(value)

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        pool = await self._pool()
        await pool.execute(ADVANCE, self.name, topic, partition, offset)

    async def scan(self, scan: Scan, want: Position | None = None) -> list[Row] | None:
        table = check_scan(self.tables, scan)
        await self._readable()
        pool = await self._pool()
        await self._refuse_retired(pool, [scan.namespace])
        columns = scan.columns or [c for c, _ in table.columns]
        probe = None
        if scan.contains is not None and table.text is not None:
            probe = trigrams.probe(scan.contains, await self._frequent[table.name].get(pool))
        sql, args = self._sql[scan.table].select(scan, columns, probe, want is not None)
        if want is None:
            return [dict(zip(columns, r, strict=True)) for r in await pool.fetch(sql, *args)]
        _, found = await pool.fetchrow(sql, self.name, want.topic, want.partition, want.offset, *args)
        if found is None:
            return None
        if len(columns) == 1:
            return [{columns[0]: v} for v in found]
        return [dict(zip(columns, r, strict=True)) for r in found]

    async def mark(self, namespace: str, mark: str) -> int | None:
        pool = await self._pool()
        await self._refuse_retired(pool, [namespace])
        value = await pool.fetchval(
            "SELECT value FROM helix_row_marks WHERE view = $1 AND namespace = $2 AND mark = $3",
            self.name,
            namespace,
            mark,
        )
        return None if value is None else int(value)

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        # No schema made: a table in the retired layout is dropped from as well, and goes once empty.
        ns = list(namespaces)
        async with transaction(self.dsn) as conn:
            retired = await self._layout(conn)  # a table of another shape is refused before any delete
            for table in self.tables:
                await delete_rows(conn, table, '"namespace" = ANY($1::text[])', ns)
            await self._drop_empty(conn, retired)
            if self._retired is not None:
                await delete_rows(conn, self._retired.marks, "view = $1 AND namespace = ANY($2::text[])", self.name, ns)
            await delete_rows(conn, "helix_row_marks", "view = $1 AND namespace = ANY($2::text[])", self.name, ns)
            await drop_checkpoints(conn, self.name, topics)

    async def close(self) -> None:
        for frequent in self._frequent.values():
            await frequent.close()
        await self.pg.close()


def _runs(changes: Sequence[RowChange]) -> tuple[list[list[RowChange]], set[str], set[str]]:
    """The changes in runs of one statement each (puts of one table with one floor and mode, deletes
    of one table, cuts), and the namespaces cut and those with a floored put."""
    runs: list[list[RowChange]] = []
    cut: set[str] = set()
    floored: set[str] = set()
    last: tuple[Any, ...] = ()
    for change in changes:
        key: tuple[Any, ...]
        if isinstance(change, Put):
            key = (Put, change.table, change.floor, change.replace)
            if change.floor is not None:
                floored.add(change.row[NAMESPACE])
        elif isinstance(change, Cut):
            key = (Cut, change.table)
            cut.add(change.namespace)
        else:
            key = (Delete, change.table)
        if key != last:
            runs.append([])
            last = key
        runs[-1].append(change)
    return runs, cut, floored

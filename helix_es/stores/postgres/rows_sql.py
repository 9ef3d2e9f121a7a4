"""One row table's SQL for `helix_es.stores.postgres.rows`: its schema (columns, key, order and lookup
indexes, the trigram index) and its statements (array upserts and deletes, cuts, the scan's select).
Names are identifiers `Table` checked, always double-quoted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from helix_es.stores.postgres.pool import (
    index_if_missing,
)
from helix_es.views.long_term import escape_like
from helix_es.views.rows import (
    Row,
    Scan,
    Table,
)

SQL_TYPE = {"text": "text", "int": "bigint", "time": "timestamptz", "json": "jsonb"}
EPOCH = "'1970-01-01T00:00:00Z'::timestamptz"


def q(name: str) -> str:
    return f'"{name}"'


def index_name(table: str, what: str) -> str:
    """An index name that fits PostgreSQL's 63 bytes whatever the table's name."""
    return f"hxr_{hashlib.sha256(f'{table}/{what}'.encode()).hexdigest()[:24]}"


class TableSql:
    """One table's statements."""

    def __init__(self, table: Table, folding: str | None) -> None:
        self.table = table
        t = q(table.name)
        ordered = set(table.key) | set(table.order)
        cols = []
        for name, kind in table.columns:
            sql = SQL_TYPE[kind]
            if kind == "text" and name in ordered:
                sql += ' COLLATE "C"'
            elif name == table.text and folding is not None:
                sql += f" COLLATE {q(folding)}"
            cols.append(f"{q(name)} {sql}{'' if kind == 'json' else ' NOT NULL'}")
        order = ", ".join(q(c) for c in table.order)
        self.bare = f"CREATE TABLE IF NOT EXISTS {t} ({', '.join(cols)}, PRIMARY KEY ({', '.join(map(q, table.key))}));"
        # the read order and the lookups: (name, CREATE INDEX), which a bulk load builds at the end
        name = index_name(table.name, "order")
        self.secondary = [(name, f"CREATE UNIQUE INDEX {name} ON {t} ({order})")]
        for column in table.lookups:
            name = index_name(table.name, f"lookup {column}")
            tail = ", ".join(q(c) for c in table.order[1:])
            self.secondary.append((name, f'CREATE INDEX {name} ON {t} ("namespace", {q(column)}, {tail})'))
        self.schema = "\n".join([self.bare, *(index_if_missing(n, create) for n, create in self.secondary)])
        self.trgm_name = index_name(table.name, "trgm")
        # no pending list, which every search would scan (priced as a full scan until a vacuum)
        self.trgm_create = (
            None
            if table.text is None
            else f"CREATE INDEX {self.trgm_name} ON {t} USING gin ({q(table.text)} gin_trgm_ops)"
            " WITH (fastupdate = off)"
        )
        self.trgm = None if self.trgm_create is None else index_if_missing(self.trgm_name, self.trgm_create)
        columns = [c for c, _ in table.columns]
        # a row's values in column order, as COPY takes them (a tuple even of one column)
        self.values: Callable[[Row], tuple[Any, ...]] = (
            itemgetter(*columns) if len(columns) > 1 else lambda row: (row[columns[0]],)
        )
        self.columns = ", ".join(q(c) for c in columns)
        arrays = ", ".join(f"${i}::{SQL_TYPE[k]}[]" for i, (_, k) in enumerate(table.columns, 3))
        unnest = f"SELECT * FROM unnest({arrays}) AS u({self.columns})"
        rest = [c for c in columns if c not in table.key]
        update = ", ".join(f"{q(c)} = excluded.{q(c)}" for c in rest) or f"{q(columns[0])} = excluded.{q(columns[0])}"
        conflict = f"ON CONFLICT ({', '.join(map(q, table.key))})"
        floor = ""
        if table.floor is not None:
            f = q(table.floor)
            bound = f"{EPOCH} + m.value * interval '1 microsecond'" if table.type(table.floor) == "time" else "m.value"
            floor = (
                f" WHERE $2::text IS NULL OR NOT EXISTS (SELECT 1 FROM helix_row_marks m WHERE m.view = $1"
                f" AND m.namespace = u.namespace AND m.mark = $2 AND u.{f} <= {bound})"
            )
        else:  # the arguments stay the same for every table: $1 and $2 still need a type
            floor = " WHERE $1::text IS NOT NULL OR $2::text IS NULL"
        # $1 view, $2 the floor's mark (NULL: none), $3... one array per column
        self.insert = f"INSERT INTO {t} ({self.columns}) {unnest}{floor} {conflict} DO NOTHING"
        self.replace = f"INSERT INTO {t} ({self.columns}) {unnest}{floor} {conflict} DO UPDATE SET {update}"
        keys = ", ".join(f"${i}::{SQL_TYPE[table.type(c)]}[]" for i, c in enumerate(table.key, 1))
        key_cols = ", ".join(map(q, table.key))
        self.delete = f"DELETE FROM {t} WHERE ({key_cols}) IN (SELECT * FROM unnest({keys}))"
        if table.floor is not None:
            f = q(table.floor)
            bound = f"{EPOCH} + $2 * interval '1 microsecond'" if table.type(table.floor) == "time" else "$2"
            self.cut = f'DELETE FROM {t} WHERE "namespace" = $1 AND {f} <= {bound}'
        self.order_asc = ", ".join(q(c) for c in table.order[1:])
        self.order_desc = ", ".join(f"{q(c)} DESC" for c in table.order[1:])

    def arrays(self, rows: Sequence[Row]) -> list[list[Any]]:
        return [[r[c] for r in rows] for c, _ in self.table.columns]

    def select(self, scan: Scan, columns: Sequence[str], probe: str | None, want: bool) -> tuple[str, list[Any]]:
        """The scan's statement and its arguments after the checkpoint's four ($1-$4, or none).

        `columns` are read, `probe` (trigrams.probe: the query's rare pieces) is what the text
        index is asked for, the whole query rechecked on the rows it finds. With `want`, one row:
        the checkpoint, and only if it covers $4 the rows, as an array (of records, for more than
        one column), so the rows' query is planned on its own, as without `want`."""
        args: list[Any] = [scan.namespace]
        first = 5 if want else 1
        where = [f'"namespace" = ${first}']
        for column, value in scan.where.items():
            args.append(value)
            where.append(f"{q(column)} = ${first + len(args) - 1}")
        if scan.contains is not None and self.table.text is not None:
            text = q(self.table.text)
            if probe is not None:  # the index looks up the probe; `text || ''` keeps the query out of it
                args.append(probe)
                where.append(f"{text} ILIKE ${first + len(args) - 1}")
                text = f"({text} || '')"
            args.append(escape_like(scan.contains))
            where.append(f"{text} ILIKE ${first + len(args) - 1} ESCAPE E'\\\\'")
        order = self.order_desc if scan.newest_first else self.order_asc
        limit = "" if scan.limit is None else f" LIMIT {int(scan.limit)}"
        picked = ", ".join(q(c) for c in columns)
        if want and len(columns) > 1:
            picked = f"ROW({picked})"
        rows = f"SELECT {picked} FROM {q(self.table.name)} WHERE {' AND '.join(where)} ORDER BY {order}{limit}"
        if not want:
            return rows, args
        sql = (
            'WITH cp AS MATERIALIZED (SELECT (SELECT "offset" FROM helix_checkpoints'
            " WHERE view = $1 AND topic = $2 AND partition = $3) AS o)"
            f" SELECT cp.o, CASE WHEN cp.o >= $4 THEN array({rows}) END FROM cp"
        )
        return sql, args

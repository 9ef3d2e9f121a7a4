"""In-process rows (`helix_es.views.rows`): the embedded default and the reference of the other stores.

Per table and namespace, the rows' order tuples in a sorted list (`bisect`) beside a dict of the
rows and one from key to order. `apply` has no await inside, so nothing runs between its steps:
that is the atomic step. The data lives as long as the store; the embedded backend rebuilds it
from the log when it attaches the view.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from helix_es.model.events import Position
from helix_es.stores.ports import StaleWrite
from helix_es.views.rows import (
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
    sortable,
)

Order = tuple[Any, ...]


@dataclass
class _Rows:
    order: list[Order] = field(default_factory=list)  # sorted
    rows: dict[Order, Row] = field(default_factory=dict)
    keys: dict[tuple[Any, ...], Order] = field(default_factory=dict)
    # (column, value) -> the orders of the rows with it, for each of the table's lookup columns: a scan
    # by a session id reads that session's rows, not the namespace's.
    lookups: dict[tuple[str, Any], set[Order]] = field(default_factory=dict)

    def insert(self, table: Table, row: Row) -> None:
        place = table.order_of(row)
        bisect.insort(self.order, place)
        self.rows[place] = dict(row)
        self.keys[table.key_of(row)] = place
        for column in table.lookups:
            self.lookups.setdefault((column, row.get(column)), set()).add(place)

    def delete(self, table: Table, row: Row) -> None:
        place = self.keys.pop(table.key_of(row), None)
        if place is not None:
            self._unlook(table, self.rows.pop(place), place)
            del self.order[bisect.bisect_left(self.order, place)]

    def _unlook(self, table: Table, row: Row, place: Order) -> None:
        for column in table.lookups:
            found = self.lookups.get((column, row.get(column)))
            if found is not None:
                found.discard(place)
                if not found:
                    del self.lookups[(column, row.get(column))]

    def places(self, table: Table, scan: Scan) -> Iterable[Order]:
        """The orders a scan looks at, in its order: those of a lookup it names, else every row's."""
        column = next((c for c in table.lookups if c in scan.where), None)
        if column is None:
            return reversed(self.order) if scan.newest_first else self.order
        return sorted(self.lookups.get((column, scan.where[column]), ()), reverse=scan.newest_first)


class MemoryRows:
    kind = "memory"

    def __init__(self, name: str, tables: Sequence[Table]) -> None:
        self.name = name
        self.tables: Mapping[str, Table] = {t.name: t for t in tables}
        self._rows: dict[tuple[str, str], _Rows] = {}  # (table, namespace) ->
        self._marks: dict[tuple[str, str], int] = {}  # (namespace, mark) -> value
        self._checkpoints: dict[tuple[str, int], int] = {}

    async def apply(
        self, topic: str, partition: int, changes: Sequence[RowChange], checkpoint: int, *, after: int | None
    ) -> None:
        check_changes(self.tables, changes)
        stored = self._checkpoints.get((topic, partition))
        if stored != after:
            raise StaleWrite(f"{self.name}: checkpoint of {topic}[{partition}] is {stored}, not {after}")
        for change in changes:
            table = self.tables[change.table]
            rows = self._rows.setdefault((table.name, namespace_of(change)), _Rows())
            if isinstance(change, Put):
                self._put(table, rows, change)
            elif isinstance(change, Delete):
                rows.delete(table, change.row)
            else:
                self._cut(rows, change)
        self._checkpoints[(topic, partition)] = max(checkpoint, stored if stored is not None else -1)

    def _put(self, table: Table, rows: _Rows, put: Put) -> None:
        row = put.row
        if put.floor is not None and table.floor is not None:
            mark = self._marks.get((str(row["namespace"]), put.floor))
            if mark is not None and sortable(table.type(table.floor), row[table.floor]) <= mark:
                return
        if table.key_of(row) in rows.keys:
            if not put.replace:
                return
            rows.delete(table, row)
        rows.insert(table, row)

    def _cut(self, rows: _Rows, cut: Cut) -> None:
        mark = (cut.namespace, cut.mark)
        self._marks[mark] = max(cut.upto, self._marks.get(mark, cut.upto))
        end = bisect.bisect_left(rows.order, (self._marks[mark] + 1,))  # every order with floor <= mark sorts before
        table = self.tables[cut.table]
        for place in rows.order[:end]:
            row = rows.rows.pop(place)
            del rows.keys[table.key_of(row)]
            rows._unlook(table, row, place)
        del rows.order[:end]

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        return self._checkpoints.get((topic, partition))

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        self._checkpoints[(topic, partition)] = max(offset, self._checkpoints.get((topic, partition), -1))

    async def scan(self, scan: Scan, want: Position | None = None) -> list[Row] | None:
        table = check_scan(self.tables, scan)
        if want is not None:
            applied = self._checkpoints.get((want.topic, want.partition))
            if applied is None or applied < want.offset:
                return None
        rows = self._rows.get((table.name, scan.namespace))
        if rows is None or scan.limit == 0:
            return []
        places = rows.places(table, scan)
        found = rows.rows
        if not scan.where and scan.contains is None:  # a whole read (`get`): no test per row
            if scan.limit is None:
                return [found[p] for p in places]
            return [found[p] for p in itertools.islice(places, scan.limit)]
        out: list[Row] = []
        passes = scan.test(table)
        for place in places:
            row = found[place]
            if passes(row):
                out.append(row)
                if scan.limit is not None and len(out) >= scan.limit:
                    break
        return out

    async def mark(self, namespace: str, mark: str) -> int | None:
        return self._marks.get((namespace, mark))

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        gone = set(namespaces)
        for key in [k for k in self._rows if k[1] in gone]:
            del self._rows[key]
        for mark in [k for k in self._marks if k[0] in gone]:
            del self._marks[mark]
        logs = set(topics)
        for cp in [k for k in self._checkpoints if k[0] in logs]:
            del self._checkpoints[cp]

    async def close(self) -> None:
        pass

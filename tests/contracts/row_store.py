"""`RowStore`: a view's tables (`helix_es.views.rows`) applied and read the same in every store:
order, keys, floors and cuts, lookups and text search, checkpoints, read-your-writes, drop."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from helix_es.model.events import Position
from helix_es.stores.memory.rows import MemoryRows
from helix_es.stores.ports import RowStore, StaleWrite
from helix_es.views.rows import Cut, Delete, Put, Scan, Table, micros_of

OpenRows = Callable[[str, Sequence[Table]], RowStore]  # (view name, tables) -> a store over one place
T0 = datetime(2026, 1, 1, tzinfo=UTC)
TOPIC = "helix.events.rows-contract"


def notes(name: str) -> Table:
    return Table(
        name,
        columns=(
            ("namespace", "text"),
            ("at", "time"),
            ("topic", "text"),
            ("part", "int"),
            ("off", "int"),
            ("session_id", "text"),
            ("content", "text"),
            ("doc", "json"),
        ),
        key=("namespace", "topic", "part", "off"),
        order=("namespace", "at", "topic", "part", "off"),
        lookups=("session_id",),
        text="content",
        floor="at",
    )


def names_table(name: str) -> Table:
    """A table ordered by text: bytewise, as PostgreSQL's "C" collation orders."""
    return Table(
        name,
        columns=(("namespace", "text"), ("label", "text"), ("n", "int")),
        key=("namespace", "label"),
        order=("namespace", "label"),
    )


def row(ns: str, off: int, content: str, *, session: str = "s1", seconds: float | None = None) -> dict[str, Any]:
    at = T0 + timedelta(seconds=off if seconds is None else seconds, microseconds=7)
    doc = json.dumps({"content": content, "nested": [1, {"ü": None}], "n": off}, ensure_ascii=False)
    return {
        "namespace": ns,
        "at": at,
        "topic": TOPIC,
        "part": 0,
        "off": off,
        "session_id": session,
        "content": content,
        "doc": doc,
    }


def contents(rows: Sequence[Any] | None) -> list[str]:
    assert rows is not None
    return [r["content"] for r in rows]


class RowStoreContract:
    @pytest.fixture
    def opened(self) -> OpenRows:
        raise NotImplementedError

    @pytest.fixture
    def setup(self, opened: OpenRows) -> tuple[RowStore, Table, str]:
        tag = uuid.uuid4().hex[:10]
        table = notes(f"t_{tag}")
        return opened(f"rows-{tag}", [table, names_table(f"n_{tag}")]), table, f"ns-{tag}"

    async def test_puts_read_back_in_order_with_their_values(self, setup: tuple[RowStore, Table, str]) -> None:
        store, table, ns = setup
        rows = [row(ns, 2, "b"), row(ns, 0, "zero"), row(ns, 1, "a")]
        await store.apply(TOPIC, 0, [Put(table.name, r) for r in rows], 2, after=None)
        got = await store.scan(Scan(table.name, ns))
        assert contents(got) == ["zero", "a", "b"]
        assert got is not None and dict(got[0], doc=None) == dict(rows[1], doc=None)  # every column, time to the µs
        assert json.loads(got[0]["doc"]) == json.loads(rows[1]["doc"])  # the document's value, its text as kept
        assert contents(await store.scan(Scan(table.name, ns, newest_first=True, limit=2))) == ["b", "a"]
        assert contents(await store.scan(Scan(table.name, ns, limit=0))) == []
        assert await store.checkpoint(TOPIC, 0) == 2

    async def test_times_keep_their_instant_whatever_the_offset(self, setup: tuple[RowStore, Table, str]) -> None:
        store, table, ns = setup
        r = row(ns, 0, "x") | {"at": datetime(2026, 1, 1, 3, 0, 0, 123456, tzinfo=timezone(timedelta(hours=3)))}
        await store.apply(TOPIC, 0, [Put(table.name, r)], 0, after=None)
        got = await store.scan(Scan(table.name, ns))
        assert got is not None and got[0]["at"] == r["at"] and got[0]["at"].tzinfo is not None

    async def test_a_put_again_keeps_the_first_unless_it_replaces(self, setup: tuple[RowStore, Table, str]) -> None:
        store, table, ns = setup
        await store.apply(TOPIC, 0, [Put(table.name, row(ns, 0, "first"))], 0, after=None)
        await store.apply(TOPIC, 0, [Put(table.name, row(ns, 0, "again"))], 1, after=0)
        assert contents(await store.scan(Scan(table.name, ns))) == ["first"]
        await store.apply(TOPIC, 0, [Put(table.name, row(ns, 0, "replaced"), replace=True)], 2, after=1)
        assert contents(await store.scan(Scan(table.name, ns))) == ["replaced"]

    async def test_deletes_take_the_row_of_their_key(self, setup: tuple[RowStore, Table, str]) -> None:
        store, table, ns = setup
        await store.apply(TOPIC, 0, [Put(table.name, row(ns, i, f"m{i}")) for i in range(3)], 2, after=None)
        await store.apply(
            TOPIC, 0, [Delete(table.name, row(ns, 1, "")), Delete(table.name, row(ns, 9, ""))], 3, after=2
        )
        assert contents(await store.scan(Scan(table.name, ns))) == ["m0", "m2"]
        assert contents(await store.scan(Scan(table.name, ns, where={"session_id": "s1"}))) == ["m0", "m2"]

    async def test_a_cut_takes_rows_up_to_its_mark_and_floors_later_puts(
        self, setup: tuple[RowStore, Table, str]
    ) -> None:
        store, table, ns = setup
        other = ns + "-other"
        puts = [Put(table.name, row(n, i, f"{n[-5:]}{i}"), floor="cleared") for n in (ns, other) for i in range(4)]
        await store.apply(TOPIC, 0, puts, 7, after=None)
        bound = micros_of(row(ns, 1, "")["at"])
        await store.apply(TOPIC, 1, [Cut(table.name, ns, "cleared", bound)], 0, after=None)
        assert contents(await store.scan(Scan(table.name, ns))) == [f"{ns[-5:]}2", f"{ns[-5:]}3"]
        assert len(contents(await store.scan(Scan(table.name, other)))) == 4  # another namespace keeps its rows
        assert await store.mark(ns, "cleared") == bound and await store.mark(other, "cleared") is None
        late = [Put(table.name, row(ns, 10, "late", seconds=1), floor="cleared"), Put(table.name, row(ns, 11, "new"))]
        await store.apply(TOPIC, 0, late, 11, after=7)
        assert contents(await store.scan(Scan(table.name, ns))) == [f"{ns[-5:]}2", f"{ns[-5:]}3", "new"]
        await store.apply(TOPIC, 1, [Cut(table.name, ns, "cleared", bound - 5)], 1, after=0)
        assert await store.mark(ns, "cleared") == bound  # a mark never goes down

    async def test_lookups_and_text_search_filter_in_order(self, setup: tuple[RowStore, Table, str]) -> None:
        store, table, ns = setup
        texts = [("s1", "Über Café"), ("s2", "the ÜBER plan"), ("s1", "nothing"), ("s2", "über alles"), ("s1", "50%_")]
        puts = [Put(table.name, row(ns, i, t, session=s)) for i, (s, t) in enumerate(texts)]
        await store.apply(TOPIC, 0, puts, 4, after=None)
        assert contents(await store.scan(Scan(table.name, ns, contains="über"))) == [
            "Über Café",
            "the ÜBER plan",
            "über alles",
        ]
        assert contents(await store.scan(Scan(table.name, ns, contains="ÜBER", limit=2))) == [
            "Über Café",
            "the ÜBER plan",
        ]
        assert contents(await store.scan(Scan(table.name, ns, where={"session_id": "s2"}, contains="über"))) == [
            "the ÜBER plan",
            "über alles",
        ]
        assert contents(await store.scan(Scan(table.name, ns, where={"session_id": "s1"}, newest_first=True))) == [
            "50%_",
            "nothing",
            "Über Café",
        ]
        assert contents(await store.scan(Scan(table.name, ns, contains="%_"))) == ["50%_"]  # no wildcards
        assert contents(await store.scan(Scan(table.name, ns, where={"session_id": "nobody"}))) == []

    async def test_text_orders_bytewise(self, setup: tuple[RowStore, Table, str]) -> None:
        store, _, ns = setup
        table = next(t for t in store.tables.values() if t.name.startswith("n_"))
        labels = ["é", "b", "B", "a", "", "ab"]
        await store.apply(
            TOPIC,
            0,
            [Put(table.name, {"namespace": ns, "label": x, "n": i}) for i, x in enumerate(labels)],
            0,
            after=None,
        )
        got = await store.scan(Scan(table.name, ns))
        assert got is not None and [r["label"] for r in got] == sorted(labels, key=str.encode)

    async def test_a_moved_checkpoint_refuses_the_write_whole(self, setup: tuple[RowStore, Table, str]) -> None:
        store, table, ns = setup
        await store.apply(TOPIC, 0, [Put(table.name, row(ns, 0, "a"))], 0, after=None)
        for after in (None, 3):
            with pytest.raises(StaleWrite):
                await store.apply(TOPIC, 0, [Put(table.name, row(ns, 1, "b"))], 1, after=after)
        assert contents(await store.scan(Scan(table.name, ns))) == ["a"]
        assert await store.checkpoint(TOPIC, 0) == 0
        await store.advance(TOPIC, 0, 5)
        await store.advance(TOPIC, 0, 2)  # never backwards
        assert await store.checkpoint(TOPIC, 0) == 5

    async def test_bad_changes_are_refused_before_anything_is_written(self, setup: tuple[RowStore, Table, str]) -> None:
        store, table, ns = setup
        bad: list[Any] = [
            [Put(table.name, row(ns, 0, "a")), Put("no_such_table", row(ns, 1, "b"))],
            [Put(table.name, row(ns, 0, "a")), Put(table.name, row(ns, 1, "b") | {"off": "1"})],
            [Put(table.name, row(ns, 0, "a")), Put(table.name, {"namespace": ns})],
            [Put(table.name, row(ns, 0, "a") | {"at": datetime(2026, 1, 1)})],  # naive time
            [Put(table.name, row(ns, 0, "a") | {"doc": {"not": "text"}})],  # a document travels as its text
        ]
        for changes in bad:
            with pytest.raises(ValueError):
                await store.apply(TOPIC, 0, changes, 1, after=None)
        assert await store.scan(Scan(table.name, ns)) == []
        assert await store.checkpoint(TOPIC, 0) is None
        with pytest.raises(ValueError):
            await store.scan(Scan(table.name, ns, where={"content": "a"}))  # not a lookup column

    async def test_reads_wait_for_the_position_asked_for(self, setup: tuple[RowStore, Table, str]) -> None:
        store, table, ns = setup
        assert await store.scan(Scan(table.name, ns), Position(TOPIC, 0, 0)) is None
        await store.apply(TOPIC, 0, [Put(table.name, row(ns, 0, "a"))], 0, after=None)
        assert contents(await store.scan(Scan(table.name, ns), Position(TOPIC, 0, 0))) == ["a"]
        assert await store.scan(Scan(table.name, ns), Position(TOPIC, 0, 1)) is None
        assert await store.scan(Scan(table.name, ns), Position(TOPIC, 1, 0)) is None

    async def test_a_scan_of_some_columns_answers_their_values(self, setup: tuple[RowStore, Table, str]) -> None:
        store, table, ns = setup
        rows = [row(ns, 0, "about the zebra"), row(ns, 1, "a"), row(ns, 2, "ZEBRA", session="s2")]
        await store.apply(TOPIC, 0, [Put(table.name, r) for r in rows], 2, after=None)
        for want in (None, Position(TOPIC, 0, 2)):
            for columns in (("doc",), ("content", "at"), ("doc", "session_id", "off")):
                for scan, expected in (
                    (Scan(table.name, ns, columns=columns), rows),
                    (Scan(table.name, ns, contains="zeb", limit=5, columns=columns), [rows[0], rows[2]]),
                    (Scan(table.name, ns, where={"session_id": "s2"}, newest_first=True, columns=columns), rows[2:]),
                ):
                    got = await store.scan(scan, want)
                    assert got is not None and len(got) == len(expected), scan
                    for g, e in zip(got, expected, strict=True):  # a store may answer more columns
                        for c in columns:
                            assert json.loads(g[c]) == json.loads(e[c]) if c == "doc" else g[c] == e[c], (c, scan)
        assert await store.scan(Scan(table.name, ns, columns=("doc",)), Position(TOPIC, 0, 3)) is None
        with pytest.raises(ValueError):
            await store.scan(Scan(table.name, ns, columns=("nope",)))

    async def test_another_store_over_the_same_place_reads_the_same(
        self, opened: OpenRows, setup: tuple[RowStore, Table, str]
    ) -> None:
        store, table, ns = setup
        await store.apply(TOPIC, 0, [Put(table.name, row(ns, 0, "a")), Cut(table.name, ns, "c", 1)], 0, after=None)
        again = opened(store.name, list(store.tables.values()))
        assert contents(await again.scan(Scan(table.name, ns))) == ["a"]
        assert await again.checkpoint(TOPIC, 0) == 0 and await again.mark(ns, "c") == 1
        await again.apply(TOPIC, 0, [Put(table.name, row(ns, 1, "b"))], 1, after=0)
        assert contents(await store.scan(Scan(table.name, ns))) == ["a", "b"]

    async def test_drop_takes_its_namespaces_and_topics_only(self, setup: tuple[RowStore, Table, str]) -> None:
        store, table, ns = setup
        other = ns + "-kept"
        changes = [Put(table.name, row(n, 0, n)) for n in (ns, other)] + [Cut(table.name, ns, "c", 1)]
        await store.apply(TOPIC, 0, changes, 0, after=None)
        await store.apply(TOPIC + "-kept", 0, [], 4, after=None)
        await store.drop([ns], [TOPIC])
        assert await store.scan(Scan(table.name, ns)) == [] and await store.mark(ns, "c") is None
        assert contents(await store.scan(Scan(table.name, other))) == [other]
        assert await store.checkpoint(TOPIC, 0) is None and await store.checkpoint(TOPIC + "-kept", 0) == 4

    async def test_a_batch_leaves_what_its_changes_leave_one_at_a_time(
        self, setup: tuple[RowStore, Table, str]
    ) -> None:
        # A store may group a batch's changes (Redis writes runs of puts a few calls a chunk): puts
        # again, deletes and replaces of rows put earlier in the batch, cuts and floors between them,
        # and more rows than a chunk must leave what the same changes leave applied one by one.
        store, table, ns = setup
        other = ns + "-b"
        at = micros_of(row(ns, 0, "")["at"])
        changes: list[Any] = [
            Put(table.name, row(n, i, f"m{i}", session=f"s{i % 7}"), floor="c")
            for i in range(1300)
            for n in (ns, other)
        ]
        changes += [
            Put(table.name, row(ns, 5, "again", session="s0")),  # the first put of a key is kept
            Delete(table.name, row(ns, 10, "", session="s3")),
            Put(table.name, row(ns, 10, "back", session="s0")),  # deleted, then put again: the new row
            Put(table.name, row(ns, 11, "moved", session="s6"), replace=True),  # another session now
            Cut(table.name, ns, "c", at + 100_000_000),  # rows up to 100 s go
            Put(table.name, row(ns, 2000, "late", seconds=50), floor="c"),  # at or below the mark: skipped
            Put(table.name, row(ns, 2001, "unfloored", seconds=60)),  # no floor: kept
            *(Put(table.name, row(ns, 3000 + i, f"n{i}", session=f"s{i % 3}"), floor="c") for i in range(1100)),
            Put(table.name, row(ns, 4050, "dup")),  # in the same run and chunk as the row it repeats
            Cut(table.name, other, "c", at + 5_000_000),
        ]
        each = MemoryRows(store.name + "-each", list(store.tables.values()))
        for i, change in enumerate(changes):
            await each.apply(TOPIC, 0, [change], i, after=i - 1 if i else None)
        await store.apply(TOPIC, 0, changes, len(changes) - 1, after=None)
        scans = [Scan(table.name, n) for n in (ns, other)]
        scans += [Scan(table.name, n, where={"session_id": f"s{i}"}) for n in (ns, other) for i in range(7)]
        for scan in scans:
            got, expected = await store.scan(scan), await each.scan(scan)
            assert got is not None and expected is not None
            as_read = [dict(r, doc=json.loads(r["doc"])) for r in got]  # a document's value: stores may respace it
            assert as_read == [dict(r, doc=json.loads(r["doc"])) for r in expected], scan
        assert len(contents(await store.scan(scans[0]))) == 1300 - 101 + 1 + 1100  # cut up to 100 s, unfloored, n*

"""The PostgreSQL long-term view is kept as rows (`PostgresRows` under the long-term fold), and a view
still in the layout of the adapter it replaced is refused, naming the rebuild that moves it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import pytest

from helix_es import Message, open_memory
from helix_es.model import names
from helix_es.projection.idempotency import IdempotentProjection
from helix_es.projection.long_term import LongTermRows
from helix_es.stores.ports import RetiredLayout, SessionKey
from helix_es.stores.postgres import KIND
from helix_es.stores.postgres.rows import PostgresRows
from helix_es.views.long_term_rows import tables
from projectors.rebuild import drop, rebuild
from tests.conftest import unique
from tests.contracts.long_term import T0, cleared, said

# The 0.6 adapter's table, as it made it (the custom name in place of agent_memory).
OLD_TABLE = """
CREATE TABLE "{t}" (
    namespace text NOT NULL,
    topic text COLLATE "C" NOT NULL,
    partition int NOT NULL,
    "offset" bigint NOT NULL,
    session_id text NOT NULL,
    created_at timestamptz NOT NULL,
    role text NOT NULL,
    content text NOT NULL,
    message jsonb NOT NULL,
    PRIMARY KEY (namespace, topic, partition, "offset"),
    UNIQUE (namespace, created_at, topic, partition, "offset")
);
CREATE TABLE IF NOT EXISTS helix_long_term_cleared (
    view text NOT NULL,
    namespace text NOT NULL,
    cleared_at timestamptz NOT NULL,
    PRIMARY KEY (view, namespace)
);
"""


def table_name() -> str:
    return unique("lt_old").replace("-", "_")


def embedded(tmp_path: Path, dsn: str, ns: str, table: str) -> dict[str, Any]:
    return {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "topic_prefix": ns, "fsync": False},
        "memory": {
            "type": "long-term",
            "store": "postgres",
            "dsn": dsn,
            "table": table,
            "namespace": ns,
            "read_timeout": 20,
        },
    }


async def old_layout(dsn: str, table: str, view: str, namespaces: list[str], *, rows: bool = True) -> None:
    """What the long-term adapter of 0.6 left: its table with a row per namespace (unless not `rows`:
    none, nor the table), and each namespace's clear watermark."""
    conn = await asyncpg.connect(dsn)
    try:
        if rows:
            await conn.execute(OLD_TABLE.format(t=table))
        else:
            await conn.execute(OLD_TABLE.format(t=table).split(";", 1)[1])
        for ns in namespaces:
            if rows:
                await conn.execute(
                    f'INSERT INTO "{table}" VALUES ($1, $2, 0, 0, $3, $4, $5, $6, $7::jsonb)',
                    ns,
                    names.topic(ns),
                    "s",
                    T0,
                    "user",
                    "old",
                    Message("user", "old").to_json(),
                )
            await conn.execute(
                "INSERT INTO helix_long_term_cleared VALUES ($1, $2, '-infinity') ON CONFLICT DO NOTHING", view, ns
            )
    finally:
        await conn.close()


async def tidy(dsn: str, *made: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for table in made:
            await conn.execute(f'DROP TABLE IF EXISTS "{table}", "{table}_retracted"')
            for t in ("helix_checkpoints", "helix_row_marks", "helix_long_term_cleared"):
                if await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", t):
                    await conn.execute(f"DELETE FROM {t} WHERE view LIKE $1", f"long-term-{table}%")
    finally:
        await conn.close()


def view_of(dsn: str, table: str) -> LongTermRows:
    assert KIND.rows is not None
    return LongTermRows(KIND.rows(dsn, f"long-term-{table}", tables(table)), table)


async def exists(dsn: str, table: str) -> bool:
    conn = await asyncpg.connect(dsn)
    try:
        return bool(await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", f'"{table}"'))
    finally:
        await conn.close()


async def test_long_term_in_postgres_is_rows_and_a_clear_is_a_row_mark(tmp_path: Path, postgres_dsn: str) -> None:
    ns, table = unique("plt"), table_name()
    try:
        async with open_memory(embedded(tmp_path, postgres_dsn, ns, table), session_id="a") as mem:
            await mem.add(Message("user", "one"))
            await mem.clear()
            await mem.add(Message("assistant", "Two"))
            assert [m.content for m in await mem.search("TWO")] == ["Two"]
            projection = mem.projection  # type: ignore[attr-defined]
            if isinstance(projection, IdempotentProjection):
                projection = projection.inner
            assert isinstance(projection, LongTermRows) and isinstance(projection.store, PostgresRows)
        conn = await asyncpg.connect(postgres_dsn)
        try:
            assert await conn.fetchval(f'SELECT count(*) FROM "{table}" WHERE namespace = $1', ns) == 1
            mark = "SELECT count(*) FROM helix_row_marks WHERE view = $1 AND namespace = $2 AND mark = 'cleared'"
            assert await conn.fetchval(mark, f"long-term-{table}", ns) == 1
        finally:
            await conn.close()
    finally:
        await tidy(postgres_dsn, table)


async def test_a_table_in_the_old_layout_refuses_the_view_and_drop_takes_it_once_empty(postgres_dsn: str) -> None:
    ns, other, table = unique("plt"), unique("plt"), table_name()
    view_name = f"long-term-{table}"
    await old_layout(postgres_dsn, table, view_name, [ns, other])
    view = view_of(postgres_dsn, table)
    try:
        for read in (view.get, lambda key, want: view.search(key, "x", 5, want)):
            with pytest.raises(RetiredLayout, match=rf"helix-es rebuild --config .* --view {view_name}\b") as refused:
                await read(SessionKey(ns, "s"), None)
            assert refused.value.namespace is None and refused.value.view == view_name
            assert f"table '{table}'" in str(refused.value)
        with pytest.raises(RetiredLayout):
            await view.apply([said(ns, names.topic(ns), 0, 5, "new", T0)])
        assert not await exists(postgres_dsn, f"{table}_retracted")  # nothing made, nothing written
        await view.drop([ns], [names.topic(ns)])  # its rows go; the other namespace's keep the table
        with pytest.raises(RetiredLayout):
            await view.get(SessionKey(other, "s"), None)
        await view.drop([other], [names.topic(other)])  # empty now: the old table goes
        await view.apply([said(ns, names.topic(ns), 0, 5, "new", T0)])
        assert [m.content for m in await view.get(SessionKey(ns, "s"), None) or []] == ["new"]
        assert await view.get(SessionKey(other, "s"), None) == []
    finally:
        await view.close()
        await tidy(postgres_dsn, table)


async def test_a_namespace_the_old_watermarks_name_is_refused_alone(postgres_dsn: str) -> None:
    """The old table gone, its clear watermarks left: each names a namespace the old layout wrote."""
    ns, other, table = unique("plt"), unique("plt"), table_name()
    view_name = f"long-term-{table}"
    await old_layout(postgres_dsn, table, view_name, [ns], rows=False)
    view = view_of(postgres_dsn, table)
    try:
        with pytest.raises(RetiredLayout, match="helix_long_term_cleared") as refused:
            await view.get(SessionKey(ns, "s"), None)
        assert refused.value.namespace == ns
        with pytest.raises(RetiredLayout):
            await view.apply([cleared(ns, names.topic(ns), 0, 1, T0)])
        assert await view.checkpoint(names.topic(ns), 0) is None  # nothing written
        await view.apply([said(other, names.topic(other), 0, 0, "fine", T0)])  # other namespaces go on
        assert [m.content for m in await view.get(SessionKey(other, "s"), None) or []] == ["fine"]
        await view.drop([ns], [names.topic(ns)])  # its watermark goes with the namespace
        await view.apply([said(ns, names.topic(ns), 0, 5, "new", T0)])
        assert [m.content for m in await view.get(SessionKey(ns, "s"), None) or []] == ["new"]
    finally:
        await view.close()
        await tidy(postgres_dsn, table)


async def test_a_rebuild_moves_an_old_layout_view_to_rows(tmp_path: Path, postgres_dsn: str) -> None:
    ns, table = unique("plt"), table_name()
    cfg = embedded(tmp_path, postgres_dsn, ns, table)
    view_name = f"long-term-{table}"
    try:
        async with open_memory(cfg, session_id="a") as mem:
            await mem.add(Message("user", "kept in the log"))
        await tidy(postgres_dsn, table)
        await old_layout(postgres_dsn, table, view_name, [ns])  # as an upgraded deployment finds it
        with pytest.raises(RetiredLayout, match="rebuild"):  # the embedded log's catch-up, on opening
            async with open_memory(cfg, session_id="a") as mem:
                await mem.get()
        report = await rebuild(cfg)
        assert report.target == f"{view_name}@v2" and report.switched
        async with open_memory(cfg, session_id="a") as mem:
            assert [m.content for m in await mem.get()] == ["kept in the log"]
        await drop(cfg, view_name)  # --drop-old's step: the old rows go, and their table with them
        assert not await exists(postgres_dsn, table)
    finally:
        await tidy(postgres_dsn, table, f"{table}_v2")


async def test_a_load_into_a_target_left_in_the_old_layout_and_empty_makes_it_anew(postgres_dsn: str) -> None:
    """A target dropped before the upgrade left its table in the old layout, without rows."""
    table = table_name()
    await old_layout(postgres_dsn, table, f"long-term-{table}", [])
    view = view_of(postgres_dsn, table)
    try:
        await view.start_load()
        ns = unique("plt")
        await view.apply([said(ns, names.topic(ns), 0, 0, "loaded", T0)])
        await view.build_indexes()
        assert [m.content for m in await view.search(SessionKey(ns, "s"), "LOAD", 5, None) or []] == ["loaded"]
    finally:
        await view.close()
        await tidy(postgres_dsn, table)

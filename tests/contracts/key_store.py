"""`KeyStore`: one live wrapped data key per session; erasure deletes it for good and keeps a tombstone."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from helix_es.stores.ports import KeyRow, KeyStore
from tests.conftest import unique

NewKeys = Callable[[], KeyStore]
T0 = datetime(2030, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)  # microseconds: every store keeps them


def key(namespace: str, session_id: str, key_id: str, seconds: float = 0, wrapped: bytes | None = None) -> KeyRow:
    return KeyRow(
        namespace,
        session_id,
        key_id,
        wrapped or f"wrapped {key_id}".encode(),
        "mk-test",
        T0 + timedelta(seconds=seconds),
    )


def tombstone(row: KeyRow, at: datetime) -> KeyRow:
    return replace(row, wrapped_key=None, erased_at=at)


class KeyStoreContract:
    """Subclasses override `new_keys`: a factory of stores over one place (a directory, a server)."""

    kind: str

    @pytest.fixture
    def new_keys(self) -> Iterator[NewKeys]:
        raise NotImplementedError("a KeyStoreContract subclass provides the `new_keys` fixture")
        yield  # pragma: no cover

    @pytest.fixture
    def keys(self, new_keys: NewKeys) -> KeyStore:
        return new_keys()

    async def test_it_is_a_key_store(self, keys: KeyStore) -> None:
        assert isinstance(keys, KeyStore) and keys.kind == self.kind

    async def test_an_unknown_session_has_no_rows(self, keys: KeyStore) -> None:
        ns, sid = unique("ks"), unique("s")
        assert await keys.rows(ns, sid) == []
        assert await keys.erase(ns, sid, T0) == []
        assert await keys.rows(ns, sid) == []  # erasing nothing leaves nothing behind

    async def test_an_inserted_key_reads_back_whole(self, keys: KeyStore) -> None:
        ns, sid = unique("ks"), unique("s")
        row = key(ns, sid, "dk-1", wrapped=bytes(range(256)))  # any bytes, NUL included
        await keys.insert(row)
        (found,) = await keys.rows(ns, sid)
        assert found == row and not found.erased
        assert (found.wrapped_key, found.wrapped_by, found.created_at) == (bytes(range(256)), "mk-test", row.created_at)

    async def test_a_second_live_key_is_ignored(self, keys: KeyStore) -> None:
        ns, sid = unique("ks"), unique("s")
        first = key(ns, sid, "dk-1")
        await keys.insert(first)
        await keys.insert(key(ns, sid, "dk-2", seconds=1))  # a racing writer's key won already: nothing
        await keys.insert(key(ns, sid, "dk-1", seconds=2, wrapped=b"other bytes"))  # nor for the same id
        assert await keys.rows(ns, sid) == [first]

    async def test_of_racing_first_inserts_exactly_one_is_kept(self, keys: KeyStore) -> None:
        ns, sid = unique("ks"), unique("s")
        rows = [key(ns, sid, f"dk-{i}", seconds=i) for i in range(6)]
        await asyncio.gather(*(keys.insert(r) for r in rows))
        (kept,) = await keys.rows(ns, sid)
        assert kept in rows and not kept.erased

    async def test_erase_deletes_the_wrapped_key_and_keeps_a_tombstone(self, keys: KeyStore) -> None:
        ns, sid = unique("ks"), unique("s")
        row = key(ns, sid, "dk-1")
        await keys.insert(row)
        at = T0 + timedelta(minutes=5)
        assert await keys.erase(ns, sid, at) == ["dk-1"]
        (found,) = await keys.rows(ns, sid)
        assert found == tombstone(row, at)
        assert found.erased and found.wrapped_key is None and found.erased_at == at
        assert (found.key_id, found.wrapped_by, found.created_at) == ("dk-1", "mk-test", row.created_at)
        assert await keys.erase(ns, sid, at + timedelta(minutes=1)) == []  # twice: nothing more to erase
        assert await keys.rows(ns, sid) == [tombstone(row, at)]  # and the first erasure's time stays

    async def test_a_new_key_after_erasure_and_rows_oldest_first(self, keys: KeyStore) -> None:
        ns, sid = unique("ks"), unique("s")
        first, at = key(ns, sid, "dk-b", seconds=10), T0 + timedelta(seconds=20)
        await keys.insert(first)
        assert await keys.erase(ns, sid, at) == ["dk-b"]
        second = key(ns, sid, "dk-a", seconds=5)  # created earlier (another clock): listed first
        await keys.insert(second)
        assert await keys.rows(ns, sid) == [second, tombstone(first, at)]
        third = key(ns, sid, "dk-c", seconds=30)
        await keys.insert(third)  # the session has a live key again: ignored
        later = T0 + timedelta(seconds=40)
        assert await keys.erase(ns, sid, later) == ["dk-a"]
        assert await keys.rows(ns, sid) == [tombstone(second, later), tombstone(first, at)]
        await keys.insert(third)
        assert [r.key_id for r in await keys.rows(ns, sid)] == ["dk-a", "dk-b", "dk-c"]
        assert [r.erased for r in await keys.rows(ns, sid)] == [True, True, False]

    async def test_an_erased_key_id_is_never_live_again(self, keys: KeyStore) -> None:
        ns, sid = unique("ks"), unique("s")
        row, at = key(ns, sid, "dk-1"), T0 + timedelta(seconds=1)
        await keys.insert(row)
        assert await keys.erase(ns, sid, at) == ["dk-1"]
        await keys.insert(key(ns, sid, "dk-1", seconds=2, wrapped=b"resurrected"))
        assert await keys.rows(ns, sid) == [tombstone(row, at)]

    async def test_sessions_and_namespaces_are_isolated(self, keys: KeyStore) -> None:
        ns, other_ns, sid, other_sid = unique("ks"), unique("ks"), unique("s"), unique("s")
        mine, same_ns, same_sid = key(ns, sid, "dk-1"), key(ns, other_sid, "dk-2"), key(other_ns, sid, "dk-3")
        for row in (mine, same_ns, same_sid):
            await keys.insert(row)  # each session its own live key
        assert await keys.erase(ns, sid, T0) == ["dk-1"]
        assert await keys.rows(ns, sid) == [tombstone(mine, T0)]
        assert await keys.rows(ns, other_sid) == [same_ns]
        assert await keys.rows(other_ns, sid) == [same_sid]

    async def test_close_and_another_store_over_the_same_place(self, new_keys: NewKeys) -> None:
        ns, sid = unique("ks"), unique("s")
        first = new_keys()
        erased, live = key(ns, sid, "dk-1"), key(ns, sid, "dk-2", seconds=1)
        await first.insert(erased)
        await first.erase(ns, sid, T0)
        await first.insert(live)
        await first.close()
        await first.close()  # twice is fine
        second = new_keys()  # as another process would open it
        assert await second.rows(ns, sid) == [tombstone(erased, T0), live]
        await second.insert(key(ns, sid, "dk-3", seconds=2))
        assert await second.rows(ns, sid) == [tombstone(erased, T0), live]  # the live key holds across stores

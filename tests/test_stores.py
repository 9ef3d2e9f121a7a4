"""Store conformance: every ViewStore (memory, Redis, Postgres) keeps the same promises.

The suite is `tests.contracts.view_store.ViewStoreContract`; each class here runs it on one adapter.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from helix_es import Message
from helix_es.stores.list_edit import list_edit
from helix_es.stores.memory.views import MemoryStore
from helix_es.stores.ports import ViewStore
from helix_es.stores.postgres.views import PostgresStore
from helix_es.stores.redis.views import RedisStore
from tests.conftest import copy_always
from tests.contracts.view_store import ViewStoreContract


class TestMemoryViewStore(ViewStoreContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[ViewStore]:
        s = MemoryStore()
        yield s
        await s.close()


class TestRedisViewStore(ViewStoreContract):
    @pytest.fixture
    async def store(self, redis_url: str) -> AsyncIterator[ViewStore]:
        s = RedisStore(redis_url)
        yield s
        await s.close()


class TestPostgresViewStore(ViewStoreContract):
    @pytest.fixture
    async def store(self, postgres_dsn: str) -> AsyncIterator[ViewStore]:
        s = PostgresStore(postgres_dsn)
        yield s
        await s.close()


class TestPostgresCopyViewStore(ViewStoreContract):
    """Every append by COPY, as big batches (rebuilds) write them."""

    # 3000 rows go by COPY in every PostgresStore: TestPostgresViewStore runs that one already.
    test_large_states_and_rewrites_round_trip = None  # type: ignore[assignment]

    @pytest.fixture
    async def store(self, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ViewStore]:
        copy_always(monkeypatch)
        s = PostgresStore(postgres_dsn)
        yield s
        await s.close()


@pytest.mark.parametrize(
    ("before", "after", "edit"),
    [
        ("abc", "abcd", (0, 0, "d")),
        ("abc", "bcd", (0, 1, "d")),
        ("Sabc", "Sbcd", (1, 1, "d")),
        ("abc", "", (0, 3, "")),
        ("abc", "xyz", (0, 3, "xyz")),
        ("abc", "ab", (1, 2, "b")),
        ("ab", "", (0, 2, "")),
        ("", "ab", (0, 0, "ab")),
    ],
)
def test_list_edit_finds_the_cheap_edit(before: str, after: str, edit: tuple[int, int, str]) -> None:
    msgs = {ch: Message("user", ch) for ch in "Sabcdxyz"}
    b = tuple(msgs[c] for c in before)
    a = tuple(msgs[c] for c in after)
    found = list_edit(b, a)
    assert (found.keep, found.drop, "".join(m.content for m in found.append)) == edit
    assert found.drop >= 0
    rebuilt = b[: found.keep] + b[found.keep + found.drop :] + found.append
    assert rebuilt == a

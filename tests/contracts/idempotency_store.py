"""`IdempotencyStore`: per view and session, each key's first offset; the newest keys remembered."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from helix_es.stores.ports import Claim, IdempotencyStore, SessionKey
from tests.conftest import unique

NewStore = Callable[[int], IdempotencyStore]  # remembered keys per session -> a store over one place


class IdempotencyStoreContract:
    """Subclasses override `new_store`: a factory of stores over one place (a server, a process)."""

    kind: str
    shared: bool = True  # two stores from `new_store` see each other's keys (not so in one process)

    @pytest.fixture
    def new_store(self) -> Iterator[NewStore]:
        raise NotImplementedError("an IdempotencyStoreContract subclass provides the `new_store` fixture")
        yield  # pragma: no cover

    @pytest.fixture
    def session(self) -> SessionKey:
        return SessionKey(unique("idem"), "s-1")

    async def test_the_first_offset_of_a_key_wins(self, new_store: NewStore, session: SessionKey) -> None:
        store = new_store(100)
        assert store.kind == self.kind
        view = unique("v")
        assert await store.claim(view, [Claim(session, "k1", 5), Claim(session, "k2", 6)]) == [5, 6]
        # A retry later in the log finds the first; the same event claimed again finds itself.
        assert await store.claim(view, [Claim(session, "k1", 9), Claim(session, "k2", 6)]) == [5, 6]
        # Within one batch too: the second event with a key repeats the first.
        assert await store.claim(view, [Claim(session, "k3", 10), Claim(session, "k3", 11)]) == [10, 10]

    async def test_keys_are_per_view_and_per_session(self, new_store: NewStore, session: SessionKey) -> None:
        store = new_store(100)
        view, other_view = unique("v"), unique("v")
        other_session = SessionKey(session.namespace, "s-2")
        other_namespace = SessionKey(unique("idem"), session.session_id)
        await store.claim(view, [Claim(session, "k", 1)])
        assert await store.claim(other_view, [Claim(session, "k", 3)]) == [3]
        assert await store.claim(view, [Claim(other_session, "k", 4), Claim(other_namespace, "k", 2)]) == [4, 2]
        assert await store.claim(view, [Claim(session, "k", 7)]) == [1]

    async def test_the_newest_keys_are_remembered(self, new_store: NewStore, session: SessionKey) -> None:
        store = new_store(3)
        view = unique("v")
        await store.claim(view, [Claim(session, f"k{i}", i) for i in range(5)])  # k0 and k1 fall out
        assert await store.claim(view, [Claim(session, f"k{i}", 10 + i) for i in (2, 3, 4)]) == [2, 3, 4]
        assert await store.claim(view, [Claim(session, "k0", 20)]) == [20]  # forgotten: a new write

    async def test_drop_forgets_a_namespace_of_a_view(self, new_store: NewStore, session: SessionKey) -> None:
        store = new_store(100)
        view = unique("v")
        kept = SessionKey(unique("idem"), "s-1")
        await store.claim(view, [Claim(session, "k", 1), Claim(kept, "k", 1)])
        await store.drop(view, [session.namespace])
        assert await store.claim(view, [Claim(session, "k", 8), Claim(kept, "k", 8)]) == [8, 1]

    async def test_racing_claimers_agree(self, new_store: NewStore, session: SessionKey) -> None:
        """Two projectors of one view (a rebalance) claiming the same keys get the same answers."""
        a, b = new_store(100), (new_store(100) if self.shared else None)
        view = unique("v")
        claims = [Claim(session, f"k{i % 7}", i) for i in range(40)]
        first, second = await asyncio.gather(a.claim(view, claims), (b or a).claim(view, claims))
        assert first == second == [i % 7 for i in range(40)]

"""`AliasStore`: which target of a view readers use, the targets built, and those a projector serves."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from helix_es.model.names import alias_id
from helix_es.stores.ports import AliasStore
from tests.conftest import Deadline, unique

NewAliases = Callable[[], AliasStore]


def new_alias(view: str = "w") -> str:
    return alias_id(view, unique("alias"))  # `<view>:<prefix>`, as a deployment with its own prefix names it


class AliasStoreContract:
    """Subclasses override `new_aliases` (a factory of stores over one place) and say what they are."""

    kind: str
    cheap: bool  # reading costs no round trip
    shared: bool  # another store over the same place (another process) sees the same aliases

    @pytest.fixture
    def new_aliases(self) -> Iterator[NewAliases]:
        raise NotImplementedError("an AliasStoreContract subclass provides the `new_aliases` fixture")
        yield  # pragma: no cover

    @pytest.fixture
    def aliases(self, new_aliases: NewAliases) -> AliasStore:
        return new_aliases()

    async def test_it_says_what_it_is(self, aliases: AliasStore) -> None:
        assert (aliases.kind, aliases.cheap) == (self.kind, self.cheap)

    async def test_an_unknown_alias_resolves_to_nothing(self, aliases: AliasStore) -> None:
        alias = new_alias()
        assert await aliases.get(alias) is None
        assert await aliases.targets(alias) == set()
        assert await aliases.served(alias) == set()

    async def test_the_switch_is_a_compare_and_set(self, aliases: AliasStore) -> None:
        alias = new_alias()
        assert await aliases.get(alias) is None
        assert await aliases.switch(alias, "w@v2", expect="w", base="w") is None
        assert await aliases.get(alias) == "w@v2"
        # A second rebuild that started before that switch expects the old target: it loses.
        assert await aliases.switch(alias, "w@v3", expect="w", base="w") == "w@v2"
        assert await aliases.get(alias) == "w@v2"
        assert await aliases.targets(alias) == {"w@v2"}
        await aliases.announce(alias, "w@v2", 5)
        assert await aliases.served(alias) == {"w@v2"}
        await aliases.announce(alias, "w@v2", 0)
        assert await aliases.served(alias) == set()

    async def test_with_no_alias_the_switch_expects_the_base(self, aliases: AliasStore) -> None:
        alias = new_alias()
        assert await aliases.switch(alias, "w@v2", expect="w@v9", base="w") == "w"  # what it resolves to now
        assert await aliases.get(alias) is None and await aliases.targets(alias) == set()
        assert await aliases.switch(alias, "w@v2", expect="w", base="w") is None
        # Switched on from the current target, and back to the base: every target switched to is kept.
        assert await aliases.switch(alias, "w@v3", expect="w@v2", base="w") is None
        assert await aliases.switch(alias, "w", expect="w@v3", base="w") is None
        assert await aliases.get(alias) == "w"
        assert await aliases.targets(alias) == {"w@v2", "w@v3", "w"}
        assert await aliases.switch(alias, "w@v4", expect="w@v3", base="w") == "w"

    async def test_of_racing_switches_exactly_one_wins(self, aliases: AliasStore) -> None:
        alias = new_alias()
        contenders = [f"w@v{i}" for i in range(2, 10)]
        results = await asyncio.gather(*(aliases.switch(alias, t, expect="w", base="w") for t in contenders))
        won = [t for t, r in zip(contenders, results, strict=True) if r is None]
        assert len(won) == 1
        assert await aliases.get(alias) == won[0]
        assert {r for r in results if r is not None} == {won[0]}  # every loser is told what won
        assert await aliases.targets(alias) == {won[0]}

    async def test_targets_are_added_and_forgotten(self, aliases: AliasStore) -> None:
        alias, other = new_alias(), new_alias()
        await aliases.add_target(alias, "w@v2")
        await aliases.add_target(alias, "w@v2")  # a set: twice is once
        await aliases.add_target(alias, "w@v3")
        await aliases.add_target(other, "x@v7")
        assert await aliases.targets(alias) == {"w@v2", "w@v3"}
        assert await aliases.get(alias) is None  # built, not switched to
        await aliases.forget_target(alias, "w@v2")
        await aliases.forget_target(alias, "w@v99")  # never there: nothing happens
        assert await aliases.targets(alias) == {"w@v3"}
        assert await aliases.targets(other) == {"x@v7"}
        assert await aliases.switch(alias, "w@v3", expect="w", base="w") is None
        await aliases.forget_target(alias, "w@v3")  # forgetting a target does not move the alias
        assert await aliases.get(alias) == "w@v3" and await aliases.targets(alias) == set()

    async def test_an_announcement_serves_until_withdrawn_or_expired(self, aliases: AliasStore) -> None:
        alias, other = new_alias(), new_alias()
        await aliases.announce(alias, "w", 60)
        # Long enough to outlast the eight round trips below on a loaded Redis Cluster.
        await aliases.announce(alias, "w@v2", 1.5)
        await aliases.announce(alias, "w@v3", 1.5)
        await aliases.announce(alias, "w@v3", 60)  # announced again: served on
        assert await aliases.served(alias) == {"w", "w@v2", "w@v3"}
        assert await aliases.served(other) == set()
        await aliases.announce(alias, "w", 0)  # withdrawn
        await aliases.announce(alias, "w@v9", 0)  # never announced: nothing happens
        assert await aliases.served(alias) == {"w@v2", "w@v3"}
        deadline = Deadline(10, "an announcement of 1.5 s to expire")
        while "w@v2" in await aliases.served(alias):
            deadline.check()
            await asyncio.sleep(0.05)
        assert await aliases.served(alias) == {"w@v3"}
        assert await aliases.get(alias) is None and await aliases.targets(alias) == set()  # serving is not switching

    async def test_close_and_another_store_over_the_same_place(self, new_aliases: NewAliases) -> None:
        alias = new_alias()
        first = new_aliases()
        assert await first.switch(alias, "w@v2", expect="w", base="w") is None
        await first.announce(alias, "w@v2", 60)
        await first.close()
        await first.close()  # twice is fine
        second = new_aliases()
        if self.shared:
            assert await second.get(alias) == "w@v2"
            assert await second.targets(alias) == {"w@v2"}
            assert await second.served(alias) == {"w@v2"}
            assert await second.switch(alias, "w@v3", expect="w", base="w") == "w@v2"  # the CAS sees it too
        else:
            assert await second.get(alias) is None  # its own table, in the process
            assert await second.served(alias) == set()

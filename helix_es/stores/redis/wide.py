"""What every namespace-wide Redis store shares: its name (its checkpoints' view), a client opened on
first use with cluster detection, and its Lua scripts registered once."""

from __future__ import annotations

from typing import Any, ClassVar

from helix_es.stores.redis.pool import Client, Lazy, is_cluster
from helix_es.stores.redis.views import Checkpoints


class WideStore:
    SCRIPTS: ClassVar[tuple[tuple[str, str], ...]] = ()  # (key, Lua source) registered on first use

    def __init__(self, url: str, name: str) -> None:
        self.url = url
        self._client = Lazy(url)  # opened on first use: a projection may be dropped unused
        self._cluster = False  # known once opened: key names and write paths depend on it
        self._scripts: dict[str, Any] = {}
        self._checkpoints = Checkpoints(name)

    @property
    def name(self) -> str:
        """The view's (or its rebuild target's) name: its keys and checkpoints."""
        return self._checkpoints.view

    @name.setter
    def name(self, name: str) -> None:
        self._checkpoints.view = name

    @property
    def redis(self) -> Client:
        """The client for a look at the keys (tests, tools); calls open theirs with cluster detection."""
        return self._client.now

    async def _open(self) -> Client:
        client = await self._client()
        if not self._scripts:
            self._cluster = is_cluster(client)
            for key, script in self.SCRIPTS:
                self._scripts[key] = client.register_script(script)
        return client

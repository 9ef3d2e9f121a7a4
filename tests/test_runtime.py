"""The runtime (helix_es.client.runtime): what memories of one loop share, and who closes it."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path
from typing import Any

import pytest

from helix_es import Message, open_memory
from helix_es.client.keys import StoredSessionKeys
from helix_es.client.runtime import Runtime, RuntimeClosed, default_runtime
from helix_es.config import load_config
from helix_es.model.errors import HelixError
from helix_es.sync.loop import LoopThread


def _embedded(tmp_path: Path) -> dict[str, Any]:
    return {"log": {"path": str(tmp_path / "log"), "fsync": False}, "memory": {"type": "conversation"}}


def test_two_memories_on_one_runtime_share_one_backend_and_the_last_close_releases_it(tmp_path: Path) -> None:
    cfg = _embedded(tmp_path)
    log = load_config(cfg).log

    async def main() -> None:
        async with Runtime() as runtime:
            async with open_memory(cfg, session_id="a", runtime=runtime) as a:
                async with open_memory(cfg, session_id="a", runtime=runtime) as b:
                    await a.add(Message("user", "hi"))
                    assert [m.content for m in await b.get()] == ["hi"]  # one backend: the inline fold is shared
                assert runtime.holds(log)
            assert not runtime.holds(log)

    asyncio.run(main())


def test_the_default_runtime_is_the_loops_and_closes_when_asyncio_run_shuts_the_loop_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HELIX_ENCRYPTION_KEY", base64.b64encode(os.urandom(32)).decode())
    monkeypatch.setenv("HELIX_KEY_STORE", "file")
    monkeypatch.setenv("HELIX_KEY_STORE_URL", str(tmp_path / "keys"))
    seen: list[Runtime] = []

    async def main() -> None:
        runtime = default_runtime()
        assert default_runtime() is runtime
        keys = runtime.keys()
        assert isinstance(keys, StoredSessionKeys) and runtime.keys() is keys  # one provider per settings
        seen.append(runtime)

    asyncio.run(main())
    assert seen[0].closed
    asyncio.run(main())
    assert seen[1] is not seen[0] and seen[1].closed  # another loop, another runtime


def test_a_closed_runtime_refuses_and_a_runtime_serves_one_loop(tmp_path: Path) -> None:
    cfg = _embedded(tmp_path)
    runtime = Runtime()

    async def use() -> None:
        async with open_memory(cfg, session_id="s", runtime=runtime):
            pass

    asyncio.run(use())
    with pytest.raises(HelixError, match="one event loop"):
        asyncio.run(use())
    asyncio.run(runtime.aclose())
    with pytest.raises(RuntimeClosed):
        asyncio.run(use())


def test_a_loop_thread_holds_its_loops_runtime_and_stop_closes_it() -> None:
    running = LoopThread()

    async def default() -> Runtime:
        return default_runtime()

    assert running.wait(default()) is running.runtime
    running.stop(5.0)
    assert running.runtime.closed

"""The checkpointer's TTL forgets idle threads by the mechanism of every forgetting: a sweep records
`MemoryForgotten` (policy `ttl`, the thread's session) and the checkpoint view folds it, embedded and
in Redis and PostgreSQL behind Kafka; a reopen or a rebuild forgets the same threads."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tests.conftest import require_module, start_projector, wait_for

require_module("langgraph", "LangGraph")

import pytest  # noqa: E402
from langgraph.types import Command  # noqa: E402

from helix_es.client.runtime import default_runtime  # noqa: E402
from helix_es.history.audit_forget import describe_forget  # noqa: E402
from helix_es.integrations.langgraph import HelixSaver  # noqa: E402
from helix_es.log.embedded import EmbeddedLog  # noqa: E402
from helix_es.model.errors import InvalidInput  # noqa: E402
from helix_es.model.events import Event, MemoryForgotten  # noqa: E402
from tests import langgraph_graph as lg  # noqa: E402
from tests.conftest import cli  # noqa: E402
from tests.test_rebuild import write_config  # noqa: E402

TTL = {"default_ttl": 0.005}  # minutes: 300 ms
START: Any = {"steps": [], "answer": ""}


def thread(tid: str) -> Any:
    return {"configurable": {"thread_id": tid}}


async def run(saver: HelixSaver, tid: str) -> None:
    """The docs' graph to its interrupt: two checkpoints and pending writes on the thread."""
    await lg.graph(saver).ainvoke(START, thread(tid))


async def newest_ts(saver: HelixSaver, tid: str) -> datetime:
    found = await saver.aget_tuple(thread(tid))
    assert found is not None
    return datetime.fromisoformat(found.checkpoint["ts"])


async def history(saver: HelixSaver, tid: str) -> list[dict[str, Any]]:
    return [lg.snapshot(s) async for s in lg.graph(saver).aget_state_history(thread(tid))]


async def forgotten_on(log_path: Path, namespace: str) -> list[Event]:
    log = EmbeddedLog(str(log_path), fsync=False)
    try:
        return [r.event async for r in log.read(namespace) if isinstance(r.event.payload, MemoryForgotten)]
    finally:
        await log.close()


async def sweep_the_old_one(saver: HelixSaver) -> None:
    """Thread `old` runs, then `new` 0.4 s later; a sweep 0.1 s after `new` forgets `old` only."""
    await run(saver, "old")
    first = await newest_ts(saver, "old")
    await asyncio.sleep(max(0.0, (first + timedelta(seconds=0.4) - datetime.now(first.tzinfo)).total_seconds()))
    await run(saver, "new")
    now = await newest_ts(saver, "new") + timedelta(seconds=0.1)
    assert await saver.asweep_ttl(now) == 1
    assert await saver.asweep_ttl(now) == 0  # folded: nothing left to sweep


async def test_a_sweep_forgets_idle_threads_on_the_log_and_a_reopen_forgets_the_same(
    tmp_path: Path, namespace: str
) -> None:
    config = {"log": {"path": str(tmp_path / "log")}, "checkpoints": {"namespace": namespace}}
    async with HelixSaver.from_config(config, ttl=TTL) as saver:  # type: ignore[arg-type]
        await sweep_the_old_one(saver)
        kept = await history(saver, "new")
        assert await history(saver, "old") == [] and len(kept) == 3
        assert [t.config["configurable"]["thread_id"] async for t in saver.alist(None)] == ["new"] * 3
    async with HelixSaver.from_config(config) as saver:  # folded again from the log
        assert await history(saver, "old") == [] and await history(saver, "new") == kept
    events = await forgotten_on(tmp_path / "log", namespace)
    assert [(e.session_id, e.payload.policy, e.payload.session) for e in events] == [("old", "ttl", True)]  # type: ignore[union-attr]
    said = describe_forget(events[0].payload)  # type: ignore[arg-type]
    assert said.startswith("forgotten from checkpoints by policy ttl") and "unless it saved after checkpoint" in said


async def test_a_sweep_reads_sealed_checkpoints(
    tmp_path: Path, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `encryption: true` the sweep opens each thread's newest checkpoint to read its time."""
    lg.use_file_keys(monkeypatch, str(tmp_path / "keys"))
    config = {"log": {"path": str(tmp_path / "log")}, "checkpoints": {"namespace": namespace, "encryption": True}}
    try:
        async with HelixSaver.from_config(config, ttl=TTL) as saver:  # type: ignore[arg-type]
            await sweep_the_old_one(saver)
            assert await history(saver, "old") == [] and len(await history(saver, "new")) == 3
    finally:
        await default_runtime().aclose()


async def test_a_thread_that_saves_after_the_sweep_looked_keeps_everything(tmp_path: Path, namespace: str) -> None:
    """The sweep's event lands after the thread saved again: it names the checkpoint the sweep saw,
    so the fold keeps the thread (and a reopen too)."""
    config = {"log": {"path": str(tmp_path / "log")}, "checkpoints": {"namespace": namespace}}
    async with HelixSaver.from_config(config, ttl=TTL) as saver:  # type: ignore[arg-type]
        await run(saver, "t")
        seen = await saver.aget_tuple(thread("t"))
        assert seen is not None
        await lg.graph(saver).ainvoke(Command(resume="yes"), thread("t"))  # the thread goes on
        before = await history(saver, "t")
        late = MemoryForgotten(
            ("checkpoints",), "ttl", "idle", session=True, ids=(seen.config["configurable"]["checkpoint_id"],)
        )
        await saver._log.append("t", [late])
        assert await history(saver, "t") == before and len(before) > 2
    async with HelixSaver.from_config(config) as saver:
        assert await history(saver, "t") == before


async def test_ttl_config_is_checked_and_the_sweeper_runs_at_its_interval(tmp_path: Path, namespace: str) -> None:
    config = {"log": {"path": str(tmp_path / "log")}, "checkpoints": {"namespace": namespace}}
    for bad, field in (
        ({"default_ttl": 0}, "ttl.default_ttl"),
        ({"strategy": "keep_latest"}, "ttl.strategy"),
        ({"ttl": 5}, "ttl.ttl"),
        ({"sweep_interval_minutes": "1"}, "ttl.sweep_interval_minutes"),
    ):
        with pytest.raises(InvalidInput) as caught:
            HelixSaver.from_config(config, ttl=bad)  # type: ignore[arg-type]
        assert caught.value.field == field
    async with HelixSaver.from_config(config) as saver:
        with pytest.raises(InvalidInput, match="no TTL to sweep by"):
            await saver.asweep_ttl()
    ttl = {**TTL, "sweep_interval_minutes": 0.005}
    async with HelixSaver.from_config(config, ttl=ttl) as saver:  # type: ignore[arg-type]
        await run(saver, "idle")

        async def swept() -> bool:
            return await saver.aget_tuple(thread("idle")) is None

        await wait_for(swept, 10, "the sweeper to forget the idle thread")
        assert await saver.stop_ttl_sweeper() is True
        assert await saver.stop_ttl_sweeper() is False
    assert [e.session_id for e in await forgotten_on(tmp_path / "log", namespace)] == ["idle"]


@pytest.mark.parametrize("store", ["redis", "postgres"])
async def test_on_kafka_the_view_forgets_and_a_rebuild_forgets_the_same(
    tmp_path: Path, namespace: str, store: str, procs: list[Any], request: Any
) -> None:
    """The projector folds the sweep into Redis or PostgreSQL; `helix-es rebuild` folds the recorded
    forgetting into a new target (no sweep asked) and readers see the same threads there."""
    key, fixture = {"postgres": ("dsn", "postgres_dsn"), "redis": ("redis_url", "redis_url")}[store]
    config = lg.on_kafka(namespace, {"store": store, key: request.getfixturevalue(fixture)})
    procs.append(start_projector(config, tmp_path))
    async with HelixSaver.from_config(config, ttl=TTL) as saver:  # type: ignore[arg-type]
        await sweep_the_old_one(saver)
        kept = await history(saver, "new")
        assert await history(saver, "old") == [] and len(kept) == 3
        before = [(t.config["configurable"]["thread_id"], t.checkpoint["id"]) async for t in saver.alist(None)]
        old_target = saver._log.store.name
    code, _, err = await cli("rebuild", "--config", str(write_config(tmp_path, config)), "--json")
    assert code == 0, err
    async with HelixSaver.from_config(config) as saver:
        target = saver._log.store.name  # readers moved to the rebuilt target
        assert target != old_target and target.startswith("checkpoints@v")
        assert await history(saver, "old") == [] and await history(saver, "new") == kept
        assert [(t.config["configurable"]["thread_id"], t.checkpoint["id"]) async for t in saver.alist(None)] == before

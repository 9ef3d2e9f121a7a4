"""The log keeps a LangGraph thread's whole history: `helix-es audit` shows it, deletions are events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import cli, require_module, start_projector, stop, wait_for

require_module("langgraph", "LangGraph")

from helix_es.integrations.langgraph import HelixSaver  # noqa: E402
from helix_es.stores.postgres.checkpoints import PostgresCheckpoints  # noqa: E402
from tests import langgraph_graph as lg  # noqa: E402


async def test_audit_shows_a_threads_checkpoints_and_its_deletion(
    tmp_path: Path, namespace: str, session_id: str
) -> None:
    config = {"log": {"path": str(tmp_path / "log")}, "checkpoints": {"namespace": namespace}}
    path = tmp_path / "graph.yaml"
    path.write_text(json.dumps(config))
    async with HelixSaver.from_config(config) as saver:
        outcome = await lg.ascenario(saver, session_id)
        thread = {"configurable": {"thread_id": session_id}}
        ids = [t.config["configurable"]["checkpoint_id"] async for t in saver.alist(thread)]
        await saver.adelete_thread(session_id)
        assert await saver.aget_tuple({"configurable": {"thread_id": session_id}}) is None
    assert len(ids) == len(outcome["history"])

    code, out, err = await cli("audit", "--config", str(path), "--session", session_id)
    assert code == 0, err
    for cid in ids:
        assert f"checkpoint {cid}" in out
    assert "writes of task" in out and "__interrupt__" in out  # the interrupt is a pending write
    assert 'steps = ["act:yes"]' in out  # values are shown as text
    assert out.rstrip().endswith("thread deleted: every checkpoint and write")

    code, out, err = await cli("audit", "--config", str(path), "--session", session_id, "--json")
    assert code == 0, err
    events = json.loads(out)["events"]
    kinds = [e["type"] for e in events]
    assert kinds.count("CheckpointSaved") == len(ids) and kinds[-1] == "CheckpointsDeleted"
    saved = [e["payload"] for e in events if e["type"] == "CheckpointSaved"]
    assert {s["checkpoint_id"] for s in saved} == set(ids)
    assert all(s["checkpoint"]["bytes"] > 0 for s in saved)


async def test_view_dropped_is_refolded_from_the_log(
    tmp_path: Path, namespace: str, session_id: str, kafka_bootstrap: str, postgres_dsn: str, procs: list[Any]
) -> None:
    """The view is a cache of the log: drop it, start the projector again, and a fresh saver reads it all back."""
    config = lg.on_kafka(namespace, {"store": "postgres", "dsn": postgres_dsn})
    procs.append(start_projector(config, tmp_path))
    async with HelixSaver.from_config(config) as saver:
        expected = await lg.ascenario(saver, session_id)
    stop(procs.pop())
    store = PostgresCheckpoints(postgres_dsn)
    try:
        await store.drop([namespace], [f"helix.memory.{namespace}"])
        assert await store.listing(namespace, None, None, None, None) == []
    finally:
        await store.close()
    procs.append(start_projector(config, tmp_path))
    async with HelixSaver.from_config(config) as saver:
        g = lg.graph(saver)
        thread = {"configurable": {"thread_id": session_id}}

        async def refolded() -> bool:
            return len([s async for s in g.aget_state_history(thread)]) == len(expected["history"])

        await wait_for(refolded, 60, "the projector to refold the thread")
        assert [lg.snapshot(s) async for s in g.aget_state_history(thread)] == expected["history"]

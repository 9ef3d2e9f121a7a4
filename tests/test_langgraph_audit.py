"""The log keeps a LangGraph thread's whole history: `helix-es audit` shows it, deletions are events."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli, require_module, start_projector, stop, wait_for

require_module("langgraph", "LangGraph")

from helix_es.client.runtime import default_runtime  # noqa: E402
from helix_es.history.erasure import NotShreddable, forget  # noqa: E402
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
        await saver.aprune([session_id], strategy="keep_latest")
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
    pruned = next(line for line in out.splitlines() if "checkpoints deleted: " in line)
    assert all(cid in pruned for cid in ids[1:]) and ids[0] not in pruned  # all but the latest
    assert "blob(s) no checkpoint left refers to" in pruned

    code, out, err = await cli("audit", "--config", str(path), "--session", session_id, "--json")
    assert code == 0, err
    events = json.loads(out)["events"]
    kinds = [e["type"] for e in events]
    assert kinds.count("CheckpointSaved") == len(ids) and kinds[-2:] == ["CheckpointsDeleted"] * 2
    listed = events[-2]["payload"]
    assert listed["scope"] == "checkpoints" and len(listed["checkpoints"]) == len(ids) - 1 and listed["blobs"]
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


@pytest.fixture
async def file_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[None]:
    lg.use_file_keys(monkeypatch, str(tmp_path / "keys"))
    yield
    await default_runtime().aclose()


async def test_forget_shreds_a_thread(tmp_path: Path, namespace: str, session_id: str, file_keys: None) -> None:
    sealed = {"log": {"path": str(tmp_path / "log")}, "checkpoints": {"namespace": namespace, "encryption": True}}
    plain = {"log": {"path": str(tmp_path / "log")}, "checkpoints": {"namespace": f"{namespace}-plain"}}
    for config in (sealed, plain):
        async with HelixSaver.from_config(config) as saver:
            assert (await lg.ascenario(saver, session_id))["done"]["steps"][-1] == "act:yes"
    log = tmp_path / "log"
    assert b"act:yes" not in (log / f"helix.memory.{namespace}.log").read_bytes()  # sealed
    assert b"act:yes" in (log / f"helix.memory.{namespace}-plain.log").read_bytes()
    path = tmp_path / "sealed.yaml"
    path.write_text(json.dumps(sealed))

    code, out, err = await cli("forget", "--config", str(path), "--session", session_id, "--yes")
    assert code == 0, err
    assert out.startswith(f"forgot {namespace}/{session_id}: destroyed 1 key(s)")
    async with HelixSaver.from_config(sealed) as saver:
        assert await saver.aget_tuple({"configurable": {"thread_id": session_id}}) is None
        assert [t async for t in saver.alist({"configurable": {"thread_id": session_id}})] == []
    code, out, err = await cli("audit", "--config", str(path), "--session", session_id)
    assert code == 0 and "SessionErased" in out and "act:yes" not in out, err
    assert "steps = sealed by key dk-" in out  # shown as what it is
    # Forgotten already: nothing to do. A thread written in plaintext cannot be shredded.
    code, out, _ = await cli("forget", "--config", str(path), "--session", session_id, "--yes")
    assert code == 0 and "already erased" in out
    (tmp_path / "plain.yaml").write_text(json.dumps(plain))
    code, _, err = await cli("forget", "--config", str(tmp_path / "plain.yaml"), "--session", session_id, "--yes")
    assert code == 2 and "encryption is off" in err


async def test_a_memory_forget_on_a_threads_namespace_counts_its_values(
    tmp_path: Path, namespace: str, session_id: str, file_keys: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`forget` with a memory config (what `POST .../forget` and the MCP server call) on the namespace
    of a LangGraph thread: unsealed checkpoint values are not shreddable, so it refuses and changes
    nothing; sealed ones are, and it shreds them."""
    monkeypatch.setenv("HELIX_ENCRYPTION_KEY", base64.b64encode(os.urandom(32)).decode())
    memory = {"log": {"path": str(tmp_path / "log")}, "memory_middleware": ["encryption"]}
    for ns, encryption in ((f"{namespace}-plain", False), (namespace, True)):
        thread = {**memory, "checkpoints": {"namespace": ns, "encryption": encryption}}
        async with HelixSaver.from_config(thread) as saver:
            await lg.ascenario(saver, session_id)
        config = {**memory, "memory": {"namespace": ns}}
        if not encryption:
            with pytest.raises(NotShreddable, match=r"of the \d+ messages .* not sealed"):
                await forget(config, session_id=session_id)
            async with HelixSaver.from_config(thread) as saver:  # nothing changed
                assert await saver.aget_tuple({"configurable": {"thread_id": session_id}}) is not None
            continue
        result = await forget(config, session_id=session_id)
        assert result.erased_keys and result.unshreddable == 0 and result.messages > 0
        async with HelixSaver.from_config(thread) as saver:
            assert await saver.aget_tuple({"configurable": {"thread_id": session_id}}) is None

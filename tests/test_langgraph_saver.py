"""HelixSaver under a real LangGraph graph: interrupt, resume, history and replay as with InMemorySaver,
and the same history read back by a fresh saver in another process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import ROOT, require_module, start_projector

require_module("langgraph", "LangGraph")

from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from helix_es.integrations.langgraph import HelixSaver  # noqa: E402
from tests import langgraph_graph as lg  # noqa: E402


def read_back(config: dict[str, Any], thread: str) -> list[dict[str, Any]]:
    """The thread's history as a fresh saver in a new process reads it."""
    out = subprocess.run(
        [sys.executable, "-m", "tests.langgraph_graph", json.dumps(config), thread],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    history: list[dict[str, Any]] = json.loads(out.stdout)
    return history


def test_graph_as_with_in_memory_saver_sync_embedded(tmp_path: Path, namespace: str, session_id: str) -> None:
    expected = lg.scenario(InMemorySaver(), session_id)
    # The scenario is what it says: an interrupt seen in the history, a replay that forked it.
    assert expected["interrupt"] and expected["replayed"]["steps"][-1] == "act:yes"
    assert any(h["interrupts"] for h in expected["history"]) and any(h["source"] == "fork" for h in expected["history"])
    config = {"log": {"path": str(tmp_path / "log")}, "checkpoints": {"namespace": namespace}}
    with HelixSaver.from_config(config) as saver:
        got = lg.scenario(saver, session_id)
    assert got == expected
    assert read_back(config, session_id) == expected["history"]


async def test_graph_as_with_in_memory_saver_async_kafka_postgres(
    tmp_path: Path, namespace: str, session_id: str, kafka_bootstrap: str, postgres_dsn: str, procs: list[Any]
) -> None:
    expected = await lg.ascenario(InMemorySaver(), session_id)
    config = {
        "log": {"type": "kafka"},
        "checkpoints": {"store": "postgres", "dsn": postgres_dsn, "namespace": namespace, "read_timeout": 60},
    }
    procs.append(start_projector(config, tmp_path))
    async with HelixSaver.from_config(config) as saver:
        got = await lg.ascenario(saver, session_id)
    assert got == expected
    assert read_back(config, session_id) == expected["history"]

"""HelixSaver under a real LangGraph graph: interrupt, resume, history and replay as with InMemorySaver,
and the same history read back by a fresh saver in another process."""

from __future__ import annotations

import asyncio
import json
import operator
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

from tests.conftest import ROOT, require_module, start_projector

require_module("langgraph", "LangGraph")

import pytest  # noqa: E402
from langgraph.channels.delta import DeltaChannel  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

from helix_es import Message, open_memory  # noqa: E402
from helix_es.integrations.langgraph import HelixSaver  # noqa: E402
from helix_es.log.embedded import EmbeddedLog  # noqa: E402
from helix_es.model.errors import ConfigError, ConsistencyTimeout, InvalidInput  # noqa: E402
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


@pytest.mark.parametrize("store", ["postgres", "redis"])
async def test_graph_as_with_in_memory_saver_async_kafka(
    tmp_path: Path, namespace: str, session_id: str, kafka_bootstrap: str, store: str, procs: list[Any], request: Any
) -> None:
    expected = await lg.ascenario(InMemorySaver(), session_id)
    key, fixture = {"postgres": ("dsn", "postgres_dsn"), "redis": ("redis_url", "redis_url")}[store]
    config = lg.on_kafka(namespace, {"store": store, key: request.getfixturevalue(fixture)})
    procs.append(start_projector(config, tmp_path))
    async with HelixSaver.from_config(config) as saver:
        got = await lg.ascenario(saver, session_id)
    assert got == expected
    assert read_back(config, session_id) == expected["history"]


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"log": {"type": "embedded"}}, "checkpoints"),
        ({"checkpoints": {"store": "bogus"}}, "checkpoints.store"),
        ({"checkpoints": {"store": "file"}}, "checkpoints.store"),
        ({"log": {"type": "kafka"}, "checkpoints": {"store": "memory"}}, "checkpoints.store"),
        ({"checkpoints": {"namespace": "no spaces"}}, "checkpoints.namespace"),
        ({"checkpoints": {"nmespace": "x"}}, "checkpoints.nmespace"),
        ({"checkpoints": {"read_timeout": 0}}, "checkpoints.read_timeout"),
    ],
)
def test_bad_config_names_the_key(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        HelixSaver.from_config(config)
    assert caught.value.field == field


async def test_bad_input_writes_nothing(tmp_path: Path, namespace: str) -> None:
    config = {"log": {"path": str(tmp_path / "log")}, "checkpoints": {"namespace": namespace}}
    checkpoint = empty_checkpoint()
    async with HelixSaver.from_config(config) as saver:
        with pytest.raises(InvalidInput) as caught:
            await saver.aput({"configurable": {"thread_id": "a{b}", "checkpoint_ns": ""}}, checkpoint, {}, {})
        assert caught.value.field == "config.configurable.thread_id"
        with pytest.raises(InvalidInput) as caught:
            await saver.aput_writes({"configurable": {"thread_id": "t"}}, [("x", 1)], "task")
        assert caught.value.field == "config.configurable.checkpoint_id"
        with pytest.raises(InvalidInput) as caught:
            await saver.aprune(["t"], strategy="keep_some")
        assert caught.value.field == "strategy"
        # A sync call on the loop the saver lives on would block that loop: refused, clearly.
        with pytest.raises(RuntimeError, match="async method"):
            saver.get_tuple({"configurable": {"thread_id": "t"}})
    log = EmbeddedLog(tmp_path / "log")
    try:
        assert [r async for r in log.read(namespace)] == []
    finally:
        await log.close()


def extend(state: list[Any] | None, writes: Any) -> list[Any]:
    return [*(state or []), *(x for w in writes for x in w)]


def delta_graph(snapshot_frequency: int) -> Any:
    """A graph whose state is one DeltaChannel: each run adds its input and the length it saw."""
    channel = DeltaChannel(extend, list, snapshot_frequency=snapshot_frequency)
    State = TypedDict("State", {"items": Annotated[list[Any], channel]})  # noqa: UP013  # the channel is built here

    def node(state: Any) -> dict[str, Any]:
        return {"items": [len(state.get("items") or [])]}

    graph = StateGraph(State)
    graph.add_node("n", node)
    graph.add_edge(START, "n")
    graph.add_edge("n", END)
    return graph


@pytest.mark.parametrize(
    ("frequency", "runs"), [(100, 4), (3, 7), (1, 4)], ids=["no-snapshot-yet", "snapshot-every-3", "every-update"]
)
def test_prune_keep_latest_keeps_what_a_delta_channel_is_rebuilt_from(
    tmp_path: Path, namespace: str, frequency: int, runs: int
) -> None:
    """A DeltaChannel's value is rebuilt from its ancestors' writes back to its last snapshot:
    keep_latest keeps those ancestors (all of them before any snapshot, none when the latest
    checkpoint holds one) and prunes the rest; the state reads the same, in a fresh saver too."""
    config = {"log": {"path": str(tmp_path / "log")}, "checkpoints": {"namespace": namespace}}
    thread = {"configurable": {"thread_id": "t"}}
    with HelixSaver.from_config(config) as saver:
        app = delta_graph(frequency).compile(checkpointer=saver)
        for i in range(runs):
            app.invoke({"items": [f"in{i}"]}, thread)
        before, steps = app.get_state(thread).values, len(list(saver.list(thread)))
        assert len(before["items"]) == 2 * runs
        saver.prune(["t"], strategy="keep_latest")
        assert app.get_state(thread).values == before
        kept = len(list(saver.list(thread)))
    with HelixSaver.from_config(config) as fresh:
        assert delta_graph(frequency).compile(checkpointer=fresh).get_state(thread).values == before
    assert {100: kept == steps, 3: 1 < kept < steps, 1: kept == 1}[frequency], (kept, steps)


def counting_graph() -> Any:
    """A graph that appends to a list channel (each step a new blob of it) and counts its steps."""
    State = TypedDict("State", {"items": Annotated[list[str], operator.add], "steps": int})  # noqa: UP013

    def node(state: Any) -> dict[str, Any]:
        return {"items": ["x" * 100], "steps": state.get("steps", 0) + 1}

    graph = StateGraph(State)
    graph.add_node("n", node)
    graph.add_edge(START, "n")
    graph.add_edge("n", END)
    return graph


Pair = tuple[str, str]  # (channel, version)


async def referenced(saver: HelixSaver, thread: str) -> dict[str, set[Pair]]:
    """Each checkpoint of the thread: the channel versions it refers to."""
    return {
        t.checkpoint["id"]: {(ch, json.dumps(v)) for ch, v in t.checkpoint["channel_versions"].items()}
        async for t in saver.alist({"configurable": {"thread_id": thread}})
    }


async def held(saver: HelixSaver, thread: str, pairs: set[Pair]) -> set[Pair]:
    """Those of `pairs` whose blob the view holds (a value, not an empty channel's marker)."""
    reads, namespace = saver._log.reads, saver._log.namespace
    return {pair for pair in pairs if await reads.blobs(namespace, thread, "", [pair])}


@pytest.mark.parametrize("where", ["embedded", "kafka-redis", "kafka-postgres"])
async def test_prune_and_delete_for_runs_drop_the_blobs_no_checkpoint_left_refers_to(
    tmp_path: Path, namespace: str, where: str, procs: list[Any], request: Any
) -> None:
    """The view cannot see which blobs a checkpoint refers to (its channel versions are serialized):
    the saver lists those only deleted checkpoints referred to, and the deletion drops them."""
    if where == "embedded":
        config: dict[str, Any] = {"log": {"path": str(tmp_path / "log")}, "checkpoints": {"namespace": namespace}}
    else:
        store = where.split("-")[1]
        key, fixture = {"postgres": ("dsn", "postgres_dsn"), "redis": ("redis_url", "redis_url")}[store]
        config = lg.on_kafka(namespace, {"store": store, key: request.getfixturevalue(fixture)})
        procs.append(start_projector(config, tmp_path))
    async with HelixSaver.from_config(config) as saver:
        app = counting_graph().compile(checkpointer=saver)
        for thread in ("pruned", "runs"):
            for run in range(4):
                call = {"configurable": {"thread_id": thread}, "metadata": {"run_id": f"run-{run}"}}
                await app.ainvoke({"items": [f"in{run}"]}, call)
        for thread in ("pruned", "runs"):
            before = await referenced(saver, thread)
            values = await held(saver, thread, set().union(*before.values()))
            state = (await app.aget_state({"configurable": {"thread_id": thread}})).values
            if thread == "pruned":
                await saver.aprune([thread], strategy="keep_latest")
            else:
                await saver.adelete_for_runs(["run-0", "run-1"])
            after = await referenced(saver, thread)
            assert 0 < len(after) < len(before)
            kept = set().union(*after.values())
            # What the kept checkpoints refer to stays; what only the deleted ones referred to goes.
            assert await held(saver, thread, values) == values & kept
            assert values - kept, "nothing to drop: the test proves nothing"
            if thread == "pruned":
                assert (await app.aget_state({"configurable": {"thread_id": thread}})).values == state


async def test_one_projector_service_for_memories_and_checkpoints(
    tmp_path: Path,
    namespace: str,
    session_id: str,
    kafka_bootstrap: str,
    redis_url: str,
    postgres_dsn: str,
    procs: list[Any],
) -> None:
    """One file names a memory and a checkpoint view; one `helix-es project` folds both."""
    config = lg.on_kafka(f"{namespace}-graph", {"store": "postgres", "dsn": postgres_dsn})
    config["memory"] = {"type": "conversation", "store": "redis", "redis_url": redis_url, "namespace": namespace}
    procs.append(start_projector(config, tmp_path))
    async with open_memory(config, session_id=session_id) as memory, HelixSaver.from_config(config) as saver:
        await memory.add(Message(role="user", content="remember the graph"))
        got = await lg.ascenario(saver, session_id)
        assert [m.content for m in await memory.get()] == ["remember the graph"]
    assert got["done"]["steps"] == ["plan", "ask:yes", "act:yes"]
    assert read_back(config, session_id) == got["history"]


def test_sync_opened_saver_serves_async_graphs_on_other_loops(tmp_path: Path, namespace: str) -> None:
    """`with` keeps the saver on its own loop thread: an async graph on any loop reaches it there."""
    expected = asyncio.run(lg.ascenario(InMemorySaver(), "t"))
    config = {"log": {"path": str(tmp_path / "log")}, "checkpoints": {"namespace": namespace}}
    with HelixSaver.from_config(config) as saver:
        assert asyncio.run(lg.ascenario(saver, "t")) == expected
        assert lg.history(lg.graph(saver), "t") == expected["history"]  # and sync calls, from this thread


async def test_async_opened_saver_serves_sync_graphs_in_threads(tmp_path: Path, namespace: str) -> None:
    expected = lg.scenario(InMemorySaver(), "t")
    config = {"log": {"path": str(tmp_path / "log")}, "checkpoints": {"namespace": namespace}}
    async with HelixSaver.from_config(config) as saver:
        assert await asyncio.to_thread(lg.scenario, saver, "t") == expected


async def test_savers_on_one_embedded_log_see_each_others_writes(tmp_path: Path, namespace: str) -> None:
    """Two savers of one embedded log in one process share its view (its backend), memory store too;
    a sync memory's loop does the same for savers opened with `with`."""
    config = {"log": {"path": str(tmp_path / "log")}, "checkpoints": {"namespace": namespace}}
    expected = await lg.ascenario(InMemorySaver(), "t")
    async with HelixSaver.from_config(config) as writer, HelixSaver.from_config(config) as reader:
        assert await lg.ascenario(writer, "t") == expected
        history = lg.graph(reader).aget_state_history({"configurable": {"thread_id": "t"}})
        assert [lg.snapshot(s) async for s in history] == expected["history"]

    def in_threads() -> list[dict[str, Any]]:
        with HelixSaver.from_config(config) as writer, HelixSaver.from_config(config) as reader:
            lg.scenario(writer, "u")
            return lg.history(lg.graph(reader), "u")

    assert await asyncio.to_thread(in_threads) == (await lg.ascenario(InMemorySaver(), "u"))["history"]


async def test_read_waits_for_the_view_then_times_out_clearly(
    namespace: str, kafka_bootstrap: str, postgres_dsn: str
) -> None:
    """No projector runs for this Kafka log: a read after a write waits `read_timeout`, then says why."""
    config = lg.on_kafka(namespace, {"store": "postgres", "dsn": postgres_dsn, "read_timeout": 0.5})
    async with HelixSaver.from_config(config) as saver:
        thread = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        await saver.aput(thread, empty_checkpoint(), {}, {})
        with pytest.raises(ConsistencyTimeout, match="helix-es project"):
            await saver.aget_tuple(thread)
        # A thread this saver never wrote is not waited for: nothing there yet.
        assert await saver.aget_tuple({"configurable": {"thread_id": "other"}}) is None


def test_readme_example_runs(tmp_path: Path) -> None:
    """The docs' example, in a directory of its own: what it prints is what the page says."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "readme_langgraph_example.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "{'question': 'go ahead?'}"
    assert lines[1] == lines[3] == "{'steps': ['plan', 'ask:yes', 'act:yes'], 'answer': 'yes'}"
    assert lines[2] == "[(3, ()), (2, ('act',)), (1, ('ask',)), (0, ('plan',)), (-1, ('__start__',))]"
    assert (tmp_path / ".helix" / "log" / "helix.memory.my-graph.log").stat().st_size > 0

"""A small LangGraph graph with an interrupt, run on any checkpointer, and its history in plain data.

`python -m tests.langgraph_graph CONFIG THREAD` opens a fresh HelixSaver on CONFIG (JSON) and
prints the thread's history as JSON: what another process reads back.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, StateSnapshot

from tests.readme_langgraph_example import builder


def graph(saver: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any]:
    """The docs' graph (docs/integrations/langgraph-checkpointer.md): plan, ask (an interrupt), act."""
    return builder.compile(checkpointer=saver)


def snapshot(s: StateSnapshot) -> dict[str, Any]:
    """A state without what differs between savers (ids, times)."""
    return {
        "values": s.values,
        "next": list(s.next),
        "source": s.metadata.get("source") if s.metadata else None,
        "step": s.metadata.get("step") if s.metadata else None,
        "interrupts": [i.value for t in s.tasks for i in t.interrupts],
        "has_parent": s.parent_config is not None,
    }


def history(g: CompiledStateGraph[Any], thread: str) -> list[dict[str, Any]]:
    return [snapshot(s) for s in g.get_state_history({"configurable": {"thread_id": thread}})]


def scenario(saver: BaseCheckpointSaver[Any], thread: str) -> dict[str, Any]:
    """Run to the interrupt, resume, then replay from the checkpoint before `act`: what each step showed."""
    g = graph(saver)
    config: Any = {"configurable": {"thread_id": thread}}
    first = g.invoke({"steps": [], "answer": ""}, config)
    paused = snapshot(g.get_state(config))
    done = g.invoke(Command(resume="yes"), config)
    before_act = next(s for s in g.get_state_history(config) if list(s.next) == ["act"])
    replayed = g.invoke(None, before_act.config)
    return outcome(first, paused, done, replayed, history(g, thread))


def outcome(
    first: dict[str, Any], paused: dict[str, Any], done: Any, replayed: Any, seen: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "first": {k: v for k, v in first.items() if k != "__interrupt__"},
        "interrupt": [i.value for i in first.get("__interrupt__", [])],
        "paused": paused,
        "done": done,
        "replayed": replayed,
        "history": seen,
    }


async def ascenario(saver: BaseCheckpointSaver[Any], thread: str) -> dict[str, Any]:
    """`scenario`, with the async API."""
    g = graph(saver)
    config: Any = {"configurable": {"thread_id": thread}}
    first = await g.ainvoke({"steps": [], "answer": ""}, config)
    paused = snapshot(await g.aget_state(config))
    done = await g.ainvoke(Command(resume="yes"), config)
    before_act = [s async for s in g.aget_state_history(config) if list(s.next) == ["act"]]
    replayed = await g.ainvoke(None, before_act[0].config)
    return outcome(first, paused, done, replayed, [snapshot(s) async for s in g.aget_state_history(config)])


def use_file_keys(env: Any, keys: str) -> None:
    """Data keys in a file key store at `keys`, wrapped by a fresh master key (`env`: a MonkeyPatch)."""
    import base64
    import os

    env.setenv("HELIX_ENCRYPTION_KEY", base64.b64encode(os.urandom(32)).decode())
    env.setenv("HELIX_KEY_STORE", "file")
    env.setenv("HELIX_KEY_STORE_URL", keys)
    env.delenv("HELIX_ENCRYPTION_OLD_KEYS", raising=False)
    env.setenv("HELIX_KEY_CACHE_TTL", "0")  # a forget in another process is seen at once


def on_kafka(namespace: str, checkpoints: dict[str, Any]) -> dict[str, Any]:
    """A config of the Kafka log whose checkpoint view `helix-es project` folds (reads wait for it)."""
    return {"log": {"type": "kafka"}, "checkpoints": {"namespace": namespace, "read_timeout": 60, **checkpoints}}


def main(config: str, thread: str) -> None:
    from helix_es.integrations.langgraph import HelixSaver

    with HelixSaver.from_config(json.loads(config)) as saver:
        print(json.dumps(history(graph(saver), thread)))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

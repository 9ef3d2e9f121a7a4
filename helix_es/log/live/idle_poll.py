"""The idle partitions' long poll: a projector's child process that only says which partitions woke,
and which namespace topics there are (why, and the JSON lines it reads and writes: `helix_es.log.live.cold`).

The parent runs this file by its path (`python -P`: its directory stays off `sys.path`), not as a
module of helix_es: it loads the log layer's `kafka_clients` (the standard library and aiokafka only) from
its file, without the helix_es package, whose import would add most of a second to every projector's start.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import re
import signal
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any


def _log_module(name: str) -> ModuleType:
    """The module `name` of the log layer's directory (this one's parent), loaded from its file alone."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent.parent / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING or __package__:
    from helix_es.log import kafka_clients as clients
else:  # run by its path, as the parent does
    clients = _log_module("kafka_clients")

LINE_LIMIT = 64 * 1024 * 1024  # an assignment of 100,000 partitions is about 5 MB of JSON


def partitions(items: Iterable[list[Any]]) -> list[clients.TopicPartition]:
    """The topic-partitions of a message's `[topic, partition, ...]` items."""
    return [clients.TopicPartition(t, p) for t, p, *_ in items]


def _apply(consumer: clients.Consumer, message: dict[str, Any], at: dict[Any, int]) -> None:
    """Carry out one message from the parent; `at` keeps where each partition was last set to be read from
    (a partition the watcher woke is paused, and is sought again when it is resumed)."""
    if "assign" in message:
        at.clear()
        at.update({clients.TopicPartition(t, p): offset for t, p, offset in message["assign"]})
        consumer.assign(list(at))
        for tp, offset in at.items():
            consumer.seek(tp, offset)
        if message.get("paused"):
            consumer.pause(*partitions(message["paused"]))
    if "add" in message:
        # A new assignment (aiokafka has no other way to add partitions): the kept ones are sought back
        # to where they were, the paused ones paused again.
        paused = consumer.paused()
        at.update({clients.TopicPartition(t, p): offset for t, p, offset in message["add"]})
        consumer.assign(list(at))
        for tp, offset in at.items():
            consumer.seek(tp, offset)
        if paused:
            consumer.pause(*paused)
    for t, p, offset in message.get("seek", []):
        at[clients.TopicPartition(t, p)] = offset
        consumer.seek(clients.TopicPartition(t, p), offset)
    if "resume" in message:
        for t, p, offset in message["resume"]:
            at[clients.TopicPartition(t, p)] = offset
            consumer.seek(clients.TopicPartition(t, p), offset)
        consumer.resume(*partitions(message["resume"]))


def _say(message: dict[str, Any]) -> None:
    out = sys.stdout.buffer
    out.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
    out.flush()


async def _topics(bootstrap_servers: str, pattern: re.Pattern[str], interval: float) -> None:
    """Name the topics matching `pattern` (with their partition counts) now, and again whenever they change."""
    client = await clients.metadata_client(bootstrap_servers)  # its own connections: the consumer's long-polls
    seen: dict[str, int] | None = None
    try:
        while True:
            try:
                cluster = await client.fetch_all_metadata()
            except Exception as exc:  # a broker away: the next look tries again; what was said stays
                logging.getLogger(__name__).debug("could not read the cluster's topics: %s", exc)
            else:
                topics = {}
                for topic in cluster.topics():
                    if pattern.match(topic):
                        parts = cluster.partitions_for_topic(topic)
                        if parts:
                            topics[topic] = max(parts) + 1
                if topics != seen:
                    seen = topics
                    _say({"topics": topics})
            await asyncio.sleep(interval)
    finally:
        await client.close()


async def watch(bootstrap_servers: str, wait_ms: int, pattern: str | None = None, interval: float = 1.0) -> None:
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader(limit=LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    consumer = clients.fold_consumer(bootstrap_servers, wait_ms)
    await consumer.start()
    stopped = asyncio.Event()
    assigned = asyncio.Event()
    at: dict[Any, int] = {}

    async def commands() -> None:
        while line := await stdin.readline():
            _apply(consumer, json.loads(line), at)
            assigned.set()
        stopped.set()

    reader = asyncio.create_task(commands())
    _say({"ready": True})
    looks = None if pattern is None else asyncio.create_task(_topics(bootstrap_servers, re.compile(pattern), interval))
    try:
        while not stopped.is_set():
            if not consumer.assignment():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(assigned.wait(), 1.0)
                assigned.clear()
                continue
            woke = list(await consumer.getmany(timeout_ms=wait_ms, max_records=1))  # paused ones are left out
            if woke:
                consumer.pause(*woke)
                _say({"woke": [list(tp) for tp in woke]})
    finally:
        tasks = [t for t in (reader, looks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await consumer.stop()


def main(argv: list[str]) -> None:
    # Ctrl-C reaches the whole process group: the folding process stops, then closes our stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    with contextlib.suppress(BrokenPipeError):
        pattern = argv[2] if len(argv) > 2 else None
        asyncio.run(watch(argv[0], int(argv[1]), pattern, float(argv[3]) if len(argv) > 3 else 1.0))


if __name__ == "__main__":
    main(sys.argv[1:])

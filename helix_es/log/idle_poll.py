"""The idle partitions' long poll: a projector's child process that only says which partitions woke
(why, and the JSON lines it reads and writes: `projectors.cold`).

The parent runs this file by its path (`python -P`: its directory stays off `sys.path`), not as a
module of helix_es: it loads its sibling `kafka_clients` (the standard library and aiokafka only) from
its file, without the helix_es package, whose import would add most of a second to every projector's start.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import signal
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any


def _sibling(name: str) -> ModuleType:
    """The module `name` of this file's directory, loaded from its file alone."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING or __package__:
    from helix_es.log import kafka_clients as clients
else:  # run by its path, as the parent does
    clients = _sibling("kafka_clients")

LINE_LIMIT = 64 * 1024 * 1024  # an assignment of 100,000 partitions is about 5 MB of JSON


def partitions(items: Iterable[list[Any]]) -> list[clients.TopicPartition]:
    """The topic-partitions of a message's `[topic, partition, ...]` items."""
    return [clients.TopicPartition(t, p) for t, p, *_ in items]


def _apply(consumer: clients.Consumer, message: dict[str, Any]) -> None:
    if "assign" in message:
        at = message["assign"]
        consumer.assign(partitions(at))
        for t, p, offset in at:
            consumer.seek(clients.TopicPartition(t, p), offset)
        if message.get("paused"):
            consumer.pause(*partitions(message["paused"]))
    for t, p, offset in message.get("seek", []):
        consumer.seek(clients.TopicPartition(t, p), offset)
    if "resume" in message:
        for t, p, offset in message["resume"]:
            consumer.seek(clients.TopicPartition(t, p), offset)
        consumer.resume(*partitions(message["resume"]))


async def watch(bootstrap_servers: str, wait_ms: int) -> None:
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader(limit=LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    consumer = clients.fold_consumer(bootstrap_servers, wait_ms)
    await consumer.start()
    out = sys.stdout.buffer
    stopped = asyncio.Event()
    assigned = asyncio.Event()

    async def commands() -> None:
        while line := await stdin.readline():
            _apply(consumer, json.loads(line))
            assigned.set()
        stopped.set()

    reader = asyncio.create_task(commands())
    out.write(b'{"ready":true}\n')
    out.flush()
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
                out.write(json.dumps({"woke": [list(tp) for tp in woke]}, separators=(",", ":")).encode() + b"\n")
                out.flush()
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        await consumer.stop()


def main(argv: list[str]) -> None:
    # Ctrl-C reaches the whole process group: the folding process stops, then closes our stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    with contextlib.suppress(BrokenPipeError):
        asyncio.run(watch(argv[0], int(argv[1])))


if __name__ == "__main__":
    main(sys.argv[1:])

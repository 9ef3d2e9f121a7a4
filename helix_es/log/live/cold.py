"""The idle partitions' long poll, in a process of its own: it says which partitions woke, and which
namespace topics there are.

aiokafka decodes every fetch answer in Python, one entry per partition asked for, data or not:
tens of milliseconds per thousand partitions. In the folding process, even on a thread of its
own, that decode held the interpreter lock while busy partitions waited for it: add-to-visible
p99 137 ms with 6,000 idle partitions and nothing else changing, beside 51 ms with the lock
handed over ten times as often. So a child process (`idle_poll.py` beside this file) holds the idle
partitions and long-polls them; when some have records it pauses them and names them, and the
folding process fetches them with its busy partitions' consumer from its own positions. What
the child fetched is never decoded into events. The child also reads the cluster's metadata every
`interval` seconds and names the topics matching the view's pattern when they change: decoding the
metadata of thousands of partitions each second (about 7 ms per 600) in the folding process held
up every busy partition, once a second, while namespaces appeared, and left garbage for its collector.

The two talk in JSON lines. To the child, on its stdin: `{"assign": [[topic, partition, offset],
...], "paused": [[topic, partition], ...]}` (the whole assignment), `{"add": [[t, p, offset], ...]}`
(more partitions, the others kept as they are), `{"resume": [[t, p, offset], ...]}`,
`{"seek": [[t, p, offset], ...]}`. From it, on its stdout: `{"ready": true}` once its
consumer started, then `{"woke": [[t, p], ...]}` and (given a pattern) `{"topics": {topic: partitions, ...}}`, first at
once and then whenever the matching topics change. The end of its stdin (the folding process
stopped, or died) stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Callable, Iterable, Mapping

from helix_es.log.live import idle_poll
from helix_es.log.live.idle_poll import LINE_LIMIT
from helix_es.log.port import Partition

STOP_SECONDS = 10.0  # how long a stop waits for the child to leave before it is killed


class ColdWatch:
    """The folding process's side: sends the idle partitions' assignment, collects the woken ones."""

    def __init__(self, bootstrap_servers: str, wait_ms: int, pattern: str | None = None, interval: float = 1.0) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.wait_ms = wait_ms
        self.pattern = pattern  # of the topics to name (None: none)
        self.interval = interval  # seconds between the child's looks at the cluster's topics
        self.topics: dict[str, int] | None = None  # the matching topics the child named last
        self.on_topics: Callable[[dict[str, int]], None] | None = None
        self.woken: set[Partition] = set()
        self._woke = asyncio.Event()
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._gone: str | None = None  # why the child is not there any more

    async def start(self) -> None:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-P",
            idle_poll.__file__,  # by its path: the child imports no helix_es (see there)
            self.bootstrap_servers,
            str(self.wait_ms),
            *([] if self.pattern is None else [self.pattern, str(self.interval)]),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=LINE_LIMIT,
        )
        assert self._proc.stdout is not None
        first = await self._proc.stdout.readline()
        if json.loads(first or b"{}").get("ready") is not True:
            code = await self._proc.wait()
            raise ChildProcessError(f"the idle partitions' watcher did not start (exit code {code}); see its log above")
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        while line := await self._proc.stdout.readline():
            message = json.loads(line)
            if "topics" in message:
                self.topics = message["topics"]
                if self.on_topics is not None:
                    self.on_topics(message["topics"])
                continue
            self.woken.update(Partition(t, p) for t, p in message["woke"])
            self._woke.set()
        self._gone = f"exited with code {await self._proc.wait()}"
        self._woke.set()

    def _check(self) -> None:
        if self._gone is not None:
            # An OSError: a projector's supervision waits it out, and starts the projector again with a new watcher.
            raise ChildProcessError(f"the idle partitions' watcher {self._gone}; see its log above")

    async def _send(self, message: Mapping[str, object]) -> None:
        self._check()
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        await self._proc.stdin.drain()

    async def assign(self, at: Mapping[Partition, int], paused: Iterable[Partition]) -> None:
        """Watch exactly `at` (each from its offset), `paused` ones not yet."""
        assign = [[tp.topic, tp.partition, o] for tp, o in sorted(at.items())]
        await self._send({"assign": assign, "paused": [list(tp) for tp in paused]})

    async def add(self, at: Mapping[Partition, int]) -> None:
        """Watch `at` too (each from its offset); the others stay as they are, paused or not."""
        await self._send({"add": [[tp.topic, tp.partition, o] for tp, o in sorted(at.items())]})

    async def resume(self, at: Mapping[Partition, int]) -> None:
        await self._send({"resume": [[tp.topic, tp.partition, o] for tp, o in at.items()]})

    async def seek(self, tp: Partition, offset: int) -> None:
        await self._send({"seek": [[tp.topic, tp.partition, offset]]})

    async def wait(self, timeout: float) -> None:
        """Until some partition woke, or `timeout` seconds."""
        if not self.woken:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woke.wait(), timeout)
        self._check()

    def take(self) -> set[Partition]:
        """The partitions that woke since the last take (the child paused them)."""
        woken, self.woken = self.woken, set()
        self._woke.clear()
        return woken

    async def stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), STOP_SECONDS)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

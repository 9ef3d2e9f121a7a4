"""The log side of a LangGraph checkpointer, framework-free: append its events, read its view with read-your-writes.

The checkpoint view is a view like any other (`checkpoints:` is a memory of type
`langgraph-checkpoints`), attached to the process's backend for its log: with the embedded log
each append is folded into it before it returns, and it is caught up from the log when it is
attached; with Kafka a projector service folds the topic (`helix-es project`). Reads follow the
view's alias (a rebuild's target) and wait until it has applied this saver's last write to the
thread (or, for reads across threads, every write).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from helix_es.client.backend import Backend
from helix_es.client.checkpoint_seal import OpenedReads, Sealer, seal_payload
from helix_es.client.runtime import Runtime, default_runtime
from helix_es.client.wait import Behind, Written
from helix_es.config import Config
from helix_es.model.events import CheckpointSaved, Event, Payload, WritesSaved
from helix_es.projection.protocol import Projection
from helix_es.stores.ports import CheckpointStore
from helix_es.views.checkpoints import Checkpoints


class CheckpointLog:
    """One checkpoint namespace on one log, and the view it is read from. `open` first, `close` last.

    Its backend and keys are `runtime`'s; by default those of the loop it is opened on."""

    def __init__(self, config: Config, sealer: Sealer | None = None, runtime: Runtime | None = None) -> None:
        assert isinstance(config.memory.view, Checkpoints)
        self.config = config
        self.encryption = config.memory.view.encryption
        self.sealer = sealer  # seals every value before it is written, opens it on read
        self.namespace = config.memory.namespace
        self.written = Written(
            self.namespace, consistency=config.memory.consistency, read_timeout=config.memory.read_timeout
        )
        self.runtime = runtime
        self._backend: Backend | None = None
        self._view: Projection | None = None

    @property
    def store(self) -> CheckpointStore:
        """The store of the target readers use now."""
        assert self._view is not None, "open() first"
        return cast(CheckpointStore, cast(Any, self._view).store)  # through the alias, the current target's

    @property
    def reads(self) -> CheckpointStore | OpenedReads:
        """The view's reads, values opened where they are sealed."""
        return self.store if self.sealer is None else OpenedReads(self.store, self.sealer)

    async def open(self) -> None:
        runtime = self.runtime = self.runtime or default_runtime()
        backend = await runtime.acquire(self.config.log)
        try:
            self._view = await backend.attach(self.config.memory, self.namespace)
        except BaseException:
            await runtime.release(self.config.log, backend)
            raise
        self._backend = backend
        if self.encryption and self.sealer is None:
            self.sealer = Sealer(runtime.keys())  # its key store's pool lives on this loop

    async def append(self, thread_id: str, payloads: Sequence[Payload]) -> None:
        """Append one event per payload to the thread, in order."""
        assert self._backend is not None, "open() first"
        if self.sealer is not None:
            await self.sealer.prepare(self.namespace, thread_id, write=True)
            sealer = self.sealer
            payloads = [
                seal_payload(sealer, self.namespace, thread_id, p)
                if isinstance(p, (CheckpointSaved, WritesSaved))
                else p
                for p in payloads
            ]
        for payload in payloads:
            self.written.wrote(await self._backend.append(Event(self.namespace, thread_id, payload)), thread_id)

    async def caught_up(self, thread_id: str | None) -> None:
        """Wait until the view has applied this saver's writes to `thread_id` (None: to every thread)."""
        assert self._backend is not None and self._view is not None, "open() first"
        await self.written.caught_up(self._backend, cast(Behind, self._view), scope=thread_id)

    async def close(self) -> None:
        backend, self._backend, self._view = self._backend, None, None
        if backend is not None and self.runtime is not None:
            await self.runtime.release(self.config.log, backend)

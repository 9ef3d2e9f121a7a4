"""LangGraph on the log: `HelixSaver`, a checkpointer whose checkpoints and pending writes are events,
and `HelixStore` (`helix_es.integrations.langgraph_store`), a store whose puts and deletes are.

```python
async with HelixSaver.from_config({"checkpoints": {"store": "memory"}}) as saver:
    graph = builder.compile(checkpointer=saver)
```

Every put is a `CheckpointSaved` event, every put_writes a `WritesSaved`, every deletion a
`CheckpointsDeleted` on the `checkpoints:` namespace's topic, with the thread id as the session
id. A checkpoint view (`helix_es.views.checkpoints`) folds them; reads wait for it to apply
this saver's writes (read-your-writes). Values are serialized by the saver's serde before they
reach the log, so no projector ever needs it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from helix_es.config import Config, load_section
from helix_es.framework_stores.checkpoints import CheckpointLog
from helix_es.integrations.langgraph_store import HelixStore
from helix_es.integrations.langgraph_ttl import Sweeper, ThreadTTL, check_thread_ttl, expired, thread_forgotten
from helix_es.model import names
from helix_es.model.errors import InvalidInput
from helix_es.model.events import (
    ChannelBlob,
    CheckpointSaved,
    CheckpointsDeleted,
    Payload,
    PendingWrite,
    Serialized,
    WritesSaved,
)
from helix_es.sync import run as run_sync
from helix_es.sync.loop import from_sync, on_loop
from helix_es.views.checkpoints import EMPTY, Saved

T = TypeVar("T")
_ON_OWN_LOOP = (
    "a sync HelixSaver method was called on the event loop the saver was opened on; "
    "use the async method (await saver.aget_tuple(...), graph.ainvoke) there"
)
DELTA_COUNTERS = "counters_since_delta_snapshot"  # a checkpoint's metadata: DeltaChannels not snapshotted since
LISTED = 2000  # checkpoints or blobs one deletion event lists: well inside the log's event limit

__all__ = ["HelixSaver", "HelixStore"]


def _thread(config: RunnableConfig, field: str = "config.configurable.thread_id") -> str:
    return names.check_session_id(config.get("configurable", {}).get("thread_id"), field)


def _ns(config: RunnableConfig) -> str:
    return str(config.get("configurable", {}).get("checkpoint_ns", ""))


def _version(version: object) -> str:
    return json.dumps(version)


def _refers_to(checkpoint: Checkpoint) -> list[tuple[str, str]]:
    """The (channel, version) blobs a checkpoint refers to: its channel versions."""
    return [(ch, _version(v)) for ch, v in checkpoint["channel_versions"].items()]


class HelixSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer on the helix-es log. Open it with `from_config` (`async with` or `with`)."""

    def __init__(
        self, log: CheckpointLog, *, serde: SerializerProtocol | None = None, ttl: ThreadTTL | None = None
    ) -> None:
        super().__init__(serde=serde)
        self._log = log
        self.ttl_config = check_thread_ttl(ttl)
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop its connections live on
        self._sweeper = Sweeper(self.asweep_ttl, f"checkpoints of {log.namespace}")

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any] | str | os.PathLike[str],
        *,
        serde: SerializerProtocol | None = None,
        ttl: ThreadTTL | None = None,
    ) -> _Opening:
        """A context manager (`async with` or `with`) yielding an open saver for the config's
        `checkpoints:` mapping (`store`, `dsn` or `redis_url`, `namespace`) and optional `log:`.
        `ttl` (`default_ttl` minutes, `sweep_interval_minutes`) forgets threads left that long."""
        return _Opening(cls, load_section(config, "checkpoints"), serde, check_thread_ttl(ttl))

    # -- the loop the saver lives on ------------------------------------------------------------

    async def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None, "open the saver with HelixSaver.from_config"
        return await on_loop(self._loop, coro)

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None, "open the saver with HelixSaver.from_config"
        return from_sync(self._loop, coro, _ON_OWN_LOOP)

    # -- reads ----------------------------------------------------------------------------------

    async def _tuple(self, saved: Saved, config: RunnableConfig | None = None) -> CheckpointTuple:
        store, namespace, loads = self._log.reads, self._log.namespace, self.serde.loads_typed
        tid, cns, cid = saved.thread_id, saved.checkpoint_ns, saved.checkpoint_id
        checkpoint: Checkpoint = loads((saved.checkpoint.type, saved.checkpoint.data))
        blobs = await store.blobs(namespace, tid, cns, _refers_to(checkpoint))
        writes = await store.writes(namespace, tid, cns, cid)
        writes.sort(key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx))
        return CheckpointTuple(
            config=config or {"configurable": {"thread_id": tid, "checkpoint_ns": cns, "checkpoint_id": cid}},
            checkpoint={**checkpoint, "channel_values": {ch: loads((b.type, b.data)) for ch, b in blobs.items()}},
            metadata=loads((saved.metadata.type, saved.metadata.data)),
            parent_config=(
                {"configurable": {"thread_id": tid, "checkpoint_ns": cns, "checkpoint_id": saved.parent_checkpoint_id}}
                if saved.parent_checkpoint_id
                else None
            ),
            pending_writes=[(w.task_id, w.channel, loads((w.value.type, w.value.data))) for w in writes],
        )

    async def _get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id = _thread(config)
        await self._log.caught_up(thread_id)
        checkpoint_id = get_checkpoint_id(config)
        saved = await self._log.reads.get(self._log.namespace, thread_id, _ns(config), checkpoint_id)
        if saved is None:
            return None
        return await self._tuple(saved, config if checkpoint_id else None)

    async def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> list[CheckpointTuple]:
        thread_id = _thread(config) if config else None
        await self._log.caught_up(thread_id)
        cns = config.get("configurable", {}).get("checkpoint_ns") if config else None
        only = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        pushed = limit if not filter and not only else None  # the store can stop early
        rows = await self._log.reads.listing(self._log.namespace, thread_id, cns, before_id, pushed)
        found: list[CheckpointTuple] = []
        for saved in rows:
            if limit is not None and len(found) >= limit:
                break
            if only and saved.checkpoint_id != only:
                continue
            if filter:
                metadata = self.serde.loads_typed((saved.metadata.type, saved.metadata.data))
                if not all(metadata.get(k) == v for k, v in filter.items()):
                    continue
            found.append(await self._tuple(saved))
        return found

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._call(self._get_tuple(config))

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._sync(self._get_tuple(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for item in await self._call(self._list(config, filter, before, limit)):
            yield item

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        yield from self._sync(self._list(config, filter, before, limit))

    # -- writes ---------------------------------------------------------------------------------

    def _saved(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> CheckpointSaved:
        dumps = self.serde.dumps_typed
        c = dict(checkpoint)
        values: dict[str, Any] = c.pop("channel_values", {})  # type: ignore[assignment]
        blobs = tuple(
            ChannelBlob(ch, _version(v), Serialized(*dumps(values[ch])) if ch in values else Serialized(EMPTY, b""))
            for ch, v in new_versions.items()
        )
        full = get_checkpoint_metadata(config, metadata)
        run_id = full.get("run_id")
        return CheckpointSaved(
            checkpoint_ns=_ns(config),
            checkpoint_id=checkpoint["id"],
            parent_checkpoint_id=config.get("configurable", {}).get("checkpoint_id"),
            checkpoint=Serialized(*dumps(c)),
            metadata=Serialized(*dumps(full)),
            run_id=None if run_id is None else str(run_id),
            blobs=blobs,
        )

    async def _put(self, config: RunnableConfig, payload: CheckpointSaved) -> RunnableConfig:
        thread_id = _thread(config)
        await self._log.append(thread_id, [payload])
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": payload.checkpoint_ns,
                "checkpoint_id": payload.checkpoint_id,
            }
        }

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._call(self._put(config, self._saved(config, checkpoint, metadata, new_versions)))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._sync(self._put(config, self._saved(config, checkpoint, metadata, new_versions)))

    def _writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> tuple[str, WritesSaved]:
        checkpoint_id = config.get("configurable", {}).get("checkpoint_id")
        if not isinstance(checkpoint_id, str):
            raise InvalidInput("config.configurable.checkpoint_id", f"must be a string, got {checkpoint_id!r}")
        dumps = self.serde.dumps_typed
        rows = tuple(
            PendingWrite(WRITES_IDX_MAP.get(ch, idx), ch, Serialized(*dumps(v))) for idx, (ch, v) in enumerate(writes)
        )
        return _thread(config), WritesSaved(_ns(config), checkpoint_id, task_id, task_path, rows)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        thread_id, payload = self._writes(config, writes, task_id, task_path)
        await self._call(self._log.append(thread_id, [payload]))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        thread_id, payload = self._writes(config, writes, task_id, task_path)
        self._sync(self._log.append(thread_id, [payload]))

    # -- deletions and copies -------------------------------------------------------------------

    async def adelete_thread(self, thread_id: str) -> None:
        await self._call(self._log.append(str(thread_id), [CheckpointsDeleted("thread")]))

    def delete_thread(self, thread_id: str) -> None:
        self._sync(self._log.append(str(thread_id), [CheckpointsDeleted("thread")]))

    async def _delete_for_runs(self, run_ids: Sequence[str]) -> None:
        runs = tuple(str(r) for r in run_ids)
        if not runs:
            return
        await self._log.caught_up(None)
        for thread_id in await self._log.reads.runs(self._log.namespace, runs):
            rows = await self._rows(thread_id)
            doomed = {(s.checkpoint_ns, s.checkpoint_id) for s in rows if s.run_id in runs}
            blobs = _unreferenced(self._versions(rows), doomed)
            await self._log.append(thread_id, _deletions(CheckpointsDeleted("runs", runs), blobs))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._call(self._delete_for_runs(run_ids))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._sync(self._delete_for_runs(run_ids))

    async def _copy_thread(self, source: str, target: str) -> None:
        await self._log.caught_up(source)
        store, namespace = self._log.reads, self._log.namespace
        rows = await store.listing(namespace, source, None, None, None)
        events: list[Payload] = []
        for saved in sorted(rows, key=lambda s: (s.checkpoint_ns, s.checkpoint_id)):  # parents first
            checkpoint = self.serde.loads_typed((saved.checkpoint.type, saved.checkpoint.data))
            versions = _refers_to(checkpoint)
            blobs = await store.blobs(namespace, source, saved.checkpoint_ns, versions)
            events.append(
                CheckpointSaved(
                    saved.checkpoint_ns,
                    saved.checkpoint_id,
                    saved.parent_checkpoint_id,
                    saved.checkpoint,
                    saved.metadata,
                    saved.run_id,
                    tuple(ChannelBlob(ch, v, blobs[ch]) for ch, v in versions if ch in blobs),
                )
            )
            by_task: dict[tuple[str, str], list[PendingWrite]] = {}
            for w in await store.writes(namespace, source, saved.checkpoint_ns, saved.checkpoint_id):
                by_task.setdefault((w.task_id, w.task_path), []).append(PendingWrite(w.idx, w.channel, w.value))
            for (task_id, task_path), writes in by_task.items():
                events.append(WritesSaved(saved.checkpoint_ns, saved.checkpoint_id, task_id, task_path, tuple(writes)))
        await self._log.append(target, events)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._call(self._copy_thread(str(source_thread_id), str(target_thread_id)))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._sync(self._copy_thread(str(source_thread_id), str(target_thread_id)))

    async def _prune(self, thread_ids: Sequence[str], strategy: str) -> None:
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInput("strategy", f"must be keep_latest or delete, got {strategy!r}")
        for thread_id in map(str, thread_ids):
            if strategy == "delete":
                await self._log.append(thread_id, [CheckpointsDeleted("thread")])
                continue
            rows = await self._rows(thread_id)
            versions = self._versions(rows)
            latest: dict[str, Saved] = {}
            for saved in rows:  # newest first
                latest.setdefault(saved.checkpoint_ns, saved)
            kept: set[tuple[str, str]] = set()
            for saved in latest.values():
                kept |= await self._chain(thread_id, saved, rows, versions)
            doomed = set(versions) - kept
            if doomed:
                first = CheckpointsDeleted("checkpoints", checkpoints=tuple(sorted(doomed)))
                await self._log.append(thread_id, _deletions(first, _unreferenced(versions, doomed)))

    async def _rows(self, thread_id: str) -> Sequence[Saved]:
        """The thread's checkpoints, newest first, once the view holds this saver's writes."""
        await self._log.caught_up(thread_id)
        return await self._log.reads.listing(self._log.namespace, thread_id, None, None, None)

    def _versions(self, rows: Sequence[Saved]) -> dict[tuple[str, str], dict[str, str]]:
        """Each checkpoint's channel versions (the blobs it refers to), by (checkpoint_ns, checkpoint_id)."""
        loads = self.serde.loads_typed
        return {
            (s.checkpoint_ns, s.checkpoint_id): dict(_refers_to(loads((s.checkpoint.type, s.checkpoint.data))))
            for s in rows
        }

    async def _chain(
        self, thread_id: str, latest: Saved, rows: Sequence[Saved], versions: dict[tuple[str, str], dict[str, str]]
    ) -> set[tuple[str, str]]:
        """`latest` and the ancestors it rebuilds its DeltaChannels from: LangGraph walks the parent
        chain, gathering writes, back to one that holds a value of the channel (a snapshot)."""
        cns = latest.checkpoint_ns
        kept = {(cns, latest.checkpoint_id)}
        metadata = self.serde.loads_typed((latest.metadata.type, latest.metadata.data))
        rebuilt = set(metadata.get(DELTA_COUNTERS) or ())  # DeltaChannels updated since their snapshot
        by_id = {s.checkpoint_id: s for s in rows if s.checkpoint_ns == cns}
        parent = by_id.get(latest.parent_checkpoint_id or "")
        while rebuilt and parent is not None:
            kept.add((cns, parent.checkpoint_id))
            has = versions[(cns, parent.checkpoint_id)]
            wanted = [(ch, has[ch]) for ch in rebuilt if ch in has]
            rebuilt -= set(await self._log.reads.blobs(self._log.namespace, thread_id, cns, wanted))
            parent = by_id.get(parent.parent_checkpoint_id or "")
        return kept

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._call(self._prune(thread_ids, strategy))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._sync(self._prune(thread_ids, strategy))

    # -- TTL: threads left `default_ttl` minutes are forgotten, on the log ---------------------------

    async def asweep_ttl(self, now: datetime | None = None) -> int:
        """Forget every thread whose newest checkpoint is `default_ttl` minutes old: recorded as
        `MemoryForgotten` (policy `ttl`) in the thread, so audit says why it left and a rebuild forgets
        the same. A thread that saves again before the event lands keeps it all. The threads swept."""
        minutes = self.ttl_config.get("default_ttl")
        if minutes is None:
            raise InvalidInput("ttl.default_ttl", "no TTL to sweep by: open the saver with ttl={'default_ttl': N}")
        now = now or datetime.now(UTC)
        await self._log.caught_up(None)
        swept = 0
        for newest in await self._log.reads.latest(self._log.namespace):
            checkpoint = self.serde.loads_typed((newest.checkpoint.type, newest.checkpoint.data))
            if expired(checkpoint["ts"], minutes, now):
                await self._log.append(newest.thread_id, [thread_forgotten(newest, minutes)])
                swept += 1
        return swept

    def sweep_ttl(self, now: datetime | None = None) -> int:
        return self._sync(self.asweep_ttl(now))

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> asyncio.Task[None]:
        """Sweep every `sweep_interval_minutes` (default: the TTL's, else 5) until `stop_ttl_sweeper`
        or the saver closes."""
        assert self._loop is not None, "open the saver with HelixSaver.from_config"
        return self._sweeper.start(self._loop, sweep_interval_minutes or self.ttl_config.get("sweep_interval_minutes"))

    async def stop_ttl_sweeper(self) -> bool:
        """Stop the background sweeper; whether one was running."""
        return await self._sweeper.stop()

    def get_next_version(self, current: str | None, channel: None) -> str:
        """As `InMemorySaver`: a zero-padded counter and a random tail, ordered as strings."""
        current_v = 0 if current is None else int(str(current).split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"


class _Opening:
    """What `HelixSaver.from_config` returns: `async with` opens the saver on the running loop, `with`
    on helix-es's own loop (`helix_es.sync`, where sync memories and stores of the same log live too)."""

    def __init__(self, cls: type[HelixSaver], config: Config, serde: SerializerProtocol | None, ttl: ThreadTTL) -> None:
        self._saver = cls(CheckpointLog(config), serde=serde, ttl=ttl)

    async def __aenter__(self) -> HelixSaver:
        saver = self._saver
        saver._loop = asyncio.get_running_loop()
        await saver._log.open()
        if saver.ttl_config.get("sweep_interval_minutes"):
            saver.start_ttl_sweeper()
        return saver

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._saver.stop_ttl_sweeper()
        await self._saver._log.close()

    def __enter__(self) -> HelixSaver:
        return run_sync(self.__aenter__())

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        run_sync(self.__aexit__(kind, exc, tb))


def _unreferenced(
    versions: dict[tuple[str, str], dict[str, str]], doomed: set[tuple[str, str]]
) -> Sequence[tuple[str, str, str]]:
    """The blobs that only checkpoints in `doomed` refer to."""
    held: dict[bool, set[tuple[str, str, str]]] = {True: set(), False: set()}
    for (cns, cid), channels in versions.items():
        held[(cns, cid) in doomed] |= {(cns, ch, v) for ch, v in channels.items()}
    return sorted(held[True] - held[False])


def _deletions(first: CheckpointsDeleted, blobs: Sequence[tuple[str, str, str]]) -> list[CheckpointsDeleted]:
    """`first` (its checkpoints listed `LISTED` at a time), then the blobs: each event inside the log's
    limit, the blobs after the checkpoints that referred to them."""
    out = [
        dataclasses.replace(first, checkpoints=first.checkpoints[i : i + LISTED])
        for i in range(0, max(len(first.checkpoints), 1), LISTED)
    ]
    for i in range(0, len(blobs), LISTED):
        chunk = tuple(blobs[i : i + LISTED])
        if i == 0:
            out[-1] = dataclasses.replace(out[-1], blobs=chunk)
        else:
            out.append(CheckpointsDeleted("checkpoints", blobs=chunk))
    return out

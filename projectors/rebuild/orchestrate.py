"""The rebuild itself: build a target from the log, switch readers to it, hand over to a projector service, drop.

The steps are in the package's doc (`projectors.rebuild`). Views kept in memory (memory and file
stores) are rebuilt in the process that serves them (`_rebuild_in_process`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from helix_es.client.runtime import Runtime, default_runtime
from helix_es.config import LogConfig, MemoryConfig
from helix_es.log.replay import DEFAULT_BATCH, Source
from helix_es.model import names
from helix_es.model.errors import ConfigError
from helix_es.model.names import alias_id, check_target, next_target
from helix_es.projection import aliases as alias_names
from helix_es.projection.aliases import drop_target_data, resolve_alias, target_projection, target_store
from helix_es.projection.factory import open_aliases, open_idempotency, open_store
from helix_es.projection.protocol import Projection
from helix_es.stores import registry
from helix_es.stores.ports import AliasStore, IdempotencyStore, ViewStore
from helix_es.views.base import View
from projectors.rebuild.bulk import build_indexes, start_load
from projectors.rebuild.extract import check_re_extract, folded
from projectors.rebuild.extract import re_extract as re_extract_turns
from projectors.rebuild.group import check_group_log, lead
from projectors.rebuild.progress import Display
from projectors.rebuild.pump import always, drain, open_source
from projectors.rebuild.selection import ConfigSource, select
from projectors.rebuild.sinks import ProjectionSink, SessionSink, Sink
from projectors.rebuild.status import DropReport, ProgressCallback, RebuildError, RebuildReport, Status
from projectors.rebuild.workers import Shard, plan_shards, run_workers, worker_count

log = logging.getLogger(__name__)

HANDOVER_SECONDS = 30.0
HANDOVER_GRACE = 2.0  # folding on after a service announced the target: it joins its group meanwhile


async def rebuild(
    config: ConfigSource,
    *,
    view: str | None = None,
    store_kind: str | None = None,
    into: str | None = None,
    switch: bool = True,
    drop_old: bool = False,
    batch_size: int = DEFAULT_BATCH,
    handover: float = HANDOVER_SECONDS,
    on_progress: ProgressCallback | None = None,
    workers: int | None = None,
    group: bool = False,
    members: int = 1,
    runtime: Runtime | None = None,
    re_extract: bool = False,
    dry_run: bool = False,
    extract_progress: Callable[[int, int], None] | None = None,
) -> RebuildReport:
    """Build `view` of `config` from the start of the log into a new target, then switch readers to it.

    The config names the store to build in (a Postgres long-term memory for history that only
    went to Redis: give a config with `store: postgres`). The steps are in `projectors.rebuild`'s doc.
    With `group`, the partitions are shared through the target's Kafka consumer group with the
    members that join it (`projectors.rebuild.group`), on this machine or others. `store_kind`
    picks `view` in that store kind where views of one name live in several (`projectors.rebuild.views`).
    A view in this process is rebuilt on `runtime`'s backend, the one its memories read (by default the
    running loop's).
    """
    log_config, part = select(config, view, store=store_kind)
    if re_extract:
        check_re_extract(part)
    if dry_run and not re_extract:
        raise ConfigError("--dry-run", "prints what --re-extract would cost: add --re-extract")
    if members < 1:
        raise ConfigError("--members", f"must be >= 1 (this process included), got {members}")
    if members > 1 and not group:
        raise ConfigError("--members", "waits for members of a --group rebuild: add --group")
    if group:
        check_group_log(log_config, "--group")
        if workers is not None and workers > 1:
            raise ConfigError(
                "--workers", "shares partitions without a group; with --group start members with --join instead"
            )
    if drop_old and not switch:
        raise ConfigError("--drop-old", "needs --switch: without it the old target is the one readers use")
    if batch_size < 1:
        raise ConfigError("--batch-size", f"must be >= 1, got {batch_size}")
    if registry.kind(part.store).in_process:
        runtime = runtime or default_runtime()
        return await _rebuild_in_process(runtime, log_config, part, into=into, switch=switch, drop_old=drop_old)
    name = part.view.name
    apart = log_config.kind.projected_apart  # projector services fold it: they serve the alias and take over
    alias = alias_id(name, log_config.topic_prefix)
    aliases = open_aliases(part)
    store = open_store(part) if isinstance(part.view, View) else None
    projection: Projection | None = None
    source: Source | None = None
    keys: IdempotencyStore | None = None
    try:
        old = await resolve_alias(aliases, alias, name)
        target = check_target(into) if into else next_target(name, sorted({*await aliases.targets(alias), old}))
        if target == old:
            raise RebuildError(f"{target} is the target readers use now: rebuild into another one (--into NAME)")
        await aliases.add_target(alias, target)
        projection = target_projection(part, target, store)
        await start_load(projection)
        if store is not None and isinstance(part.view, View):
            keys = open_idempotency(part)
            sink: Sink = SessionSink(part.view, target_store(store, part.view, target), target=target, keys=keys)
        else:
            sink = ProjectionSink(projection)
        status = Status(name, target, "building")
        log.info("rebuilding %s (%s) into %s; readers use %s", name, part.store, target, old)
        took_part = 0
        if group:  # the bulk, shared with the members that join the target's group
            shards: list[Shard] = []
            took_part = await lead(
                log_config, part, target, projection, sink, status, batch_size, on_progress, members=members
            )
        else:
            shards = await plan_shards(log_config, projection.checkpoint, worker_count(workers), config, part)
        if shards:  # the bulk, partitions shared out to worker processes (one core each)
            await run_workers(config, part, target, shards, batch_size, status, on_progress)
        # What is left (all of it without workers, else what arrived meanwhile), in this process.
        source = open_source(log_config, projection.checkpoint, batch_size, namespaces=part.served)
        await source.start()
        await drain(source, sink, status, always, at_end=True, on_progress=on_progress)
        extracted = None
        if re_extract:  # the new extractor over history, before anyone reads the target
            if isinstance(on_progress, Display):
                on_progress.finish()
            spaces = await source.namespaces()
            extracted = await re_extract_turns(
                part, log_config, projection, spaces, dry_run=dry_run, progress=extract_progress
            )
            if dry_run:  # nothing of it stays: the target goes, no call was made
                await drop_target(part, log_config, target, spaces)
                await aliases.forget_target(alias, target)
                report = _built(name, part, old, target, status, len(spaces))
                report.extracted = extracted.to_json()
                return report
            # What it appended, folded for sure before the switch (not left to a projector's hand-over).
            await drain(
                source, sink, status, folded(projection, extracted.appended), at_end=True, on_progress=on_progress
            )
        await build_indexes(projection)
        status.phase = "built"
        if on_progress is not None:
            on_progress(status)
        if isinstance(on_progress, Display):
            on_progress.finish()  # log lines that follow start on a line of their own
        namespaces = await source.namespaces()
        report = _built(name, part, old, target, status, len(namespaces))
        report.workers, report.members = len(shards), took_part
        report.extracted = None if extracted is None else extracted.to_json()
        if not switch:
            return report
        status.phase = "switching"
        served_before = await aliases.served(alias) if apart else set()
        found = await aliases.switch(alias, target, expect=old, base=name)
        if found is not None:
            raise RebuildError(
                f"the alias of {name} moved to {found} while this rebuild ran: {target} is built "
                "but readers were not switched to it"
            )
        switched_at = time.monotonic()
        report.switched = True
        log.info("readers of %s switched from %s to %s", name, old, target)
        if apart and handover > 0:
            if old in served_before:
                report.handed_over = await _hand_over(
                    source, sink, status, aliases, alias, target, handover, on_progress
                )
            else:
                log.warning(
                    "no projector service announces it projects %s: start `helix-es project` (it follows "
                    "the alias) so that %s takes the events written from now on",
                    old,
                    target,
                )
        report.events, report.read, report.skipped = status.events, status.read, status.skipped
        if drop_old:
            # Readers still on the old target move within a second; only then is it taken away.
            await asyncio.sleep(max(0.0, switched_at + 2 * _refresh_seconds() - time.monotonic()))
            await drop_target(part, log_config, old, namespaces)
            await aliases.forget_target(alias, old)
            report.dropped.append(old)
        return report
    finally:
        if source is not None:
            await source.close()
        if projection is not None:
            await projection.close()
        if keys is not None:
            await keys.close()
        if store is not None:
            await store.close()
        await aliases.close()


def _built(name: str, part: MemoryConfig, old: str, target: str, status: Status, namespaces: int) -> RebuildReport:
    """The report of a target built (not switched yet), from the status at the end of the build."""
    seconds, read = status.seconds, status.read
    return RebuildReport(
        name,
        part.store,
        old,
        target,
        status.events,
        read,
        status.skipped,
        round(seconds, 3),
        round(read / seconds if seconds else 0.0),
        namespaces,
        False,
        None,
    )


def _refresh_seconds() -> float:
    return alias_names.REFRESH_SECONDS


async def _hand_over(
    source: Source,
    sink: Sink,
    status: Status,
    aliases: AliasStore,
    alias: str,
    target: str,
    timeout: float,
    on_progress: ProgressCallback | None,
) -> bool:
    """Fold the new target until a projector service announces it (then `HANDOVER_GRACE` more), or `timeout`."""
    status.phase = "handover"
    deadline = time.monotonic() + timeout
    seen: list[float] = []

    async def finished() -> bool:
        if seen:
            return time.monotonic() >= seen[0] + HANDOVER_GRACE
        if target in await aliases.served(alias):
            seen.append(time.monotonic())
            return False
        return time.monotonic() >= deadline

    await drain(source, sink, status, finished, at_end=False, on_progress=on_progress)
    if not seen:
        log.warning(
            "no projector service took %s over within %.0fs: start `helix-es project`, which follows "
            "the alias, or readers of it wait for their writes",
            target,
            timeout,
        )
    return bool(seen)


# --- dropping a target ---


async def drop_target(part: MemoryConfig, log_config: LogConfig, target: str, namespaces: Sequence[str]) -> None:
    """Delete `target`'s data and checkpoints for `namespaces` (this deployment's), in `part`'s store."""
    topics = [names.topic(ns, log_config.topic_prefix) for ns in namespaces]
    await drop_target_data(part, target, namespaces, topics)


async def _namespaces(log_config: LogConfig, part: MemoryConfig) -> list[str]:
    source = open_source(log_config, _no_checkpoint, DEFAULT_BATCH, namespaces=part.served)
    try:
        return await source.namespaces()
    finally:
        await source.close()


async def _no_checkpoint(topic: str, partition: int) -> int | None:
    return None


async def drop(config: ConfigSource, target: str, *, view: str | None = None) -> DropReport:
    """Delete a target of `view` that readers do not use: its keys or rows, and its checkpoints."""
    log_config, part = select(config, view)
    check_target(target, "--drop")
    if registry.kind(part.store).in_process:
        raise ConfigError("memory.store", f"{part.store} views live in their process: nothing to drop from here")
    name = part.view.name
    alias = alias_id(name, log_config.topic_prefix)
    aliases = open_aliases(part)
    try:
        current = await resolve_alias(aliases, alias, name)
        if target == current:
            raise RebuildError(f"{target} is the target readers of {name} use: switch them to another one first")
        known = await aliases.targets(alias) | {name}
        if target not in known:
            raise RebuildError(f"{target} is not a target of {name}; its targets: {sorted(known)}")
        namespaces = await _namespaces(log_config, part)
        await drop_target(part, log_config, target, namespaces)
        await aliases.forget_target(alias, target)
        return DropReport(name, part.store, target, len(namespaces))
    finally:
        await aliases.close()


# --- views kept in memory: rebuilt in the process that serves them ---


async def _rebuild_in_process(
    runtime: Runtime, log_config: LogConfig, part: MemoryConfig, *, into: str | None, switch: bool, drop_old: bool
) -> RebuildReport:
    if not switch:
        raise ConfigError(
            "--no-switch",
            f"a {part.store} view lives in this process and only its readers could "
            "use a new target: it is rebuilt by switching to it",
        )
    started = time.monotonic()
    backend = await runtime.acquire(log_config)
    try:
        name = part.view.name
        aliases = backend.aliases(part)
        alias = alias_id(name, log_config.topic_prefix)
        old = await resolve_alias(aliases, alias, name)
        target = check_target(into) if into else next_target(name, sorted({*await aliases.targets(alias), old}))
        if target == old:
            raise RebuildError(f"{target} is the target readers use now: rebuild into another one (into=...)")
        served = names.namespace_matcher(part.served)  # the view's namespaces only, as over Kafka
        namespaces = [ns for ns in await backend.log.namespaces() if served.fullmatch(ns)]
        found = await aliases.switch(alias, target, expect=old, base=name)
        if found is not None:
            raise RebuildError(f"the alias of {name} moved to {found} meanwhile")
        read, skipped_before = 0, backend.skipped
        aliased: Any = None
        for ns in namespaces:
            projection = await backend.attach(part, ns)
            await backend.current(projection, ns)  # follows the alias: the new target, caught up from the log
            aliased = projection
            done = await projection.checkpoint(names.topic(ns, log_config.topic_prefix), 0)
            read += 0 if done is None else done + 1
        skipped = backend.skipped - skipped_before  # passed over by the catch-ups, as the projector's checker says
        events = read - skipped
        dropped = []
        if drop_old and aliased is not None:
            now = [ns for ns in await backend.log.namespaces() if served.fullmatch(ns)]
            await _drop_in_process(aliased, part, old, now, log_config.topic_prefix)
            await aliases.forget_target(alias, old)
            dropped.append(old)
        seconds = time.monotonic() - started
        return RebuildReport(
            name,
            part.store,
            old,
            target,
            events,
            read,
            skipped,
            round(seconds, 3),
            round(read / seconds if seconds else 0.0),
            len(namespaces),
            True,
            None,
            dropped,
        )
    finally:
        await runtime.release(log_config, backend)


async def _drop_in_process(
    aliased: Any, part: MemoryConfig, target: str, namespaces: Sequence[str], topic_prefix: str
) -> None:
    """Forget an in-process target: its projection, and for session views its states in the shared store."""
    await aliased.forget(target)
    store: ViewStore | None = getattr(aliased, "shared_store", None)
    if store is not None and isinstance(part.view, View):
        topics = [names.topic(ns, topic_prefix) for ns in namespaces]
        await target_store(store, part.view, target).drop(part.view, namespaces, topics)

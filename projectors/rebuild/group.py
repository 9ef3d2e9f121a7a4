"""Rebuild past one machine: a rebuild's partitions shared through a Kafka consumer group for the target.

    helix-es rebuild --config F --into T --group     # the rebuild itself: a member, and the one that decides
    helix-es rebuild --config F --into T --join      # on any machine: one more member, until the rebuild is done

The rebuild (`lead`) joins the group `names.rebuild_group(T, store, prefix)` under the client id
`LEAD`; members (`join`) under `MEMBER`. Kafka deals the partitions out and deals them again
when a member comes or goes (one that dies: after `GROUP_SESSION_MS`); each member starts a
partition at the target's checkpoint + 1, so a partition handed on is neither lost nor folded
twice (what is read again is a no-op: checkpoints, session guards).

The lead decides: caught up when the target's checkpoints of every partition (all members'
work) reach the ends (details in `lead`). It then leaves the group, and
its leaving is the signal: a member exits once no `LEAD` is in the group. When every member
has gone, the lead folds what arrived meanwhile alone from the checkpoints, and switches.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from helix_es.config import LogConfig, MemoryConfig
from helix_es.log.check import Checker
from helix_es.log.group_replay import GROUP_SESSION_MS, LOOK_SECONDS, GroupSource, GroupWatch
from helix_es.log.replay import CAUGHT_UP_LAG, DEFAULT_BATCH, Checkpoint
from helix_es.model import names
from helix_es.model.errors import ConfigError
from helix_es.model.events import Record
from helix_es.projection.aliases import resolve_alias, target_projection, target_store
from helix_es.projection.factory import open_aliases, open_idempotency, open_store
from helix_es.projection.protocol import Projection
from helix_es.stores import registry
from helix_es.stores.ports import IdempotencyStore, ViewStore
from helix_es.views.base import View
from projectors.rebuild.bulk import defer_indexes
from projectors.rebuild.pump import drain
from projectors.rebuild.selection import ConfigSource, select
from projectors.rebuild.sinks import ProjectionSink, SessionSink, Sink
from projectors.rebuild.status import ProgressCallback, RebuildError, Status

log = logging.getLogger(__name__)

LEAD = "helix-rebuild-lead"  # the client id of the process that decides caught up and switches
MEMBER = "helix-rebuild-member"
JOIN_SECONDS = 30.0  # a member waits this long for the rebuild it joins to be running
CALM_LOOKS = round(3 / LOOK_SECONDS)  # looks near the ends (3 s of them) that end the shared phase under steady writes
LEAVE_SECONDS = 2 * GROUP_SESSION_MS / 1000 + 10  # the lead waits this long for members to go


def check_group_log(log_config: LogConfig, flag: str) -> None:
    """Group mode needs Kafka: an embedded log is one process's files, with no consumer groups."""
    if not log_config.kind.groups:
        raise ConfigError(
            flag,
            f"needs a Kafka log (log.type: kafka); this config's log is {log_config.type}, "
            "which has no consumer groups: rebuild it in one process (--workers for local processes)",
        )


class SettlingSink:
    """`sink`, whose writes a rebalance can wait for, and which drops a batch of a partition gone meanwhile.

    Eager rebalancing revokes every partition of every member: before they go the writes in flight
    land (`settle`), and a batch handed out before the revocation is not written after it (its
    next owner reads it again from the checkpoint). Cached session states are forgotten too:
    another member may write those sessions next.
    """

    def __init__(self, sink: Sink, source: GroupSource) -> None:
        self.sink = sink
        self.source = source
        self.pending: set[asyncio.Future[int]] = set()
        source.before_revoke = self.settle

    def apply(self, records: Sequence[Record]) -> Awaitable[int]:
        generation = self.source.handed  # read now: the batch was handed out under it
        future = asyncio.ensure_future(self._apply(records, generation))
        self.pending.add(future)
        future.add_done_callback(self.pending.discard)
        return future

    async def _apply(self, records: Sequence[Record], generation: int) -> int:
        if generation != self.source.generation:
            return 0  # revoked since it was read
        events = await self.sink.apply(records)
        self.source.count(records)
        return events

    async def settle(self) -> None:
        if self.pending:
            await asyncio.gather(*list(self.pending), return_exceptions=True)  # the fold loop sees any error
        forget(self.sink)


def forget(sink: Sink) -> None:
    """Drop a session sink's cached states: someone else may have written its sessions since."""
    if isinstance(sink, SessionSink):
        sink.forget()


def group_source(
    log_config: LogConfig, part: MemoryConfig, target: str, checkpoint: Checkpoint, batch: int, *, client_id: str
) -> GroupSource:
    return GroupSource(
        log_config.bootstrap_servers,
        log_config.topic_prefix,
        checkpoint,
        group=names.rebuild_group(target, part.store, log_config.topic_prefix),
        client_id=client_id,
        check=Checker(log_config.topic_prefix),  # what the projector dead-letters, the rebuild skips
        batch=batch,
        namespaces=part.served,
    )


async def lead(
    log_config: LogConfig,
    part: MemoryConfig,
    target: str,
    projection: Projection,
    sink: Sink,
    status: Status,
    batch: int,
    on_progress: ProgressCallback | None,
    members: int = 1,
) -> int:
    """Fold the partitions the group gives this process until every partition's checkpoint is caught up,
    then leave the group and wait for the members to go. Returns how many processes took part.

    `status` shows the whole rebuild: `read` and `lag` from the target's checkpoints (every member's
    work), `events` and `skipped` this process's own. With `members` > 1 it first waits (at most
    `JOIN_SECONDS` x 2) until that many processes, this one included, are in the group and the
    partitions are dealt out among them, so that it does not fold all of them while members come.
    """
    source = group_source(log_config, part, target, projection.checkpoint, batch, client_id=LEAD)
    own = Status(status.view, target, "building")
    started: dict[tuple[str, int], int] = {}  # each partition's next offset when first seen
    base_read = status.read
    calm = [0]  # looks in a row that found it within CAUGHT_UP_LAG
    last = [-1]  # records covered by the checkpoints at the look before
    peak = [1]  # the most processes seen in the group at once

    async def look(ends: dict[tuple[str, int], int]) -> tuple[int, int]:
        """Records the target's checkpoints cover since the start (every member's), and the lag left."""
        covered = lag = 0
        for tp, end in ends.items():
            done = await projection.checkpoint(*tp)
            at = 0 if done is None else done + 1
            covered += at - started.setdefault(tp, at)
            lag += max(0, end - at)
        return covered, lag

    async def caught_up() -> bool:
        ends = await source.all_ends()
        covered, lag = await look(ends)
        peak[0] = max(peak[0], len(await source.members()))
        status.read, status.lag = base_read + covered, lag
        status.events, status.skipped = own.events, own.skipped
        if on_progress is not None:
            on_progress(status)
        moved, last[0] = covered != last[0], covered
        calm[0] = calm[0] + 1 if lag <= CAUGHT_UP_LAG else 0
        # Caught up: at the ends twice in a row; or near them (what is left is for the lead's last pass)
        # with nobody moving a checkpoint (a partition's tail the projector dead-letters has none), or
        # for CALM_LOOKS looks in a row (steady writes may never leave "none" to read).
        return (lag == 0 and calm[0] >= 2) or (calm[0] >= 2 and not moved) or calm[0] >= CALM_LOOKS

    settling = SettlingSink(sink, source)
    try:
        await source.start()
        await caught_up()  # the partitions' starting points, before anyone folds
        deadline = time.monotonic() + 2 * JOIN_SECONDS
        while members > 1 and not await _dealt(source, members, peak):
            if time.monotonic() >= deadline:
                log.warning(
                    "fewer than %d processes joined the rebuild of %s; folding with those there", members, target
                )
                break
            await asyncio.sleep(0.2)
        log.info("%s: folding in a group of %d after %.1fs", target, len(await source.members()), status.seconds)
        await drain(source, settling, own, caught_up, at_end=False, on_progress=None)
        status.events, status.skipped = own.events, own.skipped  # the last write landed after the last look
        ends = source.ends_seen
    finally:
        await settling.settle()
        await source.close()  # leaves the group: the members' signal to finish
    log.info("%s: shared phase done after %.1fs (lag %d); waiting for the members", target, status.seconds, status.lag)
    await _members_gone(log_config, part, target)
    covered, status.lag = await look(ends)  # members fold on until they see the lead gone: count that too
    status.read = base_read + covered
    log.info("%s: every member gone after %.1fs", target, status.seconds)
    forget(sink)
    return peak[0]


async def _dealt(source: GroupSource, members: int, peak: list[int]) -> bool:
    """`members` processes are in the group and its partitions are dealt out among them."""
    state, clients = await source.state()
    peak[0] = max(peak[0], len(clients))
    return state == "Stable" and len(clients) >= members and source.assignments > 0


async def _members_gone(log_config: LogConfig, part: MemoryConfig, target: str) -> None:
    """Wait until nobody is in the group (a member that died counts until its session times out)."""
    watch = group_watch(log_config, part, target)
    deadline = time.monotonic() + LEAVE_SECONDS
    try:
        while await watch.members():
            if time.monotonic() >= deadline:
                log.warning("rebuild members of %s still in its group after %.0fs; folding on", target, LEAVE_SECONDS)
                return
            await asyncio.sleep(0.2)
    finally:
        await watch.close()


def group_watch(log_config: LogConfig, part: MemoryConfig, target: str) -> GroupWatch:
    return GroupWatch(log_config.bootstrap_servers, names.rebuild_group(target, part.store, log_config.topic_prefix))


@dataclass
class MemberReport:
    """What a member (`--join`) did; `--join --json` prints it."""

    view: str
    store: str
    target: str
    read: int  # records this member read and kept (not counting batches of partitions revoked meanwhile)
    events: int  # folded by this member
    skipped: int
    seconds: float
    partitions: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> records this member folded

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def open_sink(part: MemoryConfig, target: str, store: ViewStore | None, projection: Projection) -> tuple[Sink, Any]:
    """The rebuild's sink for `target` (as the rebuild's own), and the idempotency store to close after."""
    if store is not None and isinstance(part.view, View):
        keys: IdempotencyStore = open_idempotency(part)
        return SessionSink(part.view, target_store(store, part.view, target), target=target, keys=keys), keys
    return ProjectionSink(projection), None


async def join(
    config: ConfigSource,
    *,
    into: str,
    view: str | None = None,
    batch_size: int = DEFAULT_BATCH,
    on_progress: ProgressCallback | None = None,
    wait: float = JOIN_SECONDS,
) -> MemberReport:
    """Join the running rebuild into `into` as a member: fold what the group assigns until the rebuild's
    lead has left the group. Any number of these, on any machines, with the same config."""
    log_config, part = select(config, view)
    check_group_log(log_config, "--join")
    if registry.kind(part.store).in_process:
        raise ConfigError("memory.store", f"a {part.store} view lives in the process that serves it: nothing to join")
    if batch_size < 1:
        raise ConfigError("--batch-size", f"must be >= 1, got {batch_size}")
    target = names.check_target(into)
    name = part.view.name
    report = MemberReport(name, part.store, target, 0, 0, 0, 0.0)
    started = time.monotonic()
    probe = group_watch(log_config, part, target)
    try:
        deadline = time.monotonic() + wait
        while LEAD not in await probe.members():  # members never fold a target nobody is rebuilding
            if time.monotonic() >= deadline:
                raise RebuildError(
                    f"no rebuild into {target} is running (nobody leads its group "
                    f"{probe.group} after {wait:.0f}s): start `helix-es rebuild --into {target} --group` first"
                )
            await asyncio.sleep(0.2)
    finally:
        await probe.close()
    alias = names.alias_id(name, log_config.topic_prefix)
    aliases = open_aliases(part)
    try:
        if target not in await aliases.targets(alias):
            raise RebuildError(f"{target} is not a target of {name}: check --into and --view")
        if await resolve_alias(aliases, alias, name) == target:
            return report  # switched already: the rebuild is done
    finally:
        await aliases.close()
    store = open_store(part) if isinstance(part.view, View) else None
    projection = target_projection(part, target, store)
    defer_indexes(projection)
    sink, keys = open_sink(part, target, store, projection)
    source = group_source(log_config, part, target, projection.checkpoint, batch_size, client_id=MEMBER)
    status = Status(name, target, "building")

    async def lead_gone() -> bool:
        return LEAD not in await source.members()

    settling = SettlingSink(sink, source)
    try:
        await source.start()
        await drain(source, settling, status, lead_gone, at_end=False, on_progress=on_progress)
    finally:
        try:
            await settling.settle()
            await source.close()
        finally:
            await projection.close()
            if keys is not None:
                await keys.close()
            if store is not None:
                await store.close()
    report.read, report.events, report.skipped = status.read, status.events, status.skipped
    report.seconds = round(time.monotonic() - started, 3)
    report.partitions = {f"{t}:{p}": n for (t, p), n in sorted(source.folded.items())}
    return report

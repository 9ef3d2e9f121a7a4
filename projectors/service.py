"""The projector service (`helix-es project`): every view a config serves, folded from the log until stopped."""

from __future__ import annotations

import asyncio
import logging

from helix_es.config import LogConfig, MemoryConfig, load_served
from helix_es.model.errors import ConfigError
from helix_es.projection.factory import merge_served, open_store, store_key
from helix_es.views.base import View
from projectors import heap, instance
from projectors.extract import extractions
from projectors.follow import TargetFollower
from projectors.forget import forgetters
from projectors.supervise import run_projectors

log = logging.getLogger("helix_es.project")


def served_projections(source: str) -> tuple[LogConfig, list[MemoryConfig]]:
    """The log and every (memory config, store) a config's projectors serve: all agents, all parts, once each,
    each over the namespaces of every agent that has it (`MemoryConfig.served`), and the adapters' mappings
    (`store:`, `checkpoints:`), each a view of its own."""
    configs = load_served(source)
    log_config = configs[0].log
    every = [part for cfg in configs for part in cfg.memory.parts]
    if log_config.kind.inline:
        raise ConfigError("log.type", "the embedded log is projected inside the client; this needs log: kafka")
    return log_config, merge_served(every, lambda part: (part.view.name, *store_key(part)))


async def serve(
    source: str,
    stop: asyncio.Event,
    *,
    batch_size: int = 500,
    session_timeout: float = 10.0,
    progress: float = 10.0,
    instance_id: str | None = None,
) -> int:
    """Run one projector (consumer group) per view of the config at `source` until `stop` is set; 0 when
    they stopped cleanly. A progress line every `progress` seconds on the `helix_es.project` logger.
    Every view's group knows this process by one static instance id (`projectors.instance.claim`)."""
    log_config, parts = served_projections(source)
    me = instance.claim(instance_id)
    try:
        return await _serve(log_config, parts, stop, me.id, batch_size, session_timeout, progress)
    finally:
        me.release()


async def _serve(
    log_config: LogConfig,
    parts: list[MemoryConfig],
    stop: asyncio.Event,
    instance_id: str,
    batch_size: int,
    session_timeout: float,
    progress: float,
) -> int:
    say = log.info
    say("group instance id %s (static membership: a restart under it takes its partitions back at once)", instance_id)
    stores = []
    projectors: list[TargetFollower] = []
    for part in parts:  # one projector (consumer group) per view: several processes share its partitions
        store = open_store(part) if isinstance(part.view, View) else None
        stores += [store] if store else []
        # A Projector of the target the view's alias names, moving with it when `helix-es rebuild` switches it.
        projectors.append(
            TargetFollower(
                part,
                store,
                bootstrap_servers=log_config.bootstrap_servers,
                topic_prefix=log_config.topic_prefix,
                batch_size=batch_size,
                session_timeout=session_timeout,
                group_instance_id=instance_id,
                replication_factor=log_config.replication_factor,
            )
        )
        say(
            "projecting %s.{%s} into view %s (%s store); SIGTERM stops",
            log_config.topic_prefix,
            ",".join(part.served),
            part.view.name,
            part.store,
        )

    workers = extractions(list(zip(parts, projectors, strict=True)), log_config)
    extracting = [asyncio.create_task(w.run(stop)) for w in workers]
    for w in workers:
        say("extracting facts for view %s with %s", w.view.name, w.view.extract.model if w.view.extract else "?")
    policies = forgetters(list(zip(parts, projectors, strict=True)), log_config)
    extracting += [asyncio.create_task(f.run(stop)) for f in policies]
    for f in policies:
        say(
            "forgetting in view %s: %s, every %gs",
            f.part.view.name,
            ", ".join(f.policy.settings().values()),
            f.policy.every,
        )

    async def report() -> None:
        while not stop.is_set():
            await asyncio.sleep(progress)
            for p in projectors:
                say(
                    "%s: %d events applied, %d re-deliveries skipped, %d dead letters, %d partitions"
                    "; %d writes retried, %d restarts, %d partitions refolded",
                    p.projection.name,
                    p.progress.events,
                    p.progress.skipped,
                    p.progress.dead_letters,
                    len(p.progress.assigned),
                    p.progress.retries,
                    p.progress.restarts,
                    p.progress.refolds,
                )
            for w in workers:
                s = w.stats
                say(
                    "%s extraction: %d model calls, %d turns, %d facts, %d prompt tokens, %d batches parked",
                    w.view.name,
                    s.calls,
                    s.turns,
                    s.facts,
                    s.prompt_tokens,
                    s.parked,
                )
            for f in policies:
                say("%s forgetting: %d items forgotten", f.part.view.name, f.forgotten)

    reporter = asyncio.create_task(report())
    collector = asyncio.create_task(heap.keep_short(stop))
    try:
        done = await run_projectors(projectors, stop)
    finally:
        reporter.cancel()
        collector.cancel()
        for task in extracting:  # the turns they were on stay pending: the next run asks again
            task.cancel()
        await asyncio.gather(*extracting, return_exceptions=True)
        for p in projectors:
            await p.projection.close()
        for store in stores:
            await store.close()
    say("stopped cleanly after %d events", sum(p.events for p in done))
    return 0

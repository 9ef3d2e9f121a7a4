"""Choosing what to rebuild: the log and the one view (in its store) a config names."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from helix_es.config import Config, LogConfig, MemoryConfig, load_served
from helix_es.model.errors import ConfigError
from helix_es.projection.factory import merge_served

ConfigSource = Mapping[str, Any] | str | os.PathLike[str] | Config  # what `rebuild` and `drop` accept


def views(config: ConfigSource, *, store: str | None = None) -> tuple[LogConfig, list[MemoryConfig]]:
    """The log and every view (in its store) of `config`: every agent, every part, and the adapters'
    mappings (`checkpoints:`, `store:`); only those in `store` if given."""
    configs = [config] if isinstance(config, Config) else load_served(config)
    every = [part for cfg in configs for part in cfg.memory.parts if store is None or part.store == store]
    # A view several agents share is rebuilt over all their namespaces, as the projector service folds it.
    return configs[0].log, merge_served(every, lambda p: (p.view.name, p.store))


def select(
    config: ConfigSource, view: str | None = None, *, store: str | None = None
) -> tuple[LogConfig, MemoryConfig]:
    """The log and the one memory (view in its store) `view` names in `config` (`views`)."""
    log_config, every = views(config, store=store)
    known = sorted(p.view.name for p in every)
    if view is None:
        if len(every) != 1:
            raise ConfigError(
                "--view",
                f"the config has {len(every)} views {known}: name one with --view (without --view, "
                "--into, --drop and --join, `helix-es rebuild` rebuilds them all)",
            )
        return log_config, every[0]
    found = [p for p in every if view in (p.view.name, p.type)]
    if not found:
        raise ConfigError("--view", f"no view {view!r} in the config; it has {known}")
    if len(found) > 1:
        raise ConfigError(
            "--view",
            f"{view!r} names {len(found)} views ({sorted(p.view.name for p in found)} in "
            f"{sorted(p.store for p in found)}); give a config with one of them",
        )
    return log_config, found[0]

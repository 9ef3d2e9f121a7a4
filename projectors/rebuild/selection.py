"""Choosing what to rebuild: the log and the one view (in its store) a config names."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from helix_es.config import Config, LogConfig, MemoryConfig, load_served
from helix_es.model.errors import ConfigError
from helix_es.projection.factory import merge_served

ConfigSource = Mapping[str, Any] | str | os.PathLike[str] | Config  # what `rebuild` and `drop` accept


def select(
    config: ConfigSource, view: str | None = None, *, store: str | None = None
) -> tuple[LogConfig, MemoryConfig]:
    """The log and the one memory (view in its store) `view` names in `config`: every agent, every part, and
    the adapters' mappings (`checkpoints:`, `store:`)."""
    configs = [config] if isinstance(config, Config) else load_served(config)
    every = [part for cfg in configs for part in cfg.memory.parts if store is None or part.store == store]
    # A view several agents share is rebuilt over all their namespaces, as the projector service folds it.
    parts = {(p.view.name, p.store): p for p in merge_served(every, lambda p: (p.view.name, p.store))}
    if view is None:
        if len(parts) != 1:
            raise ConfigError("--view", f"the config has several views; name one of {sorted(n for n, _ in parts)}")
        (part,) = parts.values()
    else:
        found = [p for (name, _), p in parts.items() if view in (name, p.type)]
        if not found:
            raise ConfigError("--view", f"no view {view!r} in the config; it has {sorted(n for n, _ in parts)}")
        if len(found) > 1:
            raise ConfigError(
                "--view",
                f"{view!r} names {len(found)} views ({sorted(p.view.name for p in found)} in "
                f"{sorted(p.store for p in found)}); give a config with one of them",
            )
        part = found[0]
    return configs[0].log, part

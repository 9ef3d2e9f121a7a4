"""`open_memory`: one session's memory as a config describes, its views, export and middleware composed."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from helix_es.client.composite import CompositeMemory, IndexedMemory
from helix_es.client.memory import JsonExport, ViewMemory
from helix_es.client.middleware import build_chain
from helix_es.client.protocol import Memory
from helix_es.client.runtime import Runtime, default_runtime
from helix_es.config import Composite, Config, MemoryConfig, load_config
from helix_es.model import names
from helix_es.model.errors import ConfigError, InvalidInput


@asynccontextmanager
async def open_memory(
    config: Mapping[str, Any] | str | os.PathLike[str] | Config,
    *,
    session_id: str | None = None,
    agent: str | None = None,
    runtime: Runtime | None = None,
) -> AsyncIterator[Memory]:
    """Open one session's memory as `config` describes (a dict, YAML text, a path or a Config).

    Its log backend and keys are `runtime`'s, by default the running loop's (`default_runtime`)."""
    cfg = config if isinstance(config, Config) else load_config(config, agent=agent)
    mem = cfg.memory
    names.concrete_namespace(mem.namespace, "memory.namespace", ConfigError)  # a glob is for projectors only
    sid = session_id or mem.session_id
    if sid is None:
        raise InvalidInput("session_id", "give session_id= or memory.session_id in the config")
    runtime = runtime or default_runtime()
    chain = build_chain(cfg.middleware, {"encryption": runtime.encryption})
    backend = await runtime.acquire(cfg.log)
    try:

        async def view(part: MemoryConfig) -> ViewMemory:
            return ViewMemory(
                backend,
                await backend.attach(part, mem.namespace),
                mem.namespace,
                sid,
                consistency=mem.consistency,
                read_timeout=mem.read_timeout,
                max_content_bytes=mem.max_content_bytes,
                config=part,
            )

        async def memory_of(part: MemoryConfig) -> ViewMemory | IndexedMemory:
            rows = await view(part)
            return rows if part.index is None else IndexedMemory(rows, await view(part.index))

        memory: Memory
        if isinstance(mem.view, Composite):
            memory = CompositeMemory([await memory_of(p) for p in mem.view.parts])
        else:
            memory = await memory_of(mem)
        if mem.file_path is not None:
            memory = JsonExport(memory, mem.file_path)
        yield chain(memory)
    finally:
        await runtime.release(cfg.log, backend)

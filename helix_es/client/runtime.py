"""The runtime: the one composition root of what a process shares on one event loop.

A `Runtime` owns the log backends (one per log a config names, shared by every memory, history,
erasure and framework store on it: the embedded log folds each append into the views of its one
backend) and the key providers of `HELIX_KEY_STORE` (one connection pool per store). It builds
each from the config it is asked about (`LogConfig`, the environment's key settings), on first use.
A backend is closed when its last user releases it (a file lock or a broker connection is not held
longer than a memory is open); the key providers when the runtime closes (`aclose`, or `async with`).

Who holds one: the CLI opens one per command, the service one per app, a `LoopThread`
(`helix_es.sync.loop`) one for its loop, and callers may pass their own (`runtime=`). A caller that
passes none gets `default_runtime()`, its loop's: made on first use and closed when the loop's owner
shuts the loop down. Why that way: what is shared (connection pools, the inline fold) belongs to
one loop, and a loop has no slot to hang it on and no close callback. The closest asyncio has is
the shutdown of async generators that `asyncio.run`, `asyncio.Runner` (pytest-asyncio's too) and
uvicorn run before closing their loop: the default runtime is held open by one such generator,
which closes it then. Until then the loop maps to its runtime in a weak table, the one per-process
table of this layer (a loop collected drops its entry).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType

from helix_es.client.backend import Backend
from helix_es.client.encryption import KeyProvider, encryption_middleware, keys_from_env
from helix_es.client.keys import ENV_STORE, StoredSessionKeys, key_store_settings, keys_from_store_env
from helix_es.client.middleware import Middleware
from helix_es.config import LogConfig
from helix_es.model.errors import HelixError
from helix_es.projection.factory import open_log

__all__ = ["Runtime", "RuntimeClosed", "default_runtime", "install_default"]


class RuntimeClosed(HelixError, RuntimeError):
    """The runtime was closed; open a memory with another (or with none: the loop's default)."""


def _log_key(log: LogConfig) -> tuple[object, ...]:
    """Which logs are the same one: a broker by its servers, a file log by its resolved path."""
    if log.kind.broker:
        return (log.type, log.bootstrap_servers, log.topic_prefix)
    return (log.type, str(Path(log.path).resolve()), log.topic_prefix, log.fsync)


class Runtime:
    """What memories on one event loop share: log backends and key providers. Close it last.

    `environ` is where the key settings are read (`HELIX_KEY_STORE` and the rest), read again at
    each `keys()` call; the process's environment by default.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = environ
        self._backends: dict[tuple[object, ...], Backend] = {}
        self._refs: dict[tuple[object, ...], int] = {}
        self._keys: dict[tuple[object, ...], StoredSessionKeys] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._holder: AsyncGenerator[None, None] | None = None  # a default runtime: what closes it (below)

    def __repr__(self) -> str:
        return f"Runtime({len(self._backends)} logs, {len(self._keys)} key stores{', closed' if self._closed else ''})"

    @property
    def closed(self) -> bool:
        return self._closed

    def _check(self) -> None:
        if self._closed:
            raise RuntimeClosed("this helix-es runtime is closed")
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not on a loop yet: nothing opened here is bound to one
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise HelixError("a helix-es runtime serves one event loop; this one was first used on another")

    async def acquire(self, log: LogConfig) -> Backend:
        """The backend of `log`, shared by every user of it on this runtime; `release` it when done."""
        self._check()
        key = _log_key(log)
        backend = self._backends.get(key)
        if backend is None:
            backend = self._backends[key] = Backend(open_log(log), inline=log.kind.inline)
        self._refs[key] = self._refs.get(key, 0) + 1
        return backend

    async def release(self, log: LogConfig, backend: Backend) -> None:
        """A user is done with `backend`; the last one closes it."""
        key = _log_key(log)
        if self._backends.get(key) is not backend:
            return  # closed with the runtime already
        self._refs[key] -= 1
        if self._refs[key] <= 0:
            del self._backends[key], self._refs[key]
            await backend.close()

    def holds(self, log: LogConfig) -> bool:
        """Whether a backend of `log` is open on this runtime (some user has not released it)."""
        return _log_key(log) in self._backends

    @asynccontextmanager
    async def backend(self, log: LogConfig) -> AsyncIterator[Backend]:
        """`acquire` and `release` around a block."""
        backend = await self.acquire(log)
        try:
            yield backend
        finally:
            await self.release(log, backend)

    def keys(self) -> KeyProvider:
        """The provider `memory_middleware: [encryption]` uses: the key store `HELIX_KEY_STORE` names
        (one per store and settings, kept until the runtime closes), else keys derived from the master."""
        self._check()
        env = self.environ
        if not (os.environ if env is None else env).get(ENV_STORE):
            return keys_from_env(env)
        ident = key_store_settings(env)
        found = self._keys.get(ident)
        if found is None:
            found = self._keys[ident] = keys_from_store_env(env)
        return found

    def encryption(self) -> Middleware:
        """YAML `memory_middleware: [encryption]` on this runtime's keys."""
        return encryption_middleware(self.keys())

    async def aclose(self) -> None:
        """Close what this runtime opened: the backends still held, then the key providers."""
        if self._closed:
            return
        self._closed = True
        backends, self._backends = list(self._backends.values()), {}
        self._refs.clear()
        keys, self._keys = list(self._keys.values()), {}
        for backend in backends:
            await backend.close()
        for provider in keys:
            await provider.close()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


# The loops' default runtimes: a loop has no slot of its own for it (see the module's docstring).
_DEFAULTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Runtime] = weakref.WeakKeyDictionary()


def install_default(loop: asyncio.AbstractEventLoop, runtime: Runtime) -> None:
    """Make `runtime` the default of `loop`, which its owner closes (a `LoopThread` does)."""
    _DEFAULTS[loop] = runtime


def default_runtime() -> Runtime:
    """The running loop's runtime: made on first use, closed when the loop's owner shuts it down."""
    loop = asyncio.get_running_loop()
    found = _DEFAULTS.get(loop)
    if found is None or found.closed:
        found = _DEFAULTS[loop] = Runtime()
        _close_with(loop, found)
    return found


async def _held(loop: asyncio.AbstractEventLoop, runtime: Runtime) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:  # the loop's owner shuts its async generators down: close the runtime while it still runs
        if _DEFAULTS.get(loop) is runtime:
            del _DEFAULTS[loop]
        await runtime.aclose()


def _close_with(loop: asyncio.AbstractEventLoop, runtime: Runtime) -> None:
    """Start `_held` up to its `yield`: the loop now tracks it, and closes it at shutdown."""
    holder = _held(loop, runtime)
    step = holder.asend(None)
    with contextlib.suppress(StopIteration):  # raised as it reaches the yield: it never suspends before
        step.send(None)
    runtime._holder = holder  # kept alive as long as the runtime

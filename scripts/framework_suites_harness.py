"""The stand-ins `scripts/framework-suites` puts where the frameworks' own tests build the object under
test: the only thing of those tests that changes. Copied into each run folder as `helix_suite_harness.py`;
the run's `conftest.py` binds the frameworks' names to them before any test module imports them.

- `SQLiteSession(session_id, db_path=":memory:", ..., session_settings=None)` and
  `AsyncSQLiteSession(...)` (the OpenAI Agents SDK): a `HelixSession` on the backend below. One
  database file is one helix log, so two sessions the tests open on one file share a log, as they
  would share the file; `":memory:"` is a log of its own per session, as SQLite's in-memory database
  is. `AsyncSQLiteSession.close()` is awaited, as the SDK's is: it is `HelixSession.aclose`.
- `SimpleListSession(session_id, history=None)` (the SDK's list-backed test session, the object the
  HITL scenario runs on): a `HelixSession` on the test's one log. `history` is what a rehydrated
  session starts from: written when the session holds nothing yet, and checked equal to what the
  log holds when it does (the scenario rehydrates a session from the items it saved).
- `InMemoryChatMessageHistory(messages=None)` (langchain-core): a `HelixChatMessageHistory` on a
  log of its own; two histories are equal when their messages are, as the pydantic model's are.

HELIX_SUITE_BACKEND picks the backend: `embedded` (the default: an embedded log in a folder of
its own) or `kafka-redis` (a Kafka log and a Redis view, folded by a projector this process runs on
helix-es's loop, one per log; HELIX_KAFKA_BOOTSTRAP and HELIX_REDIS_URL name the services).
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from helix_es.sync import run as run_sync
from helix_es.sync import submit

BACKEND = os.environ.get("HELIX_SUITE_BACKEND", "embedded")
_BASE = tempfile.mkdtemp(prefix="helix-suite-")  # the logs' folders, one per database the tests name


class _Backends:
    """The helix configs standing for the databases one test opens, and what they hold open."""

    def __init__(self) -> None:
        self.by_key: dict[str, dict[str, Any]] = {}
        self.folders: list[str] = []
        self.projectors: list[_Projector] = []

    def config(self, key: str | None) -> dict[str, Any]:
        """The config of database `key` (None: a new one each time)."""
        if key is not None and key in self.by_key:
            return self.by_key[key]
        name = f"suite{uuid.uuid4().hex[:12]}"
        folder = os.path.join(_BASE, name)  # made when the log opens: a constructor does no I/O (blockbuster)
        self.folders.append(folder)
        if BACKEND == "embedded":
            log: dict[str, Any] = {"type": "embedded", "path": folder, "fsync": False}
            memory: dict[str, Any] = {"type": "conversation", "namespace": name}
        elif BACKEND == "kafka-redis":
            bootstrap = os.environ["HELIX_KAFKA_BOOTSTRAP"]
            log = {"type": "kafka", "bootstrap_servers": bootstrap, "partitions": 1, "topic_prefix": name}
            memory = {"type": "conversation", "namespace": name, "store": "redis", "read_timeout": 60}
            memory["redis_url"] = os.environ["HELIX_REDIS_URL"]
        else:
            raise ValueError(f"HELIX_SUITE_BACKEND={BACKEND!r}: embedded or kafka-redis")
        config = {"log": log, "memory": memory}
        if BACKEND != "embedded":
            self.projectors.append(_Projector(folder, config))
        if key is not None:
            self.by_key[key] = config
        return config

    def close(self) -> None:
        for projector in self.projectors:
            run_sync(projector._stop())
        for projector in self.projectors:
            code = projector.done.result(timeout=60)
            assert code == 0, f"the projector stopped with {code}"
        names = [os.path.basename(folder) for folder in self.folders]
        if BACKEND != "embedded" and names:
            run_sync(_delete_topics(names))  # a shared broker should not keep every test's topics
        for folder in self.folders:
            shutil.rmtree(folder, ignore_errors=True)
        self.__init__()  # type: ignore[misc]


async def _delete_topics(prefixes: list[str]) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=os.environ["HELIX_KAFKA_BOOTSTRAP"])
    await admin.start()
    try:
        mine = [t for t in await admin.list_topics() if t.startswith(tuple(prefixes))]
        if mine:
            await admin.delete_topics(mine)
    finally:
        await admin.close()


class _Projector:
    """`helix-es project --config F` as a task on helix-es's loop (the sessions' memories are there too),
    started without waiting on that loop: a history is built inside async code (blockbuster)."""

    def __init__(self, folder: str, config: dict[str, Any]) -> None:
        self.stop: asyncio.Event | None = None
        self.done = submit(self._run(folder, config))

    async def _run(self, folder: str, config: dict[str, Any]) -> int:
        self.stop = asyncio.Event()  # made first: a later `_stop` on the same loop finds it
        return await _project(folder, config, self.stop)

    async def _stop(self) -> None:
        assert self.stop is not None
        self.stop.set()


async def _project(folder: str, config: dict[str, Any], stop: asyncio.Event) -> int:
    from projectors.service import serve

    path = Path(folder) / "project.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))  # JSON is YAML: what `helix-es project --config` reads
    return await serve(str(path), stop, batch_size=500, progress=3600.0)


BACKENDS = _Backends()


def _database(db_path: str | os.PathLike[str]) -> str | None:
    return None if str(db_path) == ":memory:" else str(Path(db_path).resolve())


_closers: list[Callable[[], None]] = []  # what each stand-in a test made holds: released after the test


def agents_stand_ins() -> tuple[type[Any], type[Any], type[Any]]:
    """`SQLiteSession`, `AsyncSQLiteSession` and `SimpleListSession` of the OpenAI Agents SDK's tests."""
    from helix_es.integrations.openai_agents import HelixSession

    class SQLiteSession(HelixSession):
        """`agents.SQLiteSession`'s constructor, building a HelixSession; `close()` is HelixSession's (sync)."""

        def __init__(
            self,
            session_id: str,
            db_path: str | os.PathLike[str] = ":memory:",
            sessions_table: str = "agent_sessions",
            messages_table: str = "agent_messages",
            session_settings: Any = None,
        ) -> None:
            super().__init__(session_id, BACKENDS.config(_database(db_path)), session_settings=session_settings)
            self.sessions_table, self.messages_table = sessions_table, messages_table
            _closers.append(lambda: HelixSession.close(self))

    class AsyncSQLiteSession(SQLiteSession):
        """`agents.extensions.memory.AsyncSQLiteSession`'s constructor; its `close()` is awaited."""

        async def close(self) -> None:  # type: ignore[override]
            await self.aclose()

    class SimpleListSession(HelixSession):
        """`tests.utils.simple_session.SimpleListSession(session_id, history)`: a HelixSession on the test's log."""

        def __init__(self, session_id: str = "test", history: Sequence[Any] | None = None) -> None:
            super().__init__(session_id, BACKENDS.config("simple-list-sessions"))
            self._history = list(history or [])
            _closers.append(self.close)

        async def memory(self) -> Any:
            opened = self._memory is not None
            memory = await super().memory()
            if not opened and self._history:
                history, self._history = self._history, []
                held = await self.get_items()
                if not held:
                    await self.add_items(history)
                elif held != history:
                    raise AssertionError(f"the log holds {held!r}, the rehydrated session was given {history!r}")
            return memory

    return SQLiteSession, AsyncSQLiteSession, SimpleListSession


def langchain_stand_in() -> type[Any]:
    """`InMemoryChatMessageHistory` of langchain-core's tests."""
    from helix_es.integrations.langchain import HelixChatMessageHistory

    class InMemoryChatMessageHistory(HelixChatMessageHistory):
        """`langchain_core.chat_history.InMemoryChatMessageHistory(messages=...)`: a HelixChatMessageHistory."""

        def __init__(self, messages: Sequence[Any] | None = None) -> None:
            super().__init__(BACKENDS.config(None), session_id="history")
            _closers.append(self.close)
            if messages:
                self.add_messages(messages)

        def __eq__(self, other: object) -> bool:
            if not isinstance(other, HelixChatMessageHistory):
                return NotImplemented
            return bool(self.messages == other.messages)

        __hash__ = None  # type: ignore[assignment]

    return InMemoryChatMessageHistory


@pytest.fixture(autouse=True)
def _close_backends() -> Iterator[None]:
    yield
    while _closers:
        _closers.pop()()
    BACKENDS.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the tests `scripts/framework-suites` excludes (each with its reason there)."""
    excluded: list[list[str]] = json.loads(os.environ.get("HELIX_SUITE_EXCLUDED", "[]"))
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (dropped if any(fnmatch.fnmatchcase(item.nodeid, pattern) for pattern, _ in excluded) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept

"""The read-side client: `add`/`clear` append events, `get`/`search` read a view."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import NoReturn, TypeVar, cast

from helix_es.client import backend as backends
from helix_es.client.compaction import Compaction
from helix_es.client.knowledge import Knowledge
from helix_es.client.middleware import add_many
from helix_es.client.protocol import Memory
from helix_es.client.wait import poll
from helix_es.config import MemoryConfig
from helix_es.model import names
from helix_es.model.batch import check_batch
from helix_es.model.errors import ConsistencyTimeout, InvalidInput, InvalidMessage
from helix_es.model.events import (
    Event,
    FactAsserted,
    FactRetracted,
    FactsMerged,
    FactsUnmerged,
    MemoryCleared,
    MessageAdded,
    MessageRetracted,
    Position,
    SessionCompacted,
    check_idempotency_key,
)
from helix_es.model.message import DEFAULT_MAX_CONTENT_BYTES, Message, check_size, check_text
from helix_es.model.recall import RecallHit, SearchMode, make_recall
from helix_es.projection.aliases import AliasedProjection
from helix_es.projection.protocol import Projection, Recaller
from helix_es.stores.ports import SessionKey

MAX_IN_DOUBT = 16  # failed appends a memory remembers for retries
MAX_OWN_ADDS = 64  # event ids of its own adds a writer remembers, to name what a retraction takes back
RETRY_WINDOW = timedelta(minutes=5)  # an equal add or clear this soon after one that raised is its retry


Written = (
    MessageAdded
    | MemoryCleared
    | MessageRetracted
    | FactAsserted
    | FactRetracted
    | FactsMerged
    | FactsUnmerged
    | SessionCompacted
)
T = TypeVar("T")


class EventWriter:
    """`add`, `clear` and `retract`: one event on the log each, never a write to a view."""

    backend: backends.Backend
    namespace: str
    session_id: str
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES
    _in_doubt: tuple[Event, ...] = ()  # events of the last adds and clears that raised
    _own_adds: tuple[str, ...] = ()  # event ids of this writer's adds since its last clear, newest last
    _own_keys: tuple[str, ...] = ()  # idempotency keys of its last writes: a write with one again is a retry

    async def add(self, message: Message, *, idempotency_key: str | None = None) -> Position:
        if not isinstance(message, Message):
            raise InvalidMessage("message", f"must be a helix_es.Message, got {type(message).__name__}")
        check_size(message, self.max_content_bytes)
        position = await self._append(MessageAdded(message), check_idempotency_key(idempotency_key))
        self._after_add()
        return position

    def _after_add(self) -> None:
        """What a memory does once an add landed (`Compaction`: compact past a token threshold)."""

    async def add_many(
        self, messages: Iterable[Message], *, idempotency_keys: Sequence[str | None] | None = None
    ) -> list[Position]:
        """Append `messages` in order, together (one batch on the log); their positions, in order.

        Every message (and key: one per message, or None) is checked first: a bad one raises naming its
        index (`messages[3].content`) and nothing is written. Each keeps `add`'s semantics: the same
        batch called again after one that raised re-sends its events; keys make retries show once."""
        batch, keys = check_batch(messages, idempotency_keys, max_content_bytes=self.max_content_bytes)
        if not batch:
            return []
        positions = await self._append_many([MessageAdded(m) for m in batch], keys)
        self._after_add()
        return positions

    async def clear(self, *, idempotency_key: str | None = None) -> Position:
        return await self._append(MemoryCleared(), check_idempotency_key(idempotency_key))

    async def retract(self, *, reason: str | None = None, idempotency_key: str | None = None) -> Position:
        """Take back the session's latest message still in its views: a `MessageRetracted` on the log.

        The message stays on the log (audit shows both). The event names the newest add this writer
        made (`retracted`, its event id) while it remembers one; a writer that did not make the
        latest add leaves it out, and the audit tells from the log. Called again after one that
        raised, it re-sends that retraction (a retry), never a second one."""
        if reason is not None:
            check_text(reason, "reason", error=InvalidInput)
        retracted = self._own_adds[-1] if self._own_adds else None
        return await self._append(MessageRetracted(retracted, reason), check_idempotency_key(idempotency_key))

    async def _append(self, payload: Written, key: str | None) -> Position:
        """Append one event. An add or clear that raised may land yet (a caller's timeout cancels only
        the wait for the broker), so the same add (an equal message) or clear called again re-sends
        that event, same id, and the log returns the first send's position instead of writing twice.
        Across processes, and after a crash, only an idempotency key says two writes are one: the views
        fold the first event with a key and pass over the rest (`helix_es.projection.idempotency`)."""
        event = self._retry_of(payload, key) if self._in_doubt else None
        if event is None:
            event = Event(self.namespace, self.session_id, payload, idempotency_key=key)
        try:
            position = await self.backend.append(event)
        except BaseException:
            if all(e is not event for e in self._in_doubt):
                self._in_doubt = (*self._in_doubt[-(MAX_IN_DOUBT - 1) :], event)
            raise
        self._landed(event, position)
        return position

    async def _append_many(self, payloads: Sequence[Written], keys: Sequence[str | None]) -> list[Position]:
        """`_append` of each payload, the events appended together (`Backend.append_many`)."""
        events: list[Event] = []
        for payload, key in zip(payloads, keys, strict=True):
            event = self._retry_of(payload, key, taken=events) if self._in_doubt else None
            events.append(event or Event(self.namespace, self.session_id, payload, idempotency_key=key))
        try:
            positions = await self.backend.append_many(events)
        except BaseException:
            # Every event of the batch may land yet: remember them all (a retry of the whole batch re-sends them).
            new = [e for e in events if all(e is not d for d in self._in_doubt)]
            self._in_doubt = (*self._in_doubt, *new)[-max(MAX_IN_DOUBT, len(events)) :]
            raise
        for event, position in zip(events, positions, strict=True):
            self._landed(event, position)
        return positions

    def _landed(self, event: Event, position: Position) -> None:
        """Bookkeeping once `event` is on the log at `position`."""
        payload, key = event.payload, event.idempotency_key
        if self._in_doubt:
            # A clear that landed ends every retry before it; a message, those of clears before it.
            cleared = isinstance(payload, MemoryCleared)
            self._in_doubt = tuple(
                e for e in self._in_doubt if not cleared and e is not event and not isinstance(e.payload, MemoryCleared)
            )
        if key is not None and key in self._own_keys:
            pass  # a retry by its key: the views show the first write alone
        elif isinstance(payload, MessageAdded):
            self._own_adds = (*self._own_adds[-(MAX_OWN_ADDS - 1) :], str(event.event_id))
        elif isinstance(payload, MemoryCleared):
            self._own_adds = ()
        else:
            self._own_adds = self._own_adds[:-1]
        if key is not None:
            self._own_keys = (*self._own_keys[-(MAX_OWN_ADDS - 1) :], key)
        self.wrote(position)

    def _retry_of(self, payload: Written, key: str | None, taken: Sequence[Event] = ()) -> Event | None:
        oldest = datetime.now(UTC) - RETRY_WINDOW
        return next(
            (
                e
                for e in self._in_doubt
                if e.payload == payload
                and e.idempotency_key == key
                and e.timestamp > oldest
                and all(e is not t for t in taken)  # two equal messages of one batch are two events
            ),
            None,
        )

    def wrote(self, position: Position) -> None:
        """Reads from now on wait until the views have applied `position`."""
        raise NotImplementedError

    def pending(self) -> Position | None:
        """The last write reads must still wait for (None: the views were seen to cover every write),
        for `wrote` on the memory that takes this one's place."""
        raise NotImplementedError


class ViewMemory(Knowledge, Compaction, EventWriter):
    """One session's memory served from one projection, with read-your-writes by default."""

    def __init__(
        self,
        backend: backends.Backend,
        projection: Projection,
        namespace: str,
        session_id: str,
        *,
        consistency: str = "read-your-writes",
        read_timeout: float = 5.0,
        max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
        config: MemoryConfig | None = None,
    ) -> None:
        self.backend = backend
        self.config = config  # the view's part of the memory config: compaction reads its summariser
        self.max_content_bytes = max_content_bytes
        self.source = projection  # what the backend attached: it follows the view's alias
        self.namespace = names.check_namespace(namespace)
        self.session_id = names.check_session_id(session_id)
        self.key = SessionKey(namespace, session_id)
        self.consistency = consistency
        self.read_timeout = read_timeout
        self.last_write: Position | None = None
        self._seen_last_write = True  # the view already covers last_write: reads need no guard
        self._generation = getattr(projection, "generation", 0)  # moves when readers switch target (rebuild)

    @property
    def projection(self) -> Projection:
        """The projection reads go to now: the target the view's alias names."""
        source = self.source
        if isinstance(source, AliasedProjection) and source.current is not None:
            return source.current
        return source

    @projection.setter
    def projection(self, projection: Projection) -> None:
        self.source = projection

    def wrote(self, position: Position) -> None:
        last = self.last_write
        same = last is not None and (last.topic, last.partition) == (position.topic, position.partition)
        if same and last is not None and last.offset >= position.offset:
            return  # an earlier offset (a retry's first send, another server's token): waiting for last covers it
        self.last_write = position
        self._seen_last_write = False

    def pending(self) -> Position | None:
        return None if self._seen_last_write else self.last_write

    async def get(self) -> list[Message]:
        found = await self._read(lambda want: self.projection.get(self.key, want))
        self.backend.used(self.source.name, self.namespace, self.session_id, whole=True)
        return found

    async def search(self, query: str, limit: int = 10) -> list[Message]:
        check_search(query, limit)
        found = await self._read(lambda want: self.projection.search(self.key, query, limit, want))
        self.backend.used(self.source.name, self.namespace, self.session_id)
        return found

    async def forget_now(self) -> int:
        """Apply the forgetting policies (`forget:`) of this namespace's views now: the items forgotten. On
        the embedded log they also run in the background every `every`; on Kafka beside `helix-es project`."""
        return await self.backend.forget(self.namespace)

    async def recall(
        self,
        query: str,
        limit: int | None = None,
        *,
        sessions: Collection[str] | None = None,
        where: Mapping[str, str] | None = None,
        after: datetime | None = None,
        before: datetime | None = None,
        explain: bool = False,
        mode: SearchMode | None = None,
    ) -> list[RecallHit]:
        """The namespace's messages that best answer `query`, best first, with scores (see `Recall`).

        `limit` defaults to the view's `top_k`; filters apply before ranking. A view that cannot
        recall (a session window) raises `InvalidInput` naming it."""
        projection = self.projection
        if not isinstance(projection, Recaller):
            raise InvalidInput(
                "memory", f"view {projection.name} cannot recall: recall is served by vector and long-term views"
            )
        ask = make_recall(
            query,
            getattr(projection, "top_k", 10) if limit is None else limit,
            sessions=sessions,
            where=where,
            after=after,
            before=before,
            explain=explain,
            mode=mode,
        )
        hits = await self._read(lambda want: cast(Recaller, self.projection).recall(self.key, ask, want))
        found = [(h.session_id, h.position.partition, h.position.offset) for h in hits]
        self.backend.used(self.source.name, self.namespace, self.session_id, messages=found)
        return hits

    async def _read(self, op: Callable[[Position | None], Awaitable[T | None]]) -> T:
        await self.backend.current(self.source, self.namespace)
        generation = getattr(self.source, "generation", 0)
        if generation != self._generation:  # another target now: it must show our last write before we skip the guard
            self._generation = generation
            self._seen_last_write = self.last_write is None
        # Views only move forward, so once our last write was seen, every later state covers it.
        want = None if self._seen_last_write or self.consistency == "eventual" else self.last_write
        result = await poll(lambda: op(want), self.read_timeout)  # None only while the view lacks `want`
        if result is None:
            assert want is not None
            await self._timed_out(want)
        if want is not None and want == self.last_write:  # not a write made while this read waited
            self._seen_last_write = True
        return result

    async def _timed_out(self, want: Position) -> NoReturn:
        applied = await self.projection.applied(self.key, want)
        raise ConsistencyTimeout(
            f"view {self.projection.name} of {self.namespace}/{self.session_id} has applied offset "
            f"{applied} but this client wrote offset {want.offset} to {want.topic}[{want.partition}]; "
            f"waited {self.read_timeout}s. Is a projector running for it (helix-es project --config FILE)? "
            "Or set consistency: eventual."
        )


def check_search(query: object, limit: object) -> None:
    check_text(query, "query", error=InvalidInput)  # a store would fail on bad text mid-query, untyped
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidInput("limit", f"must be a whole number >= 1, got {limit!r}")


class JsonExport:
    """store: file: after every add and clear, the session's memory is written out as JSON for people."""

    def __init__(self, inner: Memory, path: str) -> None:
        self.inner = inner
        self.namespace: str = getattr(inner, "namespace", "")
        self.session_id: str = getattr(inner, "session_id", "")
        self.path = Path(path.replace("{session_id}", self.session_id).replace("{namespace}", self.namespace))

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def add(self, message: Message, *, idempotency_key: str | None = None) -> Position:
        position = await self.inner.add(message, idempotency_key=idempotency_key)
        await self.export()
        return position

    async def add_many(
        self, messages: Iterable[Message], *, idempotency_keys: Sequence[str | None] | None = None
    ) -> list[Position]:
        positions = await add_many(self.inner, messages, idempotency_keys=idempotency_keys)
        await self.export()  # once for the batch
        return positions

    async def clear(self, *, idempotency_key: str | None = None) -> Position:
        position = await self.inner.clear(idempotency_key=idempotency_key)
        await self.export()
        return position

    async def retract(self, *, reason: str | None = None, idempotency_key: str | None = None) -> Position:
        position = await retract(self.inner, reason=reason, idempotency_key=idempotency_key)
        await self.export()
        return position

    async def get(self) -> list[Message]:
        return await self.inner.get()

    async def search(self, query: str, limit: int = 10) -> list[Message]:
        return await self.inner.search(query, limit)

    async def export(self) -> Path:
        """Write the JSON export atomically (a reader never sees half a file)."""
        doc = {
            "namespace": self.namespace,
            "session_id": self.session_id,
            "exported_at": datetime.now(UTC).isoformat(),
            "messages": [json.loads(m.to_json()) for m in await self.inner.get()],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        os.replace(tmp, self.path)
        return self.path


async def retract(memory: Memory, *, reason: str | None = None, idempotency_key: str | None = None) -> Position:
    """Take back the session's latest message in every view of `memory` (`EventWriter.retract`).

    `memory` is what `open_memory` yields: middleware and composites pass `retract` on to the
    writer. `InvalidInput` naming `memory` for one that cannot retract; nothing is written then."""
    method: Callable[..., Awaitable[Position]] | None = getattr(memory, "retract", None)
    if not callable(method):
        raise InvalidInput("memory", f"{type(memory).__name__} cannot retract (it wraps no helix_es memory)")
    return await method(reason=reason, idempotency_key=idempotency_key)

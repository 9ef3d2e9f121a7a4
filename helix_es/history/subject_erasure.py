"""Erasure of a person (GDPR art. 17) across a namespace's sessions and views, with a receipt.

`erase_subject(config, subject=S, namespace=N)`:

1. reads the namespace's log once (`helix_es.history.subject_scan`): S's own sessions (a message whose
   `metadata.user_id` is S, facts extracted from the session's turns about S, or a session an earlier
   erasure of S listed), the messages of other sessions that name S (case-insensitive whole word, or
   `metadata.user_id` S), the facts about S, and the records it cannot read (listed, never a stop);
2. erases each of S's sessions with `forget`'s own step (`helix_es.history.erasure.erase`): its data keys
   destroyed, then `SessionErased`, which every view folds. A session it cannot shred (no encryption,
   or keys derived from the master) is dropped from every view all the same (`allow_unshreddable`),
   and listed as `not_shredded`: the log keeps it readable;
3. appends, on each other session naming S, `MemoryForgotten(views=<every view of the config>,
   policy="erasure", reason=<request>, offsets=<those messages' MessageAdded offsets>, ids=<their texts'
   `content_id`s, for session views, which keep no positions>)` (after them on their partition), and
   `MemoryForgotten(views=<the facts views>, ids=<facts about S>)` on the session `erasure:<request>`.
   Those sessions keep their keys;
4. checks every view and the log (`helix_es.history.subject_verify`);
5. records the receipt as `SubjectErased(S, request, receipt)` on the session `erasure:<request>`.

With `dry_run` it stops after 1: the receipt lists what would go, and nothing is written. It is
idempotent: run again, it finds nothing more to erase (a shredded session's user ids no longer open,
so earlier receipts name S's sessions), appends no erasure event, and still checks and answers a
receipt (recorded as its own `SubjectErased`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from helix_es.client.encryption import KeyNotFound, KeyProvider
from helix_es.client.keys import shreddable
from helix_es.client.runtime import Runtime, default_runtime
from helix_es.config import Config, load_config
from helix_es.history.erasure import ForgetResult, _export, erase, held
from helix_es.history.subject_scan import (
    CONCURRENCY,
    POLICY,
    RECEIPTS,
    Found,
    Opener,
    Seen,
    check_subject,
    said_in,
    scan,
)
from helix_es.history.subject_verify import Verifier
from helix_es.model import names
from helix_es.model.events import (
    Event,
    MemoryForgotten,
    Position,
    Record,
    SessionErased,
    SubjectErased,
    content_id,
)
from helix_es.projection.forgetting import MAX_OFFSETS
from helix_es.stores import registry
from helix_es.stores.ports import KeyRow
from helix_es.views.base import View
from helix_es.views.facts import Facts
from helix_es.views.long_term import LongTerm
from helix_es.views.vector import Vector

DEFAULT_TIMEOUT = 60.0  # seconds the check waits for the views to apply the erasure (on Kafka: the projectors)
BATCH = 500  # events appended together
LOG_RECEIPT = 600_000  # bytes of receipt on the log, under the log's event limit; past it, an abridged copy
__all__ = ["Receipt", "erase_subject"]


@dataclass(frozen=True)
class Receipt:
    """What an erasure did (or, dry, would do), and what its check found: `doc` is the JSON receipt."""

    doc: dict[str, Any]

    @property
    def passed(self) -> bool:
        """The check passed (a dry run checks nothing: True)."""
        check = self.doc.get("verification")
        return check is None or bool(check["passed"])

    def to_json(self) -> dict[str, Any]:
        return self.doc


class _NoKeys:
    """A key provider with no key to destroy: `erase` then only drops the session from every view."""

    def current_key(self, namespace: str, session_id: str) -> tuple[str, bytes]:
        raise KeyNotFound(f"no key store keeps keys of {namespace}/{session_id}")

    def key(self, namespace: str, session_id: str, key_id: str) -> bytes | None:
        return None

    async def rows(self, namespace: str, session_id: str) -> list[KeyRow]:
        return []

    async def erase(self, namespace: str, session_id: str) -> list[str]:
        return []


class _Batch:
    """Appends from many concurrent erasures written together, `BATCH` events at a time."""

    def __init__(self, append_many: Callable[[Sequence[Event]], Awaitable[list[Position]]]) -> None:
        self._many = append_many
        self._queue: list[tuple[Event, asyncio.Future[Position]]] = []
        self._task: asyncio.Task[None] | None = None
        self.positions: list[Position] = []

    async def append(self, event: Event) -> Position:
        future: asyncio.Future[Position] = asyncio.get_running_loop().create_future()
        self._queue.append((event, future))
        if self._task is None:
            self._task = asyncio.create_task(self._flush())
        return await future

    async def many(self, events: Sequence[Event]) -> None:
        for start in range(0, len(events), BATCH):
            self.positions += await self._many(events[start : start + BATCH])

    async def _flush(self) -> None:
        try:
            await asyncio.sleep(0.002)  # the other erasures' appends join this one
            while self._queue:
                batch, self._queue = self._queue[:BATCH], self._queue[BATCH:]
                try:
                    positions = await self._many([e for e, _ in batch])
                except Exception as exc:
                    for _, future in batch:
                        future.set_exception(exc)
                    continue
                self.positions += positions
                for (_, future), position in zip(batch, positions, strict=True):
                    future.set_result(position)
        finally:
            self._task = None


async def erase_subject(
    config: Mapping[str, Any] | str | os.PathLike[str] | Config,
    *,
    subject: str,
    namespace: str | None = None,
    dry_run: bool = False,
    keys: KeyProvider | None = None,
    agent: str | None = None,
    runtime: Runtime | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    request: str | None = None,
) -> Receipt:
    """Erase everything about `subject` in the namespace (see the module doc); its receipt.

    `keys` defaults to the provider the config's `encryption` middleware uses (HELIX_KEY_STORE); the log,
    the views and the keys are `runtime`'s (by default the running loop's). `timeout`: how long the
    check waits for each view to apply the erasure. Raises `InvalidInput` for a bad subject or namespace.
    """
    cfg = config if isinstance(config, Config) else load_config(config, agent=agent)
    ns = names.concrete_namespace(namespace or cfg.memory.namespace)
    subject = check_subject(subject)
    request = request or f"er-{uuid.uuid4().hex[:16]}"
    receipt_session = names.check_session_id(RECEIPTS + request, "request")
    runtime = runtime or default_runtime()
    encrypted = "encryption" in cfg.middleware or keys is not None
    opener_keys = keys if keys is not None else runtime.keys() if encrypted else None
    shredder: KeyProvider = opener_keys if opener_keys is not None and shreddable(opener_keys) else _NoKeys()
    views = tuple(dict.fromkeys(p.view.name for p in cfg.memory.parts))
    facts_views = tuple(dict.fromkeys(p.view.name for p in cfg.memory.parts if isinstance(p.view, Facts)))
    opener = Opener(ns, opener_keys)
    clock = [time.monotonic()]
    seconds: dict[str, float] = {}

    def lap(what: str) -> None:
        now = time.monotonic()
        seconds[what] = round(now - clock[0], 3)
        clock[0] = now

    async with runtime.backend(cfg.log) as backend:
        found = await scan(backend.log, ns, subject, views, opener)
        owned, named = found.owned(), found.named()
        fact_ids = found.fact_ids() if facts_views else []  # no facts view: no fact to take out of one
        texts = {sid: _stored_texts(found.sessions[sid].records, offsets) for sid, offsets in named.items()}
        forgotten = _forgettings(ns, named, texts, fact_ids, views, facts_views, request, receipt_session)
        doc: dict[str, Any] = {
            "subject": subject,
            "request": request,
            "namespace": ns,
            "dry_run": dry_run,
            "at": datetime.now(UTC).isoformat(),
            "sessions": owned,
            "messages": named,
            "facts": fact_ids,
        }
        if dry_run:  # what would go; nothing is written
            unsealed, live = await _keys_of(found, owned, shredder)
            _shredding(doc, owned, unsealed)
            doc["erased"] = [s for s in owned if live[s] or not _erased(found.sessions[s].records)]
            doc["key_ids"] = sorted(k for s in owned for k in live[s])
            doc.update(_effects(cfg, doc["erased"], named, doc["facts"], len(forgotten)))
            doc.update(undecodable=found.undecodable, log=_log_note(encrypted, shredder, doc), verification=None)
            return Receipt(doc)
        lap("scan")
        batch = _Batch(backend.append_many)
        results = await _shred(found, owned, ns, shredder, request, batch)
        # What shredding cannot reach: `erase` counted it for a session never erased before; else count it.
        first = {r.session_id: r.unshreddable for r in results if not _ever_erased(found.sessions[r.session_id])}
        unsealed = (await _keys_of(found, [s for s in owned if s not in first], shredder))[0]
        _shredding(doc, owned, {**unsealed, **first})
        await batch.many(forgotten)
        written: dict[int, int] = {}
        for p in batch.positions:
            written[p.partition] = max(p.offset, written.get(p.partition, -1))
        if any(registry.kind(p.store).exported for p in cfg.memory.parts):
            for r in results:
                if not r.already_erased:
                    await _export(cfg, r.session_id, runtime)
        doc["erased"] = [r.session_id for r in results if not r.already_erased]
        doc["key_ids"] = sorted({k for r in results for k in r.erased_keys})
        doc.update(_effects(cfg, doc["erased"], named, doc["facts"], len(forgotten)))
        lap("erase")
        verifier = Verifier(ns, subject, owned, found.named(forgotten=True), opener)
        await verifier.views(backend, cfg, written, timeout)
        await verifier.log({s: found.sessions[s].records for s in owned}, encrypted)
        lap("verify")
        doc.update(undecodable=found.undecodable, log=_log_note(encrypted, shredder, doc))
        doc["verification"] = verifier.result()
        doc["seconds"] = seconds
        position = await backend.append(Event(ns, receipt_session, SubjectErased(subject, request, _on_log(doc))))
        doc["receipt_position"] = {"topic": position.topic, "partition": position.partition, "offset": position.offset}
    return Receipt(doc)


async def _keys_of(
    found: Found, owned: Sequence[str], shredder: KeyProvider
) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Per session of the subject: what it holds on the log that no key of the store sealed (plaintext, or
    keys derived from the master: shredding cannot reach it), and its keys not destroyed yet."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(sid: str) -> tuple[int, list[str]]:
        async with gate:
            rows: list[KeyRow] = await shredder.rows(found.namespace, sid)  # type: ignore[attr-defined]
        ids = {r.key_id for r in rows}
        unsealed = sum(held(r.event.payload, ids)[1] for r in found.sessions[sid].records)
        return unsealed, sorted(r.key_id for r in rows if not r.erased)

    pairs = dict(zip(owned, await asyncio.gather(*(one(s) for s in owned)), strict=True))
    return {s: u for s, (u, _) in pairs.items()}, {s: k for s, (_, k) in pairs.items()}


def _erased(records: Sequence[Record]) -> bool:
    return bool(records) and isinstance(records[-1].event.payload, SessionErased)


def _ever_erased(seen: Seen) -> bool:
    return seen.erased is not None


def _shredding(doc: dict[str, Any], owned: Sequence[str], unsealed: Mapping[str, int]) -> None:
    doc["shredded"] = [s for s in owned if not unsealed.get(s)]
    doc["not_shredded"] = [s for s in owned if unsealed.get(s)]


async def _shred(
    found: Found, owned: Sequence[str], namespace: str, shredder: KeyProvider, request: str, batch: _Batch
) -> list[ForgetResult]:
    """`forget`'s step on each of the subject's sessions, over the records the scan read, many at once."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(sid: str) -> ForgetResult:
        records = found.sessions[sid].records

        async def read(*args: Any, **kwargs: Any) -> Any:
            for record in records:
                yield record

        async with gate:
            return await erase(read, batch.append, shredder, namespace, sid, request, True, "messages", "session")

    return list(await asyncio.gather(*(one(s) for s in owned)))


def _stored_texts(records: Sequence[Record], offsets: Sequence[int]) -> list[str]:
    """The texts of the messages added at `offsets`, as the log (and so every view) holds them: sealed, with
    encryption on. A session view names a message by its text (`content_id`)."""
    wanted = set(offsets)
    return [said.content for r in records if r.position.offset in wanted and (said := said_in(r)) is not None]


def _forgettings(
    namespace: str,
    named: Mapping[str, Sequence[int]],
    texts: Mapping[str, Sequence[str]],
    fact_ids: Sequence[str],
    views: tuple[str, ...],
    facts_views: tuple[str, ...],
    request: str,
    receipt_session: str,
) -> list[Event]:
    """The `MemoryForgotten` events: one per other session (per `MAX_OFFSETS` of its messages; namespace views
    take them by offset, session views by text), then the facts."""
    events = []
    for sid, offsets in named.items():
        ids = tuple(sorted({content_id(t) for t in texts.get(sid, ())}))
        for i in range(0, len(offsets), MAX_OFFSETS):
            chunk = tuple(offsets[i : i + MAX_OFFSETS])
            said = ids if i == 0 else ()
            events.append(Event(namespace, sid, MemoryForgotten(views, POLICY, request, offsets=chunk, ids=said)))
    for i in range(0, len(fact_ids), MAX_OFFSETS):
        ids = tuple(fact_ids[i : i + MAX_OFFSETS])
        events.append(Event(namespace, receipt_session, MemoryForgotten(facts_views, POLICY, request, ids=ids)))
    return events


def _effects(
    cfg: Config,
    erased: list[str],
    named: Mapping[str, Sequence[int]],
    fact_ids: list[str],
    forgotten: int,
) -> dict[str, Any]:
    """What leaves each view, and the events that say so."""
    messages = sum(len(o) for o in named.values())
    views: dict[str, dict[str, Any]] = {}
    for part in cfg.memory.parts:
        view = part.view
        entry: dict[str, Any] = {"kind": part.type, "sessions": erased, "messages": 0, "ids": []}
        if isinstance(view, (LongTerm, Vector, View)):
            entry["messages"] = messages  # a session view by the messages' texts
        elif isinstance(view, Facts):
            entry["ids"] = fact_ids
        views.setdefault(view.name, entry)
    return {"views": views, "events": {"SessionErased": len(erased), "MemoryForgotten": forgotten}}


def _log_note(encrypted: bool, shredder: KeyProvider, doc: Mapping[str, Any]) -> str:
    """What the log keeps, said plainly."""
    others = "messages naming the subject in other sessions stay on the log as written (their sessions keep their keys)"
    if not encrypted:
        return f"plaintext kept: encryption off, the log keeps every message as written; {others}"
    if isinstance(shredder, _NoKeys):
        return (
            "plaintext kept for whoever holds the master key: keys derived from it cannot be destroyed "
            f"(set HELIX_KEY_STORE); {others}"
        )
    kept = len(doc["not_shredded"])
    tail = f"; {kept} of them hold messages no key of the store sealed, readable on the log" if kept else ""
    return f"sealed: the subject's sessions stay on the log under destroyed keys{tail}; {others}"


def _on_log(doc: dict[str, Any]) -> str:
    """The receipt as the log keeps it: whole, or past `LOG_RECEIPT` bytes without its long lists (and the
    SHA-256 of the whole one), keeping the sessions an idempotent rerun reads back."""
    text = json.dumps(doc, sort_keys=True)
    if len(text.encode()) <= LOG_RECEIPT:
        return text
    short = {k: v for k, v in doc.items() if k not in ("messages", "views", "undecodable")}
    short.update(abridged=True, sha256=hashlib.sha256(text.encode()).hexdigest())
    return json.dumps(short, sort_keys=True)

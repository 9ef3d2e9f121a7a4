"""Erasure on an immutable log, by crypto-shredding: `forget` a session.

The log is append-only, so an erasure cannot remove events. Instead every session's content is
sealed with its own data key (`helix_es.keystore`), and `forget`:

1. reads the session's events from the log and checks that each message is sealed with one of
   the session's keys in the key store (plaintext, or keys derived from the master, cannot be
   shredded: it refuses unless told to go on anyway);
2. destroys the session's data keys in the key store (from then on nobody can open that content,
   on the log, in views, in backups of the log);
3. appends a `SessionErased` event for the session, which every view folds: session views
   empty the session like a clear, long-term and vector views delete its entries.

It is idempotent: a session whose keys are all destroyed and whose last event is its erasure is
left as it is. A crash between 2 and 3 is finished by running it again.

For audits: `is_erased(records)` and `erasure_of(records)` read a session's records from the
log; `erased_by(record, erasure)` tells whether a record's content was shredded by it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from helix_es.client.checkpoint_seal import UNSEALED, key_id, values_of
from helix_es.client.encryption import KeyProvider, envelope_key_id, sealable
from helix_es.client.keys import ENV_STORE, shreddable
from helix_es.client.memory import JsonExport
from helix_es.client.open import open_memory
from helix_es.client.runtime import Runtime, default_runtime
from helix_es.config import Config, load_config
from helix_es.log.check import Skipped
from helix_es.model import names
from helix_es.model.errors import HelixError
from helix_es.model.events import (
    CheckpointSaved,
    Event,
    FactAsserted,
    FactRetracted,
    ItemPut,
    MessageAdded,
    Payload,
    Position,
    Record,
    SessionErased,
    WritesSaved,
)
from helix_es.model.message import Message
from helix_es.stores import registry
from helix_es.stores.ports import KeyRow


class NotShreddable(HelixError):
    """`forget` cannot erase this session by destroying keys; nothing was changed."""


@dataclass(frozen=True)
class Erasure:
    """A session's erasure as the log records it."""

    position: Position
    at: datetime
    reason: str | None
    key_ids: tuple[str, ...]


def erasure_of(records: Iterable[Record]) -> Erasure | None:
    """The newest erasure among one session's records (log order), or None if it was never forgotten."""
    found = None
    for r in records:
        if isinstance(r.event.payload, SessionErased):
            found = Erasure(r.position, r.event.timestamp, r.event.payload.reason, r.event.payload.key_ids)
    return found


def is_erased(records: Iterable[Record]) -> bool:
    """Whether one session's records hold an erasure: its content before that is shredded."""
    return erasure_of(records) is not None


def erased_by(record: Record, erasure: Erasure) -> bool:
    """Whether `record` (of the erased session) was written before `erasure` (its own partition, lower offset)."""
    p, at = record.position, erasure.position
    return (p.topic, p.partition) != (at.topic, at.partition) or p.offset < at.offset


@dataclass(frozen=True)
class ForgetResult:
    namespace: str
    session_id: str
    erased_keys: tuple[str, ...]  # destroyed by this call
    events: int  # the session's events on the log before this call (they stay there, sealed)
    messages: int  # messages since the previous erasure (all of them, if none)
    unshreddable: int  # of those, not sealed with a key of the store: plaintext, or a key derived from the master
    position: Position | None  # the SessionErased appended; None when the session was already erased
    already_erased: bool
    # Records naming the session that the projector dead-letters (helix_es.log.check): passed over, so
    # neither counted in `events` nor checked for sealing (no view ever held them).
    skipped: int = 0

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["position"] = None if self.position is None else dataclasses.asdict(self.position)
        out["erased_keys"] = list(self.erased_keys)
        return out


def _sealed_by(message: Message, key_ids: set[str]) -> bool:
    """Every field that holds text is an envelope sealed by one of `key_ids`."""
    # "" holds nothing to erase
    return all(not value or envelope_key_id(value) in key_ids for value in sealable(message))


def _keys_for(cfg: Config, keys: KeyProvider | None, runtime: Runtime) -> KeyProvider:
    if keys is None:
        if "encryption" not in cfg.middleware:
            raise NotShreddable(
                "the config lists no encryption middleware (memory_middleware: [encryption]), so the session's "
                "messages are on the log in plaintext; an append-only log cannot erase plaintext. Turn encryption "
                f"on with {ENV_STORE}=postgres|redis|file for personal data, or pass keys= if you wrap memories in "
                "Python yourself"
            )
        keys = runtime.keys()
    if not shreddable(keys):
        raise NotShreddable(
            f"{type(keys).__name__} cannot destroy one session's key: "
            + (
                "every session key is derived from the master key, so it can always be derived again. "
                if type(keys).__name__ == "DerivedSessionKeys"
                else ""
            )
            + f"forget needs a key store: set {ENV_STORE}=postgres|redis|file (helix_es.keystore) before the "
            "session is written"
        )
    return keys


async def forget(
    config: Mapping[str, Any] | str | os.PathLike[str] | Config,
    *,
    session_id: str,
    namespace: str | None = None,
    reason: str | None = None,
    keys: KeyProvider | None = None,
    allow_unshreddable: bool = False,
    agent: str | None = None,
    runtime: Runtime | None = None,
) -> ForgetResult:
    """Erase one session: destroy its data keys, then append `SessionErased` so every view drops it.

    `keys` defaults to the provider the config's `encryption` middleware uses (HELIX_KEY_STORE), the
    log and keys are `runtime`'s (by default the running loop's).
    Raises `NotShreddable` (changing nothing) if the provider cannot destroy keys, or if messages
    of the session since its last erasure are not sealed by its keys in the store, unless
    `allow_unshreddable` (then views still drop them, but the log keeps them readable).
    """
    cfg = config if isinstance(config, Config) else load_config(config, agent=agent)
    ns = names.concrete_namespace(namespace or cfg.memory.namespace)
    sid = names.check_session_id(session_id)
    runtime = runtime or default_runtime()
    provider = _keys_for(cfg, keys, runtime)
    async with runtime.backend(cfg.log) as backend:
        result = await erase(
            backend.log.read, backend.append, provider, ns, sid, reason, allow_unshreddable, "messages", "session"
        )
    if not result.already_erased and any(registry.kind(p.store).exported for p in cfg.memory.parts):
        await _export(cfg, sid, runtime)
    return result


def held(payload: Payload, store_ids: set[str]) -> tuple[int, int]:
    """What an event holds that an erasure must reach, and how much of it no key of the store sealed."""
    if isinstance(payload, MessageAdded):
        return 1, int(not _sealed_by(payload.message, store_ids))
    if isinstance(payload, (CheckpointSaved, WritesSaved)):  # a LangGraph thread's values
        values = [v for v in values_of(payload) if v.type not in UNSEALED]
        return len(values), sum(key_id(v) not in store_ids for v in values)
    if isinstance(payload, ItemPut | FactAsserted | FactRetracted):  # a store's items, people's facts: never sealed
        return 1, 1
    # The rest: ids, positions, vectors, and a model's text derived from the turns (SummaryRecorded,
    # FactsExtracted), which the turns' own check stands for.
    return 0, 0


async def erase(
    read: Callable[..., AsyncIterator[Record]],
    append: Callable[[Event], Awaitable[Position]],
    provider: KeyProvider,
    namespace: str,
    session_id: str,
    reason: str | None,
    allow_unshreddable: bool,
    what: str,
    subject: str,
) -> ForgetResult:
    """Read the session's log, refuse (changing nothing) if it holds what its keys did not seal, else
    destroy its keys and append its `SessionErased`. `what` and `subject` name them in the refusal."""
    rows = await provider.rows(namespace, session_id)  # type: ignore[attr-defined]
    store_ids = {r.key_id for r in rows}
    events, count, unshreddable = 0, 0, 0
    last: Record | None = None
    listed: set[str] = set()  # key ids earlier erasures already name
    bad: list[Skipped] = []
    async for record in read(namespace, session_id=session_id, on_bad=bad.append):
        events += 1
        last = record
        payload = record.event.payload
        if isinstance(payload, SessionErased):
            count, unshreddable = 0, 0  # checked by that erasure
            listed.update(payload.key_ids)
        else:
            n, unsealed = held(payload, store_ids)
            count, unshreddable = count + n, unshreddable + unsealed
    if erased_already(rows, last):
        return ForgetResult(namespace, session_id, (), events, 0, 0, None, True, len(bad))
    if unshreddable and not allow_unshreddable:
        raise NotShreddable(
            f"{unshreddable} of the {count} {what} of {namespace}/{session_id} on the log are not sealed with a key "
            "of the key store (written without encryption, or with a key derived from the master): destroying "
            "keys cannot erase them. Nothing was changed. Pass allow_unshreddable=True (--allow-unshreddable) to "
            f"drop the {subject} from every view anyway; the log keeps them readable"
        )
    erased, position = await shred(provider, rows, listed, namespace, session_id, reason, append)
    return ForgetResult(namespace, session_id, erased, events, count, unshreddable, position, False, len(bad))


def erased_already(rows: list[KeyRow], last: Record | None) -> bool:
    """Every key destroyed and the session's last event its erasure: nothing left to do."""
    live = [r for r in rows if not r.erased]
    return not live and last is not None and isinstance(last.event.payload, SessionErased)


async def shred(
    provider: KeyProvider,
    rows: list[KeyRow],
    listed: set[str],
    namespace: str,
    session_id: str,
    reason: str | None,
    append: Callable[[Event], Awaitable[Position]],
) -> tuple[tuple[str, ...], Position]:
    """Destroy the session's keys, then append its `SessionErased` naming the keys no earlier erasure named."""
    erased = await provider.erase(namespace, session_id)  # type: ignore[attr-defined]
    gone = tuple(sorted(({r.key_id for r in rows if r.erased} | set(erased)) - listed))
    position = await append(Event(namespace, session_id, SessionErased(reason, gone)))
    return tuple(sorted(erased)), position


async def _export(cfg: Config, session_id: str, runtime: Runtime) -> None:
    """store: file: rewrite the session's JSON export, which now holds nothing."""
    async with open_memory(dataclasses.replace(cfg, middleware=()), session_id=session_id, runtime=runtime) as mem:
        if isinstance(mem, JsonExport):
            await mem.export()

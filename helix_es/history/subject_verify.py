"""The check after a subject's erasure (`helix_es.history.subject_erasure`): every view, then the log.

Each view of the config is read for the namespace from its store, once it has applied the erasure's
events (on Kafka: once `helix-es project` has folded them, waited for up to `timeout` seconds):

- a session view (conversation, windows, summary, smart) must hold nothing of the subject's sessions
  and no message of another session naming the subject (the erasure names those by their text: a
  session view keeps no positions), summaries naming the subject included (the erasure names them
  by their text too);
- long-term rows, vector entries and facts must hold nothing of the subject's sessions and no
  message (fact) naming the subject; a facts view's pending turns (the extractor's queue) naming the
  subject in other sessions are counted as `kept` until the extractor has read them;
- other view kinds (LangGraph items and checkpoints) are listed as not scanned.

Then the log, with encryption on: no message of the subject's sessions written before its erasure may
open any more (its keys are destroyed). Without encryption the log keeps plaintext, and says so.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from helix_es.client.backend import Backend
from helix_es.client.encryption import EncryptionError, KeyErased
from helix_es.client.wait import poll
from helix_es.config import Config, MemoryConfig
from helix_es.history.subject_scan import Opener, naming, speaks_of
from helix_es.model import names
from helix_es.model.events import MessageAdded, Record, SessionErased
from helix_es.model.facts import FactsAsk
from helix_es.model.message import Message, decode_json
from helix_es.model.recall import Recall
from helix_es.projection.facts import facts_rows_of
from helix_es.projection.long_term import LongTermRows
from helix_es.projection.protocol import Projection
from helix_es.projection.session import SessionProjection
from helix_es.projection.vector import VectorProjection
from helix_es.stores.ports import SessionKey
from helix_es.stores.ports.vector import RankAsk
from helix_es.views.base import View
from helix_es.views.facts import Facts
from helix_es.views.long_term import LongTerm
from helix_es.views.vector import Vector

T = TypeVar("T")
SHOWN = 5  # sessions named in one failure line
READ_BATCH = 500  # sessions read from a session view in one round trip


class Verifier:
    """One erasure's check: the subject, its sessions, the other sessions' messages naming it."""

    def __init__(
        self, namespace: str, subject: str, owned: Sequence[str], named: Mapping[str, Sequence[int]], opener: Opener
    ) -> None:
        self.namespace, self.subject, self.opener = namespace, subject, opener
        self.owned, self.named = set(owned), dict(named)
        self.names_it = naming(subject)
        self.failures: list[str] = []
        self.scanned: dict[str, Any] = {}
        self._seen: dict[tuple[str, Message], Message | None] = {}  # (session, stored) -> opened

    async def views(self, backend: Backend, cfg: Config, written: Mapping[int, int], timeout: float) -> None:
        """Read every view of `cfg` once it has applied the offsets `written` (partition -> last offset)."""
        topic = names.topic(self.namespace, backend.log.topic_prefix)
        seen: set[str] = set()
        for part in cfg.memory.parts:
            name = part.view.name
            if name in seen:
                continue
            seen.add(name)
            started = time.monotonic()
            projection = await backend.attach(part, self.namespace)
            await backend.current(projection, self.namespace)
            applied = await _applied(projection, topic, written, timeout)
            waited = round(time.monotonic() - started, 3)
            if not applied:
                self.failures.append(
                    f"{name}: has not applied the erasure within {timeout:g} s (is `helix-es project` running?)"
                )
                self.scanned[name] = {"kind": part.type, "applied": False, "waited_s": waited}
                continue
            found = await self._view(part, projection)
            read = round(time.monotonic() - started - waited, 3)
            self.scanned[name] = {"kind": part.type, "applied": True, **found, "waited_s": waited, "read_s": read}

    async def _view(self, part: MemoryConfig, projection: Projection) -> dict[str, Any]:
        view = part.view
        if isinstance(view, View):
            return await self._sessions(view.name, projection)
        if isinstance(view, LongTerm):
            rows = await _inner(projection, LongTermRows).rows(self.namespace)
            held = [(r["session_id"], decode_json(r["message"])) for r in rows]
            return await self._held(view.name, "rows", held)
        if isinstance(view, Vector):
            vectors = _inner(projection, VectorProjection)
            count = await vectors.store.count(vectors.name, self.namespace)
            ask = RankAsk(Recall(" ", max(count, 1)), max(count, 1), substring="")
            ranking = await vectors.store.rank(vectors.name, self.namespace, ask, None)
            found = [] if ranking is None else list(ranking.found.values())
            return await self._held(view.name, "entries", [(f.session_id, f.message) for f in found])
        if isinstance(view, Facts):
            return await self._facts(view.name, projection)
        return {"scanned": False, "why": f"a {part.type} view holds no messages of sessions"}

    async def _sessions(self, name: str, projection: Projection) -> dict[str, Any]:
        owned, others = sorted(self.owned), sorted(self.named)
        held = await _read_sessions(projection, self.namespace, owned + others)
        left = [s for s in owned if held[s]]
        if left:
            self.failures.append(f"{name}: still holds {len(left)} of the subject's sessions ({_some(left)})")
        naming = 0
        for sid in others:
            naming += sum(1 for m in await self._opened(sid, held[sid]) if m is not None and self._names(m))
        if naming:
            self.failures.append(f"{name}: {naming} messages of other sessions name the subject")
        return {"sessions": len(owned) + len(others), "subject_sessions_left": len(left), "naming": naming}

    async def _held(self, name: str, what: str, held: list[tuple[str, Message]]) -> dict[str, Any]:
        by_session: dict[str, list[Message]] = {}
        for sid, message in held:
            by_session.setdefault(sid, []).append(message)
        theirs = sorted(s for s in by_session if s in self.owned)
        naming_it, unreadable = 0, 0
        for sid, messages in by_session.items():
            if sid in self.owned:
                continue
            for opened in await self._opened(sid, messages):
                if opened is None:
                    unreadable += 1
                elif self._names(opened):
                    naming_it += 1
        if theirs:
            count = sum(len(by_session[s]) for s in theirs)
            self.failures.append(f"{name}: {count} {what} of the subject's sessions ({_some(theirs)})")
        if naming_it:
            self.failures.append(f"{name}: {naming_it} {what} of other sessions name the subject")
        return {what: len(held), "of_subject_sessions": sum(len(by_session[s]) for s in theirs), "naming": naming_it}

    async def _facts(self, name: str, projection: Projection) -> dict[str, Any]:
        rows = facts_rows_of(projection)
        if rows is None:
            return {"scanned": False, "why": "not a facts view kept as rows"}
        facts = await rows.facts(self.namespace, FactsAsk(history=True)) or []
        theirs = [f for f in facts if f.session_id in self.owned]
        about = [f for f in facts if self.names_it(f.subject) or self.names_it(f.value)]
        if theirs:
            self.failures.append(f"{name}: {len(theirs)} facts from the subject's sessions")
        if about:
            self.failures.append(f"{name}: {len(about)} facts about the subject ({_some([f.id for f in about])})")
        pending = await rows.pending(self.namespace) or []
        queued = [r for r in pending if r["session_id"] in self.owned]
        if queued:
            self.failures.append(f"{name}: {len(queued)} pending turns of the subject's sessions")
        kept = 0
        for r in pending:
            if r["session_id"] not in self.owned:
                (opened,) = await self._opened(
                    r["session_id"], [Message(r["role"], r["content"], name=r["name"] or None)]
                )
                kept += opened is not None and self._names(opened)
        return {"facts": len(facts), "of_subject_sessions": len(theirs), "about": len(about), "kept": kept}

    async def log(self, records: Mapping[str, Sequence[Record]], encrypted: bool) -> None:
        """With encryption, no message the erasure covered may open (`records`: the subject's sessions')."""
        if not encrypted:
            self.scanned["log"] = {"checked": False, "why": "plaintext kept: encryption off"}
            return
        covered, readable = 0, []
        for sid, recs in records.items():
            erasure = max((r.position for r in recs if isinstance(r.event.payload, SessionErased)), default=None)
            before = [
                r.event.payload.message
                for r in recs
                if isinstance(r.event.payload, MessageAdded) and (erasure is None or r.position.offset < erasure.offset)
            ]
            covered += len(before)
            opened = await self._opened(sid, before)
            if any(m is not None and _says(m) for m in opened):
                readable.append(sid)
        if readable:
            self.failures.append(
                f"log: messages of {len(readable)} of the subject's sessions still open ({_some(readable)})"
            )
        self.scanned["log"] = {"checked": True, "messages": covered, "readable_sessions": len(readable)}

    def result(self) -> dict[str, Any]:
        return {"passed": not self.failures, "scanned": self.scanned, "failures": self.failures}

    def _names(self, message: Message) -> bool:
        return speaks_of(message, self.subject, self.names_it)

    async def _opened(self, sid: str, messages: Sequence[Message]) -> list[Message | None]:
        """Each message opened, or None: its key is destroyed, or nothing opens it. A message several views
        hold is opened once (the check runs after the shredding: what opens now opens for every view)."""
        new = [m for m in messages if (sid, m) not in self._seen]
        if new:
            opener = await self.opener.session(sid, new)
            for m in new:
                try:
                    self._seen[(sid, m)] = opener(m)
                except (KeyErased, EncryptionError):
                    self._seen[(sid, m)] = None
        return [self._seen[(sid, m)] for m in messages]


def _says(message: Message) -> bool:
    """Whether an opened message holds any text."""
    return bool(message.content or any(c.arguments for c in message.tool_calls) or any(message.metadata.values()))


def _some(items: Sequence[str]) -> str:
    shown = ", ".join(items[:SHOWN])
    return shown + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def _find(projection: object, kind: type[T]) -> T | None:
    """The projection of `kind` behind an alias's current target and its idempotency keys, if any."""
    for _ in range(4):
        if isinstance(projection, kind):
            return projection
        projection = getattr(projection, "current", None) or getattr(projection, "inner", None)
    return None


def _inner(projection: object, kind: type[T]) -> T:
    found = _find(projection, kind)
    if found is None:
        raise TypeError(f"no {kind.__name__} behind the projection")
    return found


async def _read_sessions(projection: Projection, namespace: str, sessions: Sequence[str]) -> dict[str, list[Message]]:
    """What a session view holds of each session: many sessions a round trip from its store."""
    inner = _find(projection, SessionProjection)
    out: dict[str, list[Message]] = {}
    for start in range(0, len(sessions), READ_BATCH):
        keys = [SessionKey(namespace, s) for s in sessions[start : start + READ_BATCH]]
        if inner is not None:
            snapshots = await inner.store.load(inner.view, keys)
            out.update((k.session_id, inner.view.render(snapshots[k].state)) for k in keys)
        else:
            for key in keys:
                out[key.session_id] = await projection.get(key, None) or []
    return out


async def _applied(projection: Projection, topic: str, written: Mapping[int, int], timeout: float) -> bool:
    """Wait until the view's checkpoint covers every offset written (partition -> offset)."""

    async def look() -> bool | None:
        for partition, offset in written.items():
            done = await projection.checkpoint(topic, partition)
            if done is None or done < offset:
                return None
        return True

    return bool(await poll(look, timeout))

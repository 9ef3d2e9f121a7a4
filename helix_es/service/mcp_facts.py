"""The facts tools of `helix-es mcp` (`service.facts`): `get_facts`, `assert_fact`, `retract_fact`.

A namespace's facts come from its memory's facts view and span its sessions, so the tools take
no session id; corrections are recorded in the namespace's session `facts`, whose memory also
answers `get_facts` (a read shows the server's own corrections). A memory without a facts view is
a tool error naming `memory`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field
from typing_extensions import TypedDict

from helix_es.client.protocol import Memory
from helix_es.model.errors import HelixError, InvalidInput
from helix_es.model.events import Position
from helix_es.service import facts as knowledge

T = TypeVar("T")

Namespace = Annotated[
    str | None,
    Field(description="The tenant or agent the memory belongs to; omit it for the server's default namespace."),
]


class FactsOut(TypedDict):
    """Each fact: id, subject, predicate, value, valid_from/valid_to (when it held in the world), known_from/
    known_to (when the memory held it), source (session_id and log positions) and model (null: a person)."""

    namespace: str
    facts: list[dict[str, Any]]


class CorrectionOut(TypedDict):
    """Where the correction landed on the log (in the namespace's session `facts`)."""

    namespace: str
    session_id: str
    topic: str
    partition: int
    offset: int


class FactTools:
    """Mixed into `MemoryTools`, which supplies `namespace` (checked) and `memory` (per namespace and session)."""

    namespace: Callable[[str | None], str]
    memory: Callable[[str, str], Awaitable[Memory]]

    async def _with(self, namespace: str | None, act: Callable[[Memory], Awaitable[T]]) -> tuple[str, T]:
        ns = self.namespace(namespace)
        try:
            return ns, await act(await self.memory(ns, knowledge.FACTS_SESSION))
        except InvalidInput as exc:
            raise ToolError(f"{exc.field}: {exc.problem}") from None
        except (HelixError, OSError) as exc:  # the log or a store failed: the model may retry later
            raise ToolError(str(exc)) from None

    def _written(self, ns: str, position: Position) -> CorrectionOut:
        return {
            "namespace": ns,
            "session_id": knowledge.FACTS_SESSION,
            "topic": position.topic,
            "partition": position.partition,
            "offset": position.offset,
        }

    async def get_facts(
        self,
        namespace: Namespace = None,
        subject: Annotated[str | None, Field(description="Optional: only this subject (any case).")] = None,
        predicate: Annotated[
            str | None, Field(description="Optional: only this predicate (lives_in, works_at, likes, ...).")
        ] = None,
        as_of: Annotated[
            str | None,
            Field(
                description="Optional valid time, ISO-8601 with an offset: what held in the world then (default now)."
            ),
        ] = None,
        known_as_of: Annotated[
            str | None,
            Field(
                description="Optional known time, ISO-8601 with an offset: as the memory knew it then (default now)."
            ),
        ] = None,
        history: Annotated[
            bool, Field(description="Every fact of the subject and predicate, superseded and retracted ones too.")
        ] = False,
    ) -> FactsOut:
        """The facts the memory learned from the namespace's conversations (and people's corrections): by default
        those holding now; each with when it held, when the memory knew it, its source and its id."""
        asked = {"subject": subject, "predicate": predicate, "as_of": as_of, "known_as_of": known_as_of}
        ns, found = await self._with(namespace, lambda m: knowledge.read(m, {**asked, "history": history}))
        return {"namespace": ns, "facts": [f.to_json() for f in found]}

    async def assert_fact(
        self,
        subject: Annotated[str, Field(description="Who or what the fact is about (a person's name, 'user').")],
        predicate: Annotated[str, Field(description="The relation, e.g. lives_in, works_at, likes (snake_case).")],
        value: Annotated[str, Field(description="The value, e.g. Porto.")],
        valid_from: Annotated[
            str | None,
            Field(description="Optional: since when it holds in the world, ISO-8601 with an offset (default now)."),
        ] = None,
        namespace: Namespace = None,
    ) -> CorrectionOut:
        """State a fact as a person: it outranks what the model drew from earlier turns, and a new value of a
        single-valued predicate supersedes the old one (which stays in history)."""
        body = {"subject": subject, "predicate": predicate, "value": value, "valid_from": valid_from}
        ns, position = await self._with(namespace, lambda m: knowledge.assert_one(m, body))
        return self._written(ns, position)

    async def retract_fact(
        self,
        fact_id: Annotated[str, Field(description="The fact's id, as get_facts lists it.", min_length=1)],
        reason: Annotated[str | None, Field(description="Optional: why, kept on the log (no personal data).")] = None,
        namespace: Namespace = None,
    ) -> CorrectionOut:
        """Take a fact back: it leaves the current facts (history keeps it, closed), and the model saying the
        same again from earlier turns cannot bring it back."""
        ns, position = await self._with(namespace, lambda m: knowledge.retract_one(m, fact_id, reason))
        return self._written(ns, position)

"""`helix-es mcp`: the memory over the Model Context Protocol (stdio), for an LLM agent's host.

Five tools, each taking `namespace` (optional: the config's `memory.namespace`) and `session_id`:
`add_memory`, `get_memory`, `search_memory`, `clear_memory` and `audit_session`; and three for a
facts view, namespace-wide (`mcp_facts`): `get_facts`, `assert_fact` and `retract_fact`. One memory
per (namespace, session), opened on first use by a `SessionMemoryManager` per namespace and
kept until the server stops, so a read shows the server's own earlier writes
(read-your-writes). `namespaces` (names or globs) restricts which namespaces the tools may
touch; any other is refused before anything is read or written. Bad input is a tool error
(`isError`) whose text starts with the field it names (`role: ...`); nothing is written.

On stdio, stdout carries only protocol messages (the `mcp` transport diverts fd 1 to stderr
while it serves); logs go to stderr. The server returns when the client closes stdin.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Annotated, Any, Literal, NotRequired

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field
from typing_extensions import TypedDict

from helix_es._version import __version__
from helix_es.client.protocol import Memory
from helix_es.client.runtime import Runtime
from helix_es.config import Config
from helix_es.history.audit import audit
from helix_es.model import names
from helix_es.model.errors import HelixError, InvalidInput
from helix_es.model.events import Position
from helix_es.model.message import Message
from helix_es.service import recall as recalls
from helix_es.service.mcp_facts import FactTools
from helix_es.service.messages import message_from, message_json
from helix_es.service.pool import Memories, check_namespace

log = logging.getLogger(__name__)

__all__ = ["MemoryTools", "build_server", "serve_stdio"]

INSTRUCTIONS = (
    "Event-sourced conversation memory. Each (namespace, session_id) is one conversation: add_memory "
    "appends a message, get_memory returns what the memory holds now (a view: a window, a summary, ...), "
    "search_memory finds messages by text, clear_memory empties it (the history stays on the log), and "
    "audit_session returns the session's full event history from the log. With a facts view, get_facts lists "
    "what the memory learned (subject, predicate, value, when it held and when it was known), assert_fact "
    "states a fact as a person and retract_fact takes one back. Omit namespace to use the server's default."
)


class PositionOut(TypedDict):
    """Where the write landed on the log."""

    namespace: str
    session_id: str
    topic: str
    partition: int
    offset: int


class MessagesOut(TypedDict):
    """Messages as JSON objects: role, content, and name, tool_calls, tool_call_id, metadata, occurred_at when set."""

    namespace: str
    session_id: str
    messages: list[dict[str, Any]]


class SearchOut(TypedDict):
    """The messages found, best first, and for a view that recalls the same as hits: each with its score,
    session_id, position (topic, partition, offset), occurred_at and, when asked, explain."""

    namespace: str
    session_id: str
    messages: list[dict[str, Any]]
    hits: NotRequired[list[dict[str, Any]]]


class ToolCallIn(TypedDict):
    """A call the assistant asked a tool to make."""

    id: str
    name: str
    arguments: str  # JSON text


Namespace = Annotated[
    str | None,
    Field(description="The tenant or agent the memory belongs to; omit it for the server's default namespace."),
]
SessionId = Annotated[
    str,
    Field(description="The conversation: every message of one conversation shares this id (no braces).", min_length=1),
]


def _refuse(exc: InvalidInput) -> ToolError:
    return ToolError(f"{exc.field}: {exc.problem}")


def _position(namespace: str, session_id: str, position: Position) -> PositionOut:
    return {
        "namespace": namespace,
        "session_id": session_id,
        "topic": position.topic,
        "partition": position.partition,
        "offset": position.offset,
    }


def _messages(namespace: str, session_id: str, messages: list[Message]) -> MessagesOut:
    return {
        "namespace": namespace,
        "session_id": session_id,
        "messages": [message_json(m) for m in messages],
    }


class MemoryTools(FactTools):
    """The memories the tools reach (`Memories`: a `SessionMemoryManager` per namespace), restricted to
    the namespaces this server may serve."""

    def __init__(
        self, config: Config, *, namespaces: Sequence[str] | None = None, runtime: Runtime | None = None
    ) -> None:
        self.config = config
        self.runtime = runtime  # the memories', audits' and erasures' (None: the loop's own)
        self.default_namespace = names.concrete_namespace(config.memory.namespace, "memory.namespace")
        allowed = tuple(namespaces) if namespaces else ()
        for pattern in allowed:
            names.check_namespace_pattern(pattern, "--namespaces")
        self.allowed = allowed
        self._matcher = names.namespace_matcher(allowed) if allowed else None
        self.memories = Memories(config, runtime=runtime)
        if self._matcher is not None and not self._matcher.fullmatch(self.default_namespace):
            log.warning("the default namespace %s is not served: a call must name a namespace", self.default_namespace)

    def namespace(self, namespace: str | None) -> str:
        """The namespace a call names (or the default), refused unless this server may serve it."""
        ns = self.default_namespace if namespace is None else namespace
        try:
            check_namespace(ns, self.config.log.topic_prefix)
        except InvalidInput as exc:
            raise _refuse(exc) from None
        if self._matcher is not None and not self._matcher.fullmatch(ns):
            raise ToolError(f"namespace: {ns!r} is not served by this MCP server (it serves {', '.join(self.allowed)})")
        return ns

    def config_for(self, namespace: str) -> Config:
        return self.memories.config_for(namespace)

    async def memory(self, namespace: str, session_id: str) -> Memory:
        try:
            return await self.memories.memory(namespace, session_id)
        except InvalidInput as exc:
            raise _refuse(exc) from None

    async def close(self) -> None:
        await self.memories.close()

    # -- the tools ------------------------------------------------------------------------

    async def add_memory(
        self,
        session_id: SessionId,
        role: Annotated[
            Literal["system", "user", "assistant", "tool"],
            Field(description="Who said it: system, user, assistant, or tool (a tool's result)."),
        ],
        content: Annotated[
            str,
            Field(description="The message text. Empty only for an assistant message that carries tool_calls."),
        ] = "",
        namespace: Namespace = None,
        name: Annotated[str | None, Field(description="Optional: the speaker's or the tool's name.")] = None,
        tool_calls: Annotated[
            list[ToolCallIn] | None,
            Field(description="Assistant messages only: the tool calls it asks for (id, name, arguments as JSON)."),
        ] = None,
        tool_call_id: Annotated[
            str | None, Field(description="Tool messages only (required there): the id of the call it answers.")
        ] = None,
        metadata: Annotated[
            dict[str, str] | None, Field(description="Optional string labels kept with the message.")
        ] = None,
        idempotency_key: Annotated[
            str | None,
            Field(description="Optional: a retry with the same key in this session is recorded once, not twice."),
        ] = None,
        occurred_at: Annotated[
            str | None,
            Field(
                description="Optional: when it was said, ISO-8601 with an offset (2024-05-01T12:00:00Z), "
                "for messages imported after the fact; absent: now."
            ),
        ] = None,
    ) -> PositionOut:
        """Append one message to a conversation's memory; returns where it landed on the log."""
        ns = self.namespace(namespace)
        try:
            message = message_from(
                {
                    "role": role,
                    "content": content,
                    "name": name,
                    "tool_calls": tool_calls,
                    "tool_call_id": tool_call_id,
                    "metadata": metadata,
                    "occurred_at": occurred_at,
                }
            )
            if idempotency_key is not None and not idempotency_key:
                raise InvalidInput("idempotency_key", "must not be empty: omit it for a write without one")
            memory = await self.memory(ns, session_id)
            position = await memory.add(message, idempotency_key=idempotency_key)
        except InvalidInput as exc:
            raise _refuse(exc) from None
        except (HelixError, OSError) as exc:  # the log or a store failed: the model may retry later
            raise ToolError(str(exc)) from None
        return _position(ns, session_id, position)

    async def get_memory(self, session_id: SessionId, namespace: Namespace = None) -> MessagesOut:
        """The messages a conversation's memory holds now, oldest first (what to put in the model's context)."""
        ns = self.namespace(namespace)
        try:
            memory = await self.memory(ns, session_id)
            return _messages(ns, session_id, await memory.get())
        except InvalidInput as exc:
            raise _refuse(exc) from None
        except (HelixError, OSError) as exc:
            raise ToolError(str(exc)) from None

    async def search_memory(
        self,
        session_id: SessionId,
        query: Annotated[str, Field(description="The text to look for.", min_length=1)],
        limit: Annotated[int, Field(description="At most this many messages.", ge=1, le=1000)] = 10,
        namespace: Namespace = None,
        sessions: Annotated[
            list[str] | None, Field(description="Optional: only messages of these conversations.")
        ] = None,
        after: Annotated[str | None, Field(description="Optional: only messages said after (ISO-8601).")] = None,
        before: Annotated[str | None, Field(description="Optional: only messages said before (ISO-8601).")] = None,
        explain: Annotated[bool, Field(description="Say what each ranker gave each hit.")] = False,
    ) -> SearchOut:
        """Messages that best answer `query`, best first; a view that recalls (vector, long-term) searches the
        whole namespace and answers hits with score, session, position and time."""
        ns = self.namespace(namespace)
        try:
            memory = await self.memory(ns, session_id)
            filters = {
                "sessions": sessions,
                "after": recalls.when(after, "after"),
                "before": recalls.when(before, "before"),
                "explain": explain,
            }
            try:
                found = await recalls.recall(memory, query, limit, filters)
            except InvalidInput as exc:
                if exc.field != "memory":
                    raise
                plain = _messages(ns, session_id, await memory.search(query, limit))  # a view that cannot recall
                return {"namespace": ns, "session_id": session_id, "messages": plain["messages"]}
            hits = recalls.hits_json(ns, session_id, found)["hits"]
            return {**_messages(ns, session_id, [h.message for h in found]), "hits": hits}
        except InvalidInput as exc:
            raise _refuse(exc) from None
        except (HelixError, OSError) as exc:
            raise ToolError(str(exc)) from None

    async def clear_memory(
        self,
        session_id: SessionId,
        namespace: Namespace = None,
        idempotency_key: Annotated[
            str | None, Field(description="Optional: a retry with the same key is recorded once.")
        ] = None,
    ) -> PositionOut:
        """Empty a conversation's memory from now on. Its history stays on the log (audit_session shows it)."""
        ns = self.namespace(namespace)
        try:
            if idempotency_key is not None and not idempotency_key:
                raise InvalidInput("idempotency_key", "must not be empty: omit it for a write without one")
            memory = await self.memory(ns, session_id)
            position = await memory.clear(idempotency_key=idempotency_key)
        except InvalidInput as exc:
            raise _refuse(exc) from None
        except (HelixError, OSError) as exc:
            raise ToolError(str(exc)) from None
        return _position(ns, session_id, position)

    async def audit_session(
        self,
        session_id: SessionId,
        namespace: Namespace = None,
        as_of: Annotated[
            str | None,
            Field(
                description="Optional cut: events at or before this time (ISO-8601, UTC without a zone; "
                "'now', '-10m', '2h ago'); the report then also shows each view's contents at that time."
            ),
        ] = None,
        offset: Annotated[
            int | None,
            Field(
                description="Optional cut instead of as_of: events at or below this offset of the session's partition.",
                ge=0,
            ),
        ] = None,
    ) -> dict[str, Any]:
        """A conversation's full event history read from the log (never from a view): every add, clear and
        derived event with its time and offset; with as_of or offset, also what each view held then."""
        ns = self.namespace(namespace)
        try:
            names.check_session_id(session_id)
            report = await audit(
                self.config_for(ns),
                session_id=session_id,
                namespace=ns,
                as_of=as_of,
                offset=offset,
                runtime=self.runtime,
            )
        except InvalidInput as exc:
            raise _refuse(exc) from None
        except (HelixError, OSError) as exc:
            raise ToolError(str(exc)) from None
        return report.to_json()


def build_server(tools: MemoryTools) -> MCPServer[Any]:
    """The MCP server of `tools`: eight tools with JSON schemas and descriptions for the model."""
    server: MCPServer[Any] = MCPServer(
        name="helix-es",
        title="helix-es memory",
        instructions=f"{INSTRUCTIONS} The default namespace is {tools.default_namespace!r}"
        + (f"; the server serves only {', '.join(tools.allowed)}." if tools.allowed else "."),
        version=__version__,
        log_level="WARNING",
    )
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    server.add_tool(
        tools.add_memory,
        name="add_memory",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False),
    )
    server.add_tool(tools.get_memory, name="get_memory", annotations=reads)
    server.add_tool(tools.search_memory, name="search_memory", annotations=reads)
    server.add_tool(
        tools.clear_memory,
        name="clear_memory",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False),
    )
    server.add_tool(tools.audit_session, name="audit_session", annotations=reads)
    server.add_tool(tools.get_facts, name="get_facts", annotations=reads)
    server.add_tool(
        tools.assert_fact,
        name="assert_fact",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False),
    )
    server.add_tool(
        tools.retract_fact,
        name="retract_fact",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False),
    )
    return server


async def serve_stdio(
    config: Config, *, namespaces: Sequence[str] | None = None, runtime: Runtime | None = None
) -> None:
    """Serve the tools over stdin and stdout until the client closes stdin; then close every memory."""
    tools = MemoryTools(config, namespaces=namespaces, runtime=runtime)
    log.info(
        "serving the memory over MCP on stdio: %s log, default namespace %s, namespaces %s",
        config.log.type,
        tools.default_namespace,
        ", ".join(tools.allowed) or "any",
    )
    try:
        await build_server(tools).run_stdio_async()
    finally:
        await tools.close()

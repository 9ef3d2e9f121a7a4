"""`helix_es.integrations.langchain.HelixChatMessageHistory` with the real langchain-core.

Held against `InMemoryChatMessageHistory` over generated sequences of calls (sync and async),
tool calls both ways, windows that keep tool exchanges whole, the embedded log, Kafka with Redis
and Kafka with PostgreSQL, a chain with a fake chat model, and the examples of
docs/integrations/ (sync.md, langchain.md).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import require_module, start_projector, stop, unique

require_module("langchain_core", "the LangChain adapter's tests need langchain-core (extra langchain)")

from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory  # noqa: E402
from langchain_core.language_models.fake_chat_models import (  # noqa: E402
    FakeMessagesListChatModel,
    GenericFakeChatModel,
)
from langchain_core.messages import (  # noqa: E402
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    HumanMessageChunk,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder  # noqa: E402
from langchain_core.runnables import RunnableLambda  # noqa: E402
from langchain_core.runnables.history import RunnableWithMessageHistory  # noqa: E402

from helix_es import InvalidMessage, Memory, Message, Position, ToolCall, register  # noqa: E402
from helix_es.integrations import _langchain_messages as mapping  # noqa: E402
from helix_es.integrations.langchain import HelixChatMessageHistory, MemoryClosed, UnsupportedMessage  # noqa: E402
from helix_es.sync import open_memory  # noqa: E402
from helix_es.views.sliding_window import SlidingWindow  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::langchain_core._api.deprecation.LangChainDeprecationWarning")

ROOT = Path(__file__).resolve().parent.parent


def embedded(tmp_path: Path, **memory: Any) -> dict[str, Any]:
    return {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False},
        "memory": {"type": "conversation", "namespace": unique("lc"), **memory},
    }


# -- generated messages -------------------------------------------------------------------------

texts = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12)
ids = st.text("abcdef0123456789-_", min_size=1, max_size=8)
names = st.one_of(st.none(), st.just(""), st.text("abcxyz_", min_size=1, max_size=6))
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**9), 10**9), st.floats(allow_nan=False, allow_infinity=False), texts
)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3), max_leaves=6
)
json_objects = st.dictionaries(texts, json_values, max_size=3)
contents = st.one_of(
    texts,
    st.lists(
        st.one_of(
            st.fixed_dictionaries({"type": st.just("text"), "text": texts}),
            st.fixed_dictionaries({"type": st.just("image"), "url": texts}),
        ),
        max_size=3,
    ),
)
common = {"content": contents, "name": names, "id": st.none() | ids, "additional_kwargs": json_objects}
tool_calls = st.lists(
    st.fixed_dictionaries({"id": ids, "name": st.text("abc_", min_size=1, max_size=5), "args": json_objects}),
    unique_by=lambda c: c["id"],
    max_size=3,
)
usage = st.none() | st.builds(
    lambda i, o: {"input_tokens": i, "output_tokens": o, "total_tokens": i + o},
    st.integers(0, 999),
    st.integers(0, 999),
)
messages: st.SearchStrategy[BaseMessage] = st.one_of(
    st.builds(HumanMessage, **common),
    st.builds(SystemMessage, **common),
    st.builds(AIMessage, **common, tool_calls=tool_calls, response_metadata=json_objects, usage_metadata=usage),
    st.builds(
        ToolMessage,
        **common,
        tool_call_id=ids,
        status=st.sampled_from(["success", "error"]),
        artifact=st.none() | json_values,
    ),
    st.builds(AIMessageChunk, content=texts, id=st.none() | ids),
    st.builds(HumanMessageChunk, content=texts),
)
batches = st.lists(messages, max_size=4)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), batches, st.booleans()),
        st.tuples(st.just("clear"), st.just([]), st.booleans()),
        st.tuples(st.just("get"), st.just([]), st.booleans()),
        st.tuples(st.just("set"), batches, st.just(False)),
    ),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(messages)
def test_every_message_survives_the_mapping_field_for_field(message: BaseMessage) -> None:
    stored = mapping.to_helix(message)
    back = mapping.from_helix(stored)
    assert back == message and type(back) is type(message)
    assert back.model_dump() == message.model_dump()
    assert set(stored.metadata) <= {mapping.TYPE_KEY, mapping.CONTENT_KEY, mapping.FIELDS_KEY}
    again = Message.from_json(stored.to_json())  # and through the stored form
    assert mapping.from_helix(again) == message


@pytest.fixture(scope="module")
def shared_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One embedded log for the generated runs, kept open so each run's history attaches at once."""
    cfg = embedded(tmp_path_factory.mktemp("lc-log"))
    with open_memory(cfg, session_id="keeper"):
        yield cfg


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations)
def test_the_same_calls_give_the_same_messages_as_in_memory_history(
    shared_log: dict[str, Any], ops: list[tuple[str, list[BaseMessage], bool]]
) -> None:
    ours = HelixChatMessageHistory(shared_log, session_id=unique("prop"))
    theirs = InMemoryChatMessageHistory()
    with ours:
        for op, batch, use_async in ops:
            if op == "add":
                if use_async:
                    asyncio.run(ours.aadd_messages(batch))
                    asyncio.run(theirs.aadd_messages(batch))
                else:
                    ours.add_messages(batch)
                    theirs.add_messages(batch)
            elif op == "clear":
                asyncio.run(ours.aclear()) if use_async else ours.clear()
                theirs.clear()
            elif op == "set":
                ours.messages = batch
                theirs.messages = list(batch)
            got = asyncio.run(ours.aget_messages()) if use_async else ours.messages
            assert got == theirs.messages
            assert [type(m) for m in got] == [type(m) for m in theirs.messages]


def test_it_is_a_real_langchain_history(tmp_path: Path) -> None:
    with HelixChatMessageHistory(embedded(tmp_path), session_id="s") as history:
        assert isinstance(history, BaseChatMessageHistory)
        history.add_user_message("hi")
        history.add_ai_message("hello")
        history.add_message(SystemMessage("sys"))
        assert history.messages == [HumanMessage("hi"), AIMessage("hello"), SystemMessage("sys")]
        assert "Human: hi" in str(history)
    with pytest.raises(MemoryClosed):
        history.messages  # noqa: B018


# -- tool calls ---------------------------------------------------------------------------------


def weather_exchange(n: int = 0) -> list[BaseMessage]:
    call = AIMessage(
        "Let me look.",
        tool_calls=[
            {"id": f"call-{n}-a", "name": "weather", "args": {"city": "Paris", "units": ["C"]}},
            {"id": f"call-{n}-b", "name": "clock", "args": {}},
        ],
        response_metadata={"model_name": "fake", "finish_reason": "tool_calls"},
        usage_metadata={"input_tokens": 10, "output_tokens": 3, "total_tokens": 13},
        id=f"run-{n}",
    )
    return [
        call,
        ToolMessage("18 °C, sunny", tool_call_id=f"call-{n}-a", name="weather", artifact={"raw": [18, "sunny"]}),
        ToolMessage([{"type": "text", "text": "12:00"}], tool_call_id=f"call-{n}-b", status="success"),
    ]


def test_tool_calls_map_to_helix_tool_calls_and_back(tmp_path: Path) -> None:
    exchange = weather_exchange()
    stored = mapping.to_helix_all(exchange)
    assert stored[0].role == "assistant" and stored[0].tool_calls == (
        ToolCall("call-0-a", "weather", json.dumps({"city": "Paris", "units": ["C"]})),
        ToolCall("call-0-b", "clock", "{}"),
    )
    assert [(m.role, m.tool_call_id, m.name) for m in stored[1:]] == [
        ("tool", "call-0-a", "weather"),
        ("tool", "call-0-b", None),
    ]
    assert json.loads(stored[0].metadata[mapping.FIELDS_KEY])["usage_metadata"]["total_tokens"] == 13
    with HelixChatMessageHistory(embedded(tmp_path), session_id="s") as history:
        history.add_messages([HumanMessage("weather?"), *exchange, AIMessage("18 °C and noon.")])
        got = history.messages
    assert got == [HumanMessage("weather?"), *exchange, AIMessage("18 °C and noon.")]
    assert got[1].tool_calls == exchange[0].tool_calls  # type: ignore[attr-defined]


def test_messages_written_by_other_programs_read_as_langchain_messages(tmp_path: Path) -> None:
    cfg = embedded(tmp_path)
    plain = [
        Message("system", "earlier: they asked about Paris", metadata={"helix.summary": "true"}),
        Message("assistant", "", tool_calls=(ToolCall("c1", "ls", '{"path": "."}'), ToolCall("c2", "bad", "[1]"))),
        Message("tool", "a.txt", tool_call_id="c1"),
        Message("tool", "error", tool_call_id="c2"),
    ]
    with open_memory(cfg, session_id="s") as mem:
        for m in plain:
            mem.add(m)
    with HelixChatMessageHistory(cfg, session_id="s") as history:
        summary, call, *_ = history.messages
        assert summary == SystemMessage(
            "earlier: they asked about Paris", response_metadata={"helix_metadata": {"helix.summary": "true"}}
        )
        assert isinstance(call, AIMessage)
        assert call.tool_calls == [{"id": "c1", "name": "ls", "args": {"path": "."}, "type": "tool_call"}]
        assert [(c["id"], c["args"]) for c in call.invalid_tool_calls] == [("c2", "[1]")]
        assert mapping.to_helix(summary) == plain[0]  # written back: metadata again


@pytest.mark.parametrize(
    "bad",
    [
        ChatMessage("hi", role="user"),
        FunctionMessage("42", name="f"),
        RemoveMessage(id="m1"),
        type("MyHuman", (HumanMessage,), {})("hi"),
        AIMessage("", tool_calls=[{"id": None, "name": "f", "args": {}}]),
        AIMessage("x", additional_kwargs={"raw": object()}),
    ],
    ids=["ChatMessage", "FunctionMessage", "RemoveMessage", "subclass", "call-without-id", "not-json"],
)
def test_a_message_that_cannot_be_stored_raises_naming_it_and_nothing_is_written(
    bad: BaseMessage, tmp_path: Path
) -> None:
    with HelixChatMessageHistory(embedded(tmp_path), session_id="s") as history:
        history.add_messages([HumanMessage("before")])
        with pytest.raises(UnsupportedMessage) as caught:
            history.add_messages([HumanMessage("ok"), bad, HumanMessage("after")])
        assert caught.value.field.startswith("messages[1]")
        if bad.type in ("chat", "function", "remove") or type(bad).__name__ == "MyHuman":
            assert type(bad).__name__ in str(caught.value)
        assert isinstance(caught.value, InvalidMessage) and isinstance(caught.value, ValueError)
        with pytest.raises(UnsupportedMessage):
            asyncio.run(history.aadd_messages([bad]))
        with pytest.raises(UnsupportedMessage):
            history.messages = [HumanMessage("replacement"), bad]
        assert history.messages == [HumanMessage("before")]  # nothing of those calls written


def test_invalid_helix_input_is_refused_with_helix_s_own_error(tmp_path: Path) -> None:
    with HelixChatMessageHistory(embedded(tmp_path), session_id="s") as history:
        with pytest.raises(InvalidMessage, match="NUL"):
            history.add_messages([HumanMessage("a\x00b")])
        assert history.messages == []


def test_list_content_and_tool_arguments_are_sealed_by_the_encryption_middleware(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """List content is stored in `content` (as JSON), so encryption covers it as it covers text."""
    import base64
    import os

    monkeypatch.setenv("HELIX_ENCRYPTION_KEY", base64.b64encode(os.urandom(32)).decode())
    cfg = {**embedded(tmp_path), "memory_middleware": ["encryption"]}
    sent: list[BaseMessage] = [
        HumanMessage([{"type": "text", "text": "my secret plan"}]),
        AIMessage("", tool_calls=[{"id": "c1", "name": "vault", "args": {"code": "hidden-arguments"}}]),
        ToolMessage("unsealed-result", tool_call_id="c1"),
    ]
    with HelixChatMessageHistory(cfg, session_id="s") as history:
        history.add_messages(sent)
        assert history.messages == sent
    raw = b"".join(p.read_bytes() for p in (tmp_path / "log").rglob("*") if p.is_file())
    for text in (b"my secret plan", b"hidden-arguments", b"unsealed-result"):
        assert text not in raw


def assert_whole_exchanges(got: list[BaseMessage]) -> None:
    """A ToolMessage only right after the AIMessage (and its other results) whose call it answers; an
    AIMessage with tool_calls only with all its results, unless it is the newest, still waiting."""
    for i, m in enumerate(got):
        if isinstance(m, ToolMessage):
            j = i
            while j > 0 and isinstance(got[j - 1], ToolMessage):
                j -= 1
            assert j > 0 and isinstance(got[j - 1], AIMessage), (i, got)
            assert m.tool_call_id in {c["id"] for c in got[j - 1].tool_calls}, (i, got)  # type: ignore[attr-defined]
        if isinstance(m, AIMessage) and m.tool_calls:
            end = i + 1
            while end < len(got) and isinstance(got[end], ToolMessage):
                end += 1
            answered = {r.tool_call_id for r in got[i + 1 : end]}  # type: ignore[attr-defined]
            assert end == len(got) or {c["id"] for c in m.tool_calls} <= answered, (i, got)


def conversation_turns() -> list[list[BaseMessage]]:
    """The batches an agent adds: question, tool exchange, answer; three times."""
    turns: list[list[BaseMessage]] = [[SystemMessage("You are a weather agent.")]]
    for n in range(3):
        call, *results = weather_exchange(n)
        turns += [[HumanMessage(f"question {n}")], [call], results, [AIMessage(f"answer {n}", id=f"a{n}")]]
    return turns


def play(history: HelixChatMessageHistory, window: int | None) -> None:
    """Add the turns; after each, the history is the view's fold of what was added, exchanges whole."""
    added: list[BaseMessage] = []
    for i, batch in enumerate(conversation_turns()):
        if i % 2:
            history.add_messages(batch)
        else:
            asyncio.run(history.aadd_messages(batch))
        added += batch
        got = history.messages if i % 3 else asyncio.run(history.aget_messages())
        if window is None:
            assert got == added
        else:
            state: tuple[Message, ...] = ()
            for m in mapping.to_helix_all(added):
                state = SlidingWindow(window).added(state, m)
            assert got == [mapping.from_helix(m) for m in state]
            assert len(got) < len(added) or i < 4
        assert_whole_exchanges(got)


def test_a_sliding_window_keeps_tool_exchanges_whole_embedded(tmp_path: Path) -> None:
    with HelixChatMessageHistory(embedded(tmp_path, type="sliding-window", window_size=3), session_id="s") as h:
        play(h, 3)
        got = h.messages
    assert got[0] == SystemMessage("You are a weather agent.") and got[-1] == AIMessage("answer 2", id="a2")


def test_the_embedded_conversation_holds_everything(tmp_path: Path) -> None:
    with HelixChatMessageHistory(embedded(tmp_path), session_id="s") as history:
        play(history, None)


def kafka(bootstrap: str, **memory: Any) -> dict[str, Any]:
    return {
        "log": {"type": "kafka", "bootstrap_servers": bootstrap, "partitions": 3, "topic_prefix": unique("lc")},
        "memory": {"namespace": unique("lc"), "read_timeout": 60, **memory},
    }


@pytest.mark.parametrize("view", ["sliding-window", "conversation"])
def test_kafka_with_redis(view: str, tmp_path: Path, kafka_bootstrap: str, redis_url: str) -> None:
    window = {"window_size": 4} if view == "sliding-window" else {}
    cfg = kafka(kafka_bootstrap, type=view, store="redis", redis_url=redis_url, **window)
    proc = start_projector(cfg, tmp_path)
    try:
        with HelixChatMessageHistory(cfg, session_id="s") as history:
            play(history, 4 if window else None)
            history.clear()
            assert history.messages == []
    finally:
        stop(proc)
    assert proc.returncode == 0, proc.stderr


def test_kafka_with_postgres_conversation(tmp_path: Path, kafka_bootstrap: str, postgres_dsn: str) -> None:
    cfg = kafka(kafka_bootstrap, type="conversation", store="postgres", dsn=postgres_dsn)
    proc = start_projector(cfg, tmp_path)
    try:
        with HelixChatMessageHistory(cfg, session_id="s") as history:
            play(history, None)
        with HelixChatMessageHistory(cfg, session_id="s") as again:  # another history, the same session
            assert again.messages == [m for batch in conversation_turns() for m in batch]
    finally:
        stop(proc)
    assert proc.returncode == 0, proc.stderr


class SlowAdds:
    """Middleware whose adds yield to the loop first, as a remote log's do: concurrent batches could interleave."""

    def __init__(self, inner: Memory) -> None:
        self.inner = inner

    async def add(self, message: Message, *, idempotency_key: str | None = None) -> Position:
        await asyncio.sleep(0.001)
        return await self.inner.add(message, idempotency_key=idempotency_key)

    async def get(self) -> list[Message]:
        return await self.inner.get()

    async def search(self, query: str, limit: int = 10) -> list[Message]:
        return await self.inner.search(query, limit)

    async def clear(self, *, idempotency_key: str | None = None) -> Position:
        return await self.inner.clear(idempotency_key=idempotency_key)


register("test-slow-adds", lambda: SlowAdds)


def test_many_threads_share_one_history(tmp_path: Path) -> None:
    cfg = {**embedded(tmp_path), "memory_middleware": ["test-slow-adds"]}
    with HelixChatMessageHistory(cfg, session_id="s") as history:

        def turn(t: int) -> None:
            for i in range(10):
                history.add_messages([HumanMessage(f"{t}.{i}"), AIMessage(f"re {t}.{i}")])

        workers = [threading.Thread(target=turn, args=(t,)) for t in range(8)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        got = history.messages
    assert len(got) == 160
    for t in range(8):  # each thread's batches in its order
        mine = [m.content for m in got if str(m.content).split(".")[0].removeprefix("re ") == str(t)]
        assert mine == [x for i in range(10) for x in (f"{t}.{i}", f"re {t}.{i}")]
    for question, answer in zip(got[::2], got[1::2], strict=True):  # and each batch whole: never interleaved
        assert answer.content == f"re {question.content}"


# -- a chain with a fake chat model ---------------------------------------------------------------


def test_a_chain_reads_the_history_calls_the_model_and_stores_the_turn(tmp_path: Path) -> None:
    cfg = embedded(tmp_path)
    seen: list[list[BaseMessage]] = []

    def record(prompt: Any) -> Any:
        seen.append(prompt.to_messages())
        return prompt

    prompt = ChatPromptTemplate.from_messages(
        [("system", "You are terse."), MessagesPlaceholder("history"), ("human", "{question}")]
    )
    model = GenericFakeChatModel(messages=iter([AIMessage("Paris.", id="r1"), AIMessage("2.1 million.", id="r2")]))
    chain = RunnableWithMessageHistory(
        prompt | RunnableLambda(record) | model,
        lambda session_id: HelixChatMessageHistory(cfg, session_id=session_id),
        input_messages_key="question",
        history_messages_key="history",
    )
    run = {"configurable": {"session_id": "u1"}}
    assert chain.invoke({"question": "Capital of France?"}, config=run).content == "Paris."
    assert asyncio.run(chain.ainvoke({"question": "Population?"}, config=run)).content == "2.1 million."
    assert seen[1][1:3] == [HumanMessage("Capital of France?"), AIMessage("Paris.", id="r1")]  # it read the history
    with HelixChatMessageHistory(cfg, session_id="u1") as history:
        assert [(type(m).__name__, m.content) for m in history.messages] == [
            ("HumanMessage", "Capital of France?"),
            ("AIMessage", "Paris."),
            ("HumanMessage", "Population?"),
            ("AIMessage", "2.1 million."),
        ]


async def test_an_agent_loop_with_tool_calls_stores_the_whole_exchange(tmp_path: Path) -> None:
    call = AIMessage("", tool_calls=[{"id": "call-1", "name": "weather", "args": {"city": "Oslo"}}])
    model = FakeMessagesListChatModel(responses=[call, AIMessage("It is 3 °C in Oslo.")])
    async with HelixChatMessageHistory(embedded(tmp_path, type="sliding-window", window_size=2), "s") as history:
        await history.aadd_messages([HumanMessage("Weather in Oslo?")])
        while True:
            reply = await model.ainvoke(await history.aget_messages())
            await history.aadd_messages([reply])
            if not reply.tool_calls:  # type: ignore[attr-defined]
                break
            results = [ToolMessage("3 °C", tool_call_id=c["id"]) for c in reply.tool_calls]  # type: ignore[attr-defined]
            await history.aadd_messages(results)
            got = await history.aget_messages()
            assert [type(m) for m in got] == [AIMessage, ToolMessage]  # a window of 2: the exchange, whole
        got = await history.aget_messages()
    assert [m.content for m in got] == ["It is 3 °C in Oslo."]  # the exchange went whole, not the result alone
    assert_whole_exchanges(got)


# -- the docs' examples ----------------------------------------------------------------------------

README_SYNC = """
import threading

from helix_es import Message
from helix_es.sync import open_memory

config = {"memory": {"type": "conversation"}}  # embedded log in .helix/log

with open_memory(config, session_id="user-42") as memory:

    def note(n: int) -> None:
        memory.add(Message("user", f"note {n} from thread {n}"))

    threads = [threading.Thread(target=note, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(len(memory.get()))  # 4
    print(memory.search("thread 2")[0].content)  # note 2 from thread 2
"""

README_LANGCHAIN = """
import asyncio

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

from helix_es.integrations.langchain import HelixChatMessageHistory

config = {"memory": {"type": "conversation"}}
prompt = ChatPromptTemplate.from_messages(
    [("system", "You are terse."), MessagesPlaceholder("history"), ("human", "{question}")]
)
model = GenericFakeChatModel(messages=iter([AIMessage("Paris."), AIMessage("About 2.1 million.")]))
chain = prompt | model

with HelixChatMessageHistory(config, session_id="user-42") as history:
    for question in ["Capital of France?", "How many people live there?"]:
        reply = chain.invoke({"history": history.messages, "question": question})
        history.add_messages([HumanMessage(question), reply])
    # tool calls round-trip: AIMessage.tool_calls <-> helix ToolCall, ToolMessage <-> role "tool"
    history.add_messages(
        [
            AIMessage("", tool_calls=[{"id": "call-1", "name": "weather", "args": {"city": "Paris"}}]),
            ToolMessage("18 C, sunny", tool_call_id="call-1"),
        ]
    )
    for message in asyncio.run(history.aget_messages()):  # the async side reads the same
        print(type(message).__name__, message.content or message.tool_calls[0]["args"])
"""


@pytest.mark.parametrize(
    ("example", "printed"),
    [
        (README_SYNC, ["4", "note 2 from thread 2"]),
        (
            README_LANGCHAIN,
            [
                "HumanMessage Capital of France?",
                "AIMessage Paris.",
                "HumanMessage How many people live there?",
                "AIMessage About 2.1 million.",
                "AIMessage {'city': 'Paris'}",
                "ToolMessage 18 C, sunny",
            ],
        ),
    ],
    ids=["sync", "langchain"],
)
def test_the_readme_examples_run_as_printed(example: str, printed: list[str], tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(textwrap.dedent(example))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == printed

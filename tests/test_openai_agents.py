"""`HelixSession`, the OpenAI Agents SDK session over helix-es, held against the SDK's own `SQLiteSession`.

The same calls (add_items, get_items with and without a limit, pop_item, clear_session) over
generated sequences of every item kind give the same answers, embedded and through Kafka with a
projector (Redis, PostgreSQL). Items round-trip exactly, other views of the session mean something,
`pop_item` is a `MessageRetracted` the audit shows, and `Runner.run` with a canned model keeps its
history in a HelixSession across runs. The example of docs/integrations/openai-agents.md runs as written.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import random
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, ModelResponse, Runner, SQLiteSession, Usage, function_tool, set_tracing_disabled
from agents.memory import Session, SessionSettings
from agents.models.interface import Model
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from helix_es import Message, open_memory
from helix_es.client.encryption import envelope_key_id, sealable
from helix_es.history.audit import audit
from helix_es.history.erasure import forget
from helix_es.integrations.openai_agents import ITEM, KIND, HelixSession, SessionClosed
from helix_es.model.errors import ConfigError, InvalidInput
from helix_es.model.events import MessageAdded
from tests.conftest import start_projector, stop, unique
from tests.test_erasure import raw_session, use_file_keys
from tests.test_idempotency import store_config

set_tracing_disabled(True)  # no OpenAI key here: nothing to export traces to

PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5E"
    "rkJggg=="
)


def items_of_every_kind(n: int) -> list[dict[str, Any]]:
    """Every item kind the SDK keeps in a session, and one it may add later; `n` keeps ids apart."""
    call = f"call_{n}"
    return [
        {"role": "user", "content": f"plain text {n}"},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": f"what is in this image {n}?"},
                {"type": "input_image", "image_url": PNG, "detail": "auto"},
            ],
        },
        {"role": "developer", "content": "answer in French"},
        {"type": "message", "role": "system", "content": "be brief"},
        {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [
                {"type": "output_text", "text": "un carré", "annotations": []},
                {"type": "refusal", "refusal": "no"},
            ],
        },
        {
            "type": "reasoning",
            "id": f"rs_{n}",
            "summary": [{"type": "summary_text", "text": "the user wants the weather"}],
            "encrypted_content": "gAAAA…",
        },
        {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": call,
            "name": "get_weather",
            "arguments": '{"city": "Oslo", "days": 2}',
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": call, "output": "sunny, 21.5°C"},
        {
            "type": "function_call_output",
            "call_id": call,
            "output": [{"type": "input_text", "text": "a chart"}, {"type": "input_image", "image_url": PNG}],
        },
        {"type": "function_call", "call_id": f"bad_{n}", "name": "f", "arguments": "not json {"},
        {"type": "hologram_call", "id": f"h_{n}", "beam": {"nested": [1, 2.5, None, True, "ünï"]}, "text": "zap"},
        {"type": "item_reference", "id": f"ref_{n}"},
        {"role": "user", "content": "a NUL \x00 and an emoji 🎉"},
        {"type": "function_call_output", "call_id": "\x00", "output": {"not": "text"}},  # no call id left
    ]


def embedded(tmp_path: Path, memory: dict[str, Any] | None = None) -> dict[str, Any]:
    memory = memory or {"type": "conversation"}
    return {"log": {"type": "embedded", "path": str(tmp_path / "log")}, "memory": {"namespace": unique("oa"), **memory}}


async def test_it_is_the_sdks_session_and_every_kind_round_trips_exactly(tmp_path: Path) -> None:
    cfg = embedded(tmp_path)
    items = items_of_every_kind(1)
    async with HelixSession("s", cfg) as session:
        assert isinstance(session, Session)
        assert session.session_id == "s" and session.session_settings == SessionSettings()
        await session.add_items(copy.deepcopy(items))
        assert await session.get_items() == items
        assert await session.get_items(limit=3) == items[-3:]
    async with HelixSession("s", cfg) as again:  # another process: read back from the log
        assert await again.get_items() == items
    async with open_memory(cfg, session_id="s") as mem:  # the same session through helix's own API
        messages = await mem.get()
    by_kind = [(m.metadata[KIND], m.role) for m in messages]
    assert by_kind[:8] == [
        ("message", "user"),
        ("message", "user"),
        ("message", "system"),  # developer
        ("message", "system"),
        ("message", "assistant"),
        ("reasoning", "assistant"),
        ("function_call", "assistant"),
        ("function_call_output", "tool"),
    ]
    assert messages[1].content == "what is in this image 1?"
    assert messages[4].content == "un carré\nno"
    assert messages[5].content == "the user wants the weather"
    assert [(c.id, c.name, c.arguments) for c in messages[6].tool_calls] == [
        ("call_1", "get_weather", '{"city": "Oslo", "days": 2}')
    ]
    assert messages[7].tool_call_id == "call_1" and messages[7].content == "sunny, 21.5°C"
    assert messages[9].tool_calls[0].arguments == '"not json {"'  # quoted: still JSON text
    assert messages[10].role == "assistant" and messages[10].content == "zap"
    assert messages[12].content == "a NUL  and an emoji 🎉"  # the item keeps its NUL; the text cannot
    assert messages[13].role == "assistant" and messages[13].metadata[KIND] == "function_call_output"


async def test_messages_added_without_the_sdk_read_as_items(tmp_path: Path) -> None:
    cfg = embedded(tmp_path)
    async with open_memory(cfg, session_id="s") as mem:
        await mem.add(Message("user", "hi"))
        await mem.add(Message("assistant", "let me look", tool_calls=({"id": "c", "name": "ls"},)))  # type: ignore[arg-type]
        await mem.add(Message("tool", "a.py", tool_call_id="c"))
    async with HelixSession("s", cfg) as session:
        assert await session.get_items() == [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "let me look"},
            {"type": "function_call", "call_id": "c", "name": "ls", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "a.py"},
        ]
        assert not any(ITEM in m.metadata for m in (await session.memory()).get())


async def test_pop_item_is_an_event_the_audit_shows(tmp_path: Path) -> None:
    cfg = embedded(tmp_path)
    async with HelixSession("s", cfg) as session:
        assert await session.pop_item() is None  # empty: nothing is written
        await session.add_items([{"role": "user", "content": "keep"}, {"role": "user", "content": "oops"}])
        assert await session.pop_item() == {"role": "user", "content": "oops"}
        assert await session.get_items() == [{"role": "user", "content": "keep"}]  # read-your-writes
    report = await audit(cfg, session_id="s")
    assert [e.type for e in report.events] == ["MessageAdded", "MessageAdded", "MessageRetracted"]
    added, retraction = report.events[1], report.events[2]
    assert retraction.retracts == added.position.offset
    assert retraction.payload.retracted == added.event_id  # type: ignore[union-attr]
    assert "retracted the message at" in retraction.describe() and "pop_item" in retraction.describe()


async def test_bad_items_write_nothing_and_a_closed_session_refuses(tmp_path: Path) -> None:
    cfg = embedded(tmp_path)
    session = HelixSession("s", cfg)
    await session.add_items([{"role": "user", "content": "first"}])
    with pytest.raises(InvalidInput, match=r"items\[1\]"):
        await session.add_items([{"role": "user", "content": "ok"}, "not an item"])  # type: ignore[list-item]
    with pytest.raises(InvalidInput, match=r"items\[0\].*JSON"):
        await session.add_items([{"role": "user", "content": {1, 2}}])  # type: ignore[list-item]
    with pytest.raises(InvalidInput, match="items"):
        await session.add_items({"role": "user", "content": "x"})  # type: ignore[arg-type]
    assert await session.get_items() == [{"role": "user", "content": "first"}]
    await session.aclose()
    await session.aclose()  # twice is fine
    with pytest.raises(SessionClosed):
        await session.get_items()
    with pytest.raises(SessionClosed):
        await session.add_items([])


async def test_redaction_which_would_leave_the_item_in_clear_is_refused(tmp_path: Path) -> None:
    cfg = {**embedded(tmp_path), "memory_middleware": ["logging", "redaction"]}
    session = HelixSession("s", cfg)
    with pytest.raises(ConfigError, match=r"memory_middleware\[1\].*metadata"):
        await session.add_items([{"role": "user", "content": "my card is 4111 1111 1111 1111"}])
    await session.aclose()
    async with HelixSession("s", {**cfg, "memory_middleware": ["logging"]}) as plain:
        assert await plain.get_items() == []  # nothing was written


@pytest.mark.usefixtures("key_env")
@pytest.mark.parametrize("store", ["memory", "redis", "postgres"])
async def test_an_encrypted_session_seals_each_item_whole_and_forget_erases_it(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """The item sits in metadata, which encryption seals too: nothing of it reaches the log in clear,
    it reads back exactly, and `forget` shreds all of it (no value stays readable)."""
    use_file_keys(monkeypatch, tmp_path)
    cfg = {**embedded(tmp_path, {"type": "conversation", **store_config(store, request)})}
    cfg["memory_middleware"] = ["encryption"]
    ns, items = cfg["memory"]["namespace"], items_of_every_kind(1)
    async with HelixSession("s", cfg) as session:
        await session.add_items(copy.deepcopy(items))
        assert await session.get_items() == items
        assert await session.pop_item() == items[-1]
        assert await session.get_items() == items[:-1]
    async with HelixSession("s", cfg) as again:  # another process: opened from the log's views
        assert await again.get_items() == items[:-1]
    records = await raw_session(tmp_path, ns, "s")
    added = [r.event.payload.message for r in records if isinstance(r.event.payload, MessageAdded)]
    assert len(added) == len(items) and all(m.metadata.keys() == {ITEM, KIND} for m in added)
    assert all(envelope_key_id(v) for m in added for v in sealable(m))  # tool arguments: a JSON string of one
    on_disk = b"".join(f.read_bytes() for f in (tmp_path / "log").rglob("*") if f.is_file())
    # Tool names stay clear (views pair calls by them), the rest of the item is sealed.
    # Long needles only: a short one turns up in base64 ciphertext by chance.
    needles = ("sunny, 21.5", "hologram_call", "the user wants the weather", "function_call_output", "in this image")
    for clear in needles:
        assert clear.encode() not in on_disk, clear
    result = await forget(cfg, session_id="s")
    assert result.erased_keys and result.unshreddable == 0 and result.messages == len(items)
    async with HelixSession("s", cfg) as erased:
        assert await erased.get_items() == []


async def test_session_settings_limit_as_the_sdk(tmp_path: Path) -> None:
    settings = {"limit": 2}
    items = [{"role": "user", "content": str(i)} for i in range(5)]
    ours = HelixSession("s", embedded(tmp_path), session_settings=settings)
    theirs = SQLiteSession("s", session_settings=settings)
    try:
        for s in (ours, theirs):
            await s.add_items(items)
        for limit in (None, 0, 1, 4, 9, -1):
            assert await ours.get_items(limit) == await theirs.get_items(limit), limit
    finally:
        await ours.aclose()
        theirs.close()


# --- the same calls as SQLiteSession ----------------------------------------------------------------


async def same_as_sqlite(session: HelixSession, seed: int, steps: int) -> None:
    """Random calls on both sessions; every answer equal. The generator can tell them apart: a session
    that dropped, reordered or rewrote an item, or popped the wrong one, fails."""
    rng = random.Random(seed)
    reference = SQLiteSession(session.session_id)
    popped = cleared = 0
    try:
        for step in range(steps):
            roll = rng.random() if step != steps // 2 else 0.77  # one clear at least, halfway
            if roll < 0.45:
                kinds = items_of_every_kind(step)
                batch = rng.sample(kinds, rng.randint(0, 4))
                await session.add_items(copy.deepcopy(batch))
                await reference.add_items(copy.deepcopy(batch))
            elif roll < 0.75:
                got = await session.pop_item()
                assert got == await reference.pop_item(), step
                popped += got is not None
            elif roll < 0.8:
                await session.clear_session()
                await reference.clear_session()
                cleared += 1
            limit = rng.choice([None, None, 0, 1, 3, 100, -1])
            assert await session.get_items(limit) == await reference.get_items(limit), (step, limit)
        assert popped > 3 and cleared > 0
    finally:
        reference.close()


@pytest.mark.parametrize("seed", range(4))
async def test_embedded_behaves_as_sqlite_session(seed: int, tmp_path: Path) -> None:
    async with HelixSession(f"s{seed}", embedded(tmp_path)) as session:
        await same_as_sqlite(session, seed, steps=60)


def on_kafka(store: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    bootstrap = request.getfixturevalue("kafka_bootstrap")
    log = {"type": "kafka", "bootstrap_servers": bootstrap, "partitions": 2, "topic_prefix": unique("oa")}
    memory = {"type": "conversation", "namespace": unique("oa"), "read_timeout": 60, **store_config(store, request)}
    return {"log": log, "memory": memory}


@pytest.mark.parametrize("store", ["redis", "postgres"])
async def test_kafka_behaves_as_sqlite_session(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    cfg = on_kafka(store, request)
    proc = start_projector(cfg, tmp_path)
    try:
        async with HelixSession("kafka-session", cfg) as session:
            await same_as_sqlite(session, 11, steps=40)
    finally:
        stop(proc)
    assert proc.returncode == 0, proc.stderr


async def test_a_window_view_shows_what_the_window_holds(tmp_path: Path) -> None:
    cfg = embedded(tmp_path, {"type": "sliding-window", "window_size": 2})
    async with HelixSession("s", cfg) as session:
        await session.add_items([{"role": "user", "content": str(i)} for i in range(4)])
        assert await session.get_items() == [{"role": "user", "content": "2"}, {"role": "user", "content": "3"}]
        assert await session.pop_item() == {"role": "user", "content": "3"}
        assert await session.pop_item() == {"role": "user", "content": "2"}
        assert await session.pop_item() is None  # older items are on the log, not in the window


# --- Runner ------------------------------------------------------------------------------------------


class CannedModel(Model):
    """The SDK's Model interface with canned answers, one output item per call; records its inputs."""

    def __init__(self, outputs: list[Any]) -> None:
        self.outputs = list(outputs)
        self.inputs: list[list[Any]] = []

    async def get_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self.inputs.append(copy.deepcopy(input if isinstance(input, list) else [input]))
        return ModelResponse(output=[self.outputs.pop(0)], usage=Usage(), response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        raise NotImplementedError("not streamed in these tests")
        yield


def say(text: str) -> ResponseOutputMessage:
    content = [ResponseOutputText(type="output_text", text=text, annotations=[])]
    return ResponseOutputMessage(id="msg", type="message", role="assistant", status="completed", content=content)


def weather_call() -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call", call_id="call-1", name="get_weather", arguments='{"city": "Oslo"}'
    )


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


async def run_twice(session: Session) -> tuple[CannedModel, list[Any]]:
    model = CannedModel([weather_call(), say("It is sunny in Oslo."), say("You asked about Oslo.")])
    agent = Agent(name="weather", instructions="Answer briefly.", model=model, tools=[get_weather])
    first = await Runner.run(agent, "What is the weather in Oslo?", session=session)
    assert first.final_output == "It is sunny in Oslo."
    second = await Runner.run(agent, "Which city did I ask about?", session=session)
    assert second.final_output == "You asked about Oslo."
    return model, await session.get_items()


async def test_runner_keeps_history_in_a_helix_session(tmp_path: Path) -> None:
    cfg = embedded(tmp_path)
    async with HelixSession("runner", cfg) as session:
        model, items = await run_twice(session)
    # The second run's model call saw the first run: question, tool call, its result, answer.
    seen = model.inputs[-1]
    assert [i.get("type", "message") for i in seen] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
    ]
    assert seen[2]["output"] == "Sunny in Oslo" and seen[-1]["content"] == "Which city did I ask about?"
    reference = SQLiteSession("runner")
    try:
        assert items == (await run_twice(reference))[1]  # the same history as the SDK's own session
    finally:
        reference.close()
    async with HelixSession("runner", cfg) as later:  # and it is on the log for the next process
        assert await later.get_items() == items


README_EXAMPLE = textwrap.dedent(
    '''
    import asyncio

    from agents import Agent, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled
    from agents.models.interface import Model
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    from helix_es.integrations.openai_agents import HelixSession

    set_tracing_disabled(True)  # no OpenAI key needed: the model below is canned


    class CannedModel(Model):
        """A stand-in for an LLM: answers each call with the next canned output item."""

        def __init__(self, outputs):
            self.outputs, self.inputs = list(outputs), []

        async def get_response(self, system_instructions, input, *args, **kwargs):
            self.inputs.append(input)
            return ModelResponse(output=[self.outputs.pop(0)], usage=Usage(), response_id=None)

        async def stream_response(self, *args, **kwargs):
            raise NotImplementedError
            yield


    def say(text):
        content = [ResponseOutputText(type="output_text", text=text, annotations=[])]
        return ResponseOutputMessage(id="msg", type="message", role="assistant", status="completed", content=content)


    @function_tool
    def get_weather(city: str) -> str:
        return f"Sunny in {city}"


    async def main():
        model = CannedModel(
            [
                ResponseFunctionToolCall(
                    type="function_call", call_id="call-1", name="get_weather", arguments='{"city": "Oslo"}'
                ),
                say("It is sunny in Oslo."),
                say("You asked about Oslo."),
            ]
        )
        agent = Agent(name="weather", instructions="Answer briefly.", model=model, tools=[get_weather])
        config = {
            "log": {"type": "embedded", "path": ".helix/log"},
            "memory": {"type": "conversation", "namespace": "weather-bot"},
        }
        async with HelixSession("user-42", config) as session:
            first = await Runner.run(agent, "What is the weather in Oslo?", session=session)
            print(first.final_output)  # It is sunny in Oslo.
            second = await Runner.run(agent, "Which city did I ask about?", session=session)
            print(second.final_output)  # You asked about Oslo.
            # The second run's model call saw the first run's items, the tool call and its result too:
            print([item.get("type", "message") for item in model.inputs[-1]])
            print(await session.pop_item())  # the last answer, taken back (the log keeps it)


    asyncio.run(main())
    '''
)


def test_the_readme_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(README_EXAMPLE, "README example", "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == [
        "It is sunny in Oslo.",
        "You asked about Oslo.",
        "['message', 'function_call', 'function_call_output', 'message', 'message']",
    ]
    assert "You asked about Oslo." in out[3] and "'role': 'assistant'" in out[3]
    assert (tmp_path / ".helix" / "log").exists()


async def test_concurrent_calls_on_one_session_run_one_at_a_time(tmp_path: Path) -> None:
    async with HelixSession("s", embedded(tmp_path)) as session:
        await asyncio.gather(*(session.add_items([{"role": "user", "content": str(i)}]) for i in range(10)))
        popped = await asyncio.gather(*(session.pop_item() for _ in range(10)))
        assert sorted(p["content"] for p in popped if p is not None) == [str(i) for i in range(10)]  # type: ignore[index]
        assert await session.get_items() == []


# --- threads and event loops -------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["embedded", "kafka-redis"])
def test_one_session_serves_threads_each_with_its_own_event_loop(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The SDK's own concurrency test for SQLiteSession: five threads, each adding on an event loop of
    its own that it closes after. It failed ("Lock is bound to a different event loop", calls left
    hanging on a loop that had gone, 2 of 10 items stored)."""
    cfg = embedded(tmp_path) if backend == "embedded" else on_kafka("redis", request)
    proc = start_projector(cfg, tmp_path) if backend != "embedded" else None
    items = [{"role": "user", "content": f"Message {i}"} for i in range(10)]
    session = HelixSession("threads", cfg)

    def add(item: dict[str, Any]) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(asyncio.wait_for(session.add_items([item]), 60))  # type: ignore[list-item]
        finally:
            loop.close()

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
            list(pool.map(add, items))
        # One asyncio.run after another: the loop of each call is closed before the next starts.
        stored = asyncio.run(session.get_items())
        assert sorted(stored, key=lambda i: i["content"]) == items  # type: ignore[arg-type,return-value]
        popped = asyncio.run(session.pop_item())
        assert asyncio.run(session.get_items()) == stored[:-1] and popped == stored[-1]
        session.close()
        session.close()  # twice is fine
        with pytest.raises(SessionClosed, match="HelixSession is closed"):
            asyncio.run(session.get_items())
    finally:
        session.close()
        if proc is not None:
            stop(proc)
    assert proc is None or proc.returncode == 0, proc.stderr


def test_unknown_session_settings_are_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="Unknown session settings: limitt"):
        HelixSession("s", embedded(tmp_path), session_settings={"limitt": 1})
    with pytest.raises(TypeError, match="Unknown session settings: colour, limitt"):
        HelixSession("s", embedded(tmp_path), session_settings={"limitt": 1, "limit": 2, "colour": "red"})
    assert not (tmp_path / "log").exists()  # refused before anything opened
    assert HelixSession("s", embedded(tmp_path), session_settings={"limit": 2}).session_settings == SessionSettings(
        limit=2
    )

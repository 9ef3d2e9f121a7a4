from __future__ import annotations

from dataclasses import replace

import pytest

from helix_es import InvalidMessage, Message, ToolCall


def test_valid_message_round_trips_through_json_and_record() -> None:
    m = Message(
        "assistant",
        "calling",
        name="bot",
        tool_calls=[{"id": "c1", "name": "search", "arguments": '{"q": "x"}'}],
        metadata={"trace": "t1"},
    )
    assert m.tool_calls == (ToolCall("c1", "search", '{"q": "x"}'),)
    assert Message.from_json(m.to_json()) == m
    assert Message.from_record(m.to_record()) == m


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"role": "robot"}, "role"),
        ({"role": "user", "content": 42}, "content"),
        ({"role": "user", "content": "bad \udc80 surrogate"}, "content"),
        ({"role": "user", "name": ""}, "name"),
        ({"role": "user", "tool_calls": [ToolCall("c", "f")]}, "tool_calls"),
        ({"role": "assistant", "tool_calls": "nope"}, "tool_calls"),
        ({"role": "assistant", "tool_calls": [{"id": "", "name": "f"}]}, "tool_calls[0].id"),
        ({"role": "assistant", "tool_calls": [{"id": "c", "name": "f", "arguments": "{"}]}, "tool_calls[0].arguments"),
        ({"role": "assistant", "tool_calls": [{"id": "c", "name": "f", "extra": 1}]}, "tool_calls[0]"),
        ({"role": "tool", "content": "result"}, "tool_call_id"),
        ({"role": "user", "tool_call_id": "c1"}, "tool_call_id"),
        ({"role": "user", "metadata": {"k": 1}}, "metadata['k']"),
        ({"role": "user", "metadata": ["k"]}, "metadata"),
    ],
)
def test_invalid_input_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(InvalidMessage) as err:
        Message(**kwargs)
    assert err.value.field == field
    assert isinstance(err.value, ValueError)
    assert str(err.value).startswith(field)


def test_messages_are_immutable_and_hashable() -> None:
    m = Message("user", "hi", metadata={"a": "b"})
    with pytest.raises(AttributeError):
        m.content = "changed"  # type: ignore[misc]
    assert m in {m, Message("user", "hi")}
    assert m != Message("user", "hi")  # metadata counts for equality


def test_a_messages_json_is_made_once_and_a_changed_copy_gets_its_own() -> None:
    # The service answers each get with the window's messages as JSON, and views hand out the same
    # decoded messages get after get: each message's JSON is put together once.
    m = Message("user", 'say "hi"', metadata={"a": "b"})
    text = m.to_json()
    assert m.to_json() is text
    assert m == Message.from_json(text) and hash(m) == hash(Message("user", 'say "hi"', metadata={"a": "b"}))
    changed = replace(m, content="bye")
    assert changed.to_json() == '{"role":"user","content":"bye","metadata":{"a":"b"}}'
    assert Message.from_record(m.to_record()).to_json() == text

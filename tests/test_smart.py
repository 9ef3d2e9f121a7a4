"""smart: a token budget that keeps tool calls with their results and remembers files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helix_es import ConfigError, Event, Message, MessageAdded, ToolCall, load_config, open_memory
from helix_es.model.tokenizers import EXACT, counter
from helix_es.model.tokens import MESSAGE_OVERHEAD, TOOL_CALL_OVERHEAD, message_tokens
from helix_es.views.smart import DEFAULT_TOKENS, ROLE, Smart
from tests.conftest import require_module, unique


def file_turn(i: int, tool: str = "read_file", lines: int = 40) -> list[Message]:
    call = ToolCall(f"call-{i}", tool, f'{{"path": "src/module_{i}.py"}}')
    body = "\n".join(f"def f{j}(x):  # module {i}\n    return x * {j}" for j in range(lines))
    return [
        Message("user", f"Look at module {i}."),
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", body, tool_call_id=call.id),
        Message("assistant", f"Module {i} defines {lines} functions."),
    ]


def check_pairs(messages: list[Message]) -> None:
    """No tool result without its call before it, and no call whose results are missing."""
    open_calls: set[str] = set()
    for m in messages:
        if m.role == "tool":
            assert m.tool_call_id in open_calls, f"orphaned tool result {m.tool_call_id}"
        elif m.tool_calls:
            open_calls = {c.id for c in m.tool_calls}
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    calls = [c.id for m in messages[:-2] for c in m.tool_calls]  # the newest call may still be waiting
    assert set(calls) <= answered, "a tool call lost its results"


def fold_all(view: Smart, messages: list[Message]) -> list[Message]:
    state: tuple[Message, ...] = ()
    for m in messages:
        state = view.fold(state, Event("ns", "s", MessageAdded(m)))
    return view.render(state)


def test_budget_pairs_notes_and_file_map() -> None:
    view = Smart(1500)
    turns = [Message("system", "You are a coding agent.")]
    for i in range(8):
        turns += file_turn(i)
    got = fold_all(view, turns)
    assert got[0].content == "You are a coding agent."
    check_pairs(got)
    counted = [m for m in got if m.metadata.get(ROLE) != "files" and m is not got[0]]
    assert sum(map(message_tokens, counted)) <= 1500
    notes = [m for m in got if m.metadata.get(ROLE) == "compressed"]
    assert notes and "read_file" in notes[-1].content and "lines" in notes[-1].content
    files = next(m for m in got if m.metadata.get(ROLE) == "files")
    for i in range(8):  # every file read is remembered, evicted or not
        assert f"src/module_{i}.py: read via read_file" in files.content
    assert got[-1].content == "Module 7 defines 40 functions."


def test_writes_update_the_file_map_and_the_newest_group_always_stays() -> None:
    view = Smart(200)
    write = ToolCall("w1", "write_file", '{"path": "src/module_1.py", "content": "x = 1"}')
    got = fold_all(
        view,
        [
            *file_turn(1),
            Message("assistant", "", tool_calls=(write,)),
            Message("tool", "wrote 1 line", tool_call_id="w1"),
        ],
    )
    files = next(m for m in got if m.metadata.get(ROLE) == "files")
    assert "src/module_1.py: wrote via write_file" in files.content
    huge = fold_all(Smart(50), file_turn(2, lines=300)[:3])
    assert huge[-1].role == "tool"  # over budget on its own, but never invisible
    check_pairs(huge)


def test_max_tokens_zero_means_default_and_code_is_an_alias() -> None:
    assert load_config({"memory": {"type": "smart", "max_tokens": 0}}).memory.view == Smart(DEFAULT_TOKENS)
    assert load_config({"memory": {"type": "code"}}).memory.view == Smart(DEFAULT_TOKENS)
    with pytest.raises(ConfigError, match=r"memory\.max_tokens"):
        load_config({"memory": {"type": "smart", "max_tokens": -5}})


@pytest.mark.parametrize("store", ["memory", "redis", "postgres"])
async def test_smart_memory_through_every_store(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    memory: dict[str, Any] = {"type": "smart", "max_tokens": 1500, "namespace": unique("smart"), "store": store}
    if store == "redis":
        memory["redis_url"] = request.getfixturevalue("redis_url")
    elif store == "postgres":
        memory["dsn"] = request.getfixturevalue("postgres_dsn")
    cfg = {"log": {"path": str(tmp_path)}, "memory": memory}
    turns = [m for i in range(6) for m in file_turn(i)]
    async with open_memory(cfg, session_id="s") as mem:
        for m in turns:
            await mem.add(m)
        got = await mem.get()
        check_pairs(got)
        assert got == fold_all(Smart(1500), turns)  # the store holds exactly what the pure fold gives
        assert [m.content for m in await mem.search("module 5 defines", limit=3)] == ["Module 5 defines 40 functions."]
    async with open_memory(cfg, session_id="s") as mem:
        assert await mem.get() == got


@pytest.mark.parametrize("name", EXACT)
def test_an_exact_tokenizer_budgets_in_tiktoken_counts(name: str) -> None:
    require_module("tiktoken", "the tokenizers extra (pip install -e '.[tokenizers]') is not installed")
    count = counter(name)
    view = Smart(1500, tokenizer=name)
    turns = [Message("system", "You are a coding agent.")]
    for i in range(8):
        turns += file_turn(i)
    got = fold_all(view, turns)
    check_pairs(got)
    head = [m for m in got if m.metadata.get(ROLE) == "files"]
    counted = [m for m in got if m not in head and m is not got[0]]

    def tokens(m: Message) -> int:
        calls = sum(TOOL_CALL_OVERHEAD + count(c.name) + count(c.arguments) for c in m.tool_calls)
        return MESSAGE_OVERHEAD + count(m.content) + calls

    assert sum(map(tokens, counted)) <= 1500 - sum(map(tokens, head))
    assert sum(map(tokens, counted)) + sum(map(tokens, head)) > 1200  # the budget is used, not wasted
    # Notes and the file map quote sizes in the view's own counts.
    body = next(m.content for m in turns if m.role == "tool")
    assert f"~{MESSAGE_OVERHEAD + count(body)} tokens" in head[0].content


def test_smart_names_and_tokenizer_config() -> None:
    require_module("tiktoken", "the tokenizers extra (pip install -e '.[tokenizers]') is not installed")
    assert Smart().name == "smart-100000-est3"
    assert Smart(2000, tokenizer="cl100k_base").name == "smart-2000-cl100k"
    assert Smart(2000, tokenizer="o200k_base").name == "smart-2000-o200k"
    for kind in ("smart", "code"):
        cfg = load_config({"memory": {"type": kind, "max_tokens": 2000, "tokenizer": "o200k_base"}})
        assert cfg.memory.view == Smart(2000, tokenizer="o200k_base")
        with pytest.raises(ConfigError, match=r"^memory\.tokenizer: must be one of estimate, cl100k_base"):
            load_config({"memory": {"type": kind, "tokenizer": "o100k_base"}})

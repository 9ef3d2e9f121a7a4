"""Configuration: the seed's documents, the `log:` key, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from helix_es import ConfigError, load_config
from helix_es.views.conversation import Conversation
from helix_es.views.sliding_window import SlidingWindow
from tests.seed_examples import MULTI_TENANT_REDIS, SLIDING_WITH_LOGGING


def test_seed_agents_document_loads() -> None:
    cfg = load_config(SLIDING_WITH_LOGGING)
    assert cfg.memory.view == SlidingWindow(30)
    assert cfg.memory.namespace == "chat"  # the agent id scopes its memory
    assert cfg.middleware == ("logging",)
    assert cfg.log.type == "embedded"


def test_seed_redis_document_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HELIX_REDIS_URL", raising=False)
    cfg = load_config(MULTI_TENANT_REDIS)
    assert cfg.memory.view == Conversation()
    assert cfg.memory.view.ttl == 168 * 3600  # type: ignore[union-attr]
    assert cfg.memory.store == "redis"
    assert cfg.memory.redis_url == "redis://redis:6379"
    assert cfg.memory.session_id_header == "X-Session-ID"
    monkeypatch.setenv("HELIX_REDIS_URL", "redis://10.0.0.9:6380/1")  # the deployment's own Redis wins
    assert load_config(MULTI_TENANT_REDIS).memory.redis_url == "redis://10.0.0.9:6380/1"


def test_a_path_a_dict_and_text_give_the_same_config(tmp_path: Path) -> None:
    path = tmp_path / "helix.yaml"
    path.write_text(SLIDING_WITH_LOGGING)
    assert load_config(path) == load_config(str(path)) == load_config(SLIDING_WITH_LOGGING)


def test_log_section(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HELIX_KAFKA_BOOTSTRAP", "k1:9092")
    cfg = load_config(
        {
            "log": {"type": "kafka", "partitions": 12},
            "memory": {"type": "conversation", "store": "redis", "redis_url": "redis://x"},
        }
    )
    assert (cfg.log.type, cfg.log.bootstrap_servers, cfg.log.partitions) == ("kafka", "k1:9092", 12)


@pytest.mark.parametrize(
    ("doc", "key", "words"),
    [
        ({"memory": {"type": "sliding-windw"}}, "memory.type", "unknown memory type"),
        ({"memory": {"type": "sliding-window", "window_size": 0}}, "memory.window_size", ">= 1"),
        ({"memory": {"type": "sliding-window", "window_size": "30"}}, "memory.window_size", "whole number"),
        ({"memory": {"type": "conversation", "windw_size": 3}}, "memory.windw_size", "unknown key of a conversation"),
        ({"memory": {"store": "mongo"}}, "memory.store", "one of"),
        ({"memory": {"namespace": "has space"}}, "memory.namespace", "A-Za-z0-9"),
        ({"memory": {"consistency": "strong"}}, "memory.consistency", "read-your-writes"),
        ({"memory": {"read_timeout": -1}}, "memory.read_timeout", "positive"),
        ({"memory": {"store": "redis"}}, "memory.redis_url", "HELIX_REDIS_URL"),
        ({"log": {"type": "kafka"}, "memory": {"store": "memory"}}, "memory.store", "one process"),
        ({"log": {"type": "pulsar"}, "memory": {}}, "log.type", "kafka or embedded"),
        ({"log": {"partitons": 3}, "memory": {}}, "log.partitons", "unknown key"),
        ({"agents": [{"id": "a", "memory": {"type": "nope"}}]}, "agents[0].memory.type", "unknown"),
        ({"agents": []}, "agents", "non-empty"),
        ({"memory_middleware": ["logging"]}, "memory", "missing"),
        ("memory: [unclosed", "<yaml>", "not valid YAML"),
    ],
)
def test_errors_name_the_key(doc: object, key: str, words: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HELIX_REDIS_URL", raising=False)
    with pytest.raises(ConfigError) as err:
        load_config(doc)  # type: ignore[arg-type]
    assert err.value.field == key
    assert words in str(err.value)


async def test_unknown_middleware_is_named() -> None:
    from helix_es import open_memory

    with pytest.raises(ConfigError, match=r"memory_middleware\[1\].*'audit'"):
        async with open_memory({"memory": {}, "memory_middleware": ["logging", "audit"]}, session_id="s"):
            pass


def test_adapter_mappings_take_a_pattern_for_projectors_only() -> None:
    from helix_es.config import audit_config, load_section, load_served

    pg = {"store": "postgres", "dsn": "postgresql://x/y"}
    doc = {"log": {"type": "kafka"}, "checkpoints": {**pg, "namespace": "*"}, "store": {**pg, "namespace": "t-*"}}
    assert [c.memory.served for c in load_served(doc)] == [("t-*",), ("*",)]
    assert audit_config(doc).memory.namespace == "*"  # audit and forget take --namespace
    for section in ("checkpoints", "store"):  # a saver or a store opens one namespace
        with pytest.raises(ConfigError, match="one concrete") as err:
            load_section(doc, section)
        assert err.value.field == f"{section}.namespace"
    with pytest.raises(ConfigError, match="projectors of a Kafka log") as err:
        load_served({**doc, "log": {"type": "embedded"}})
    assert err.value.field == "store.namespace"

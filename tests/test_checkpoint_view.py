"""The checkpoint view's fold, and every store's rows against it: the suite is
`tests.contracts.checkpoint_store.CheckpointStoreContract`; each class here runs it on one adapter."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from helix_es.model import names
from helix_es.stores.memory.checkpoints import MemoryCheckpoints
from helix_es.stores.ports import CheckpointStore
from helix_es.stores.postgres.checkpoints import PostgresCheckpoints
from helix_es.stores.redis.checkpoints import RedisCheckpoints
from tests.conftest import unique
from tests.contracts.checkpoint_store import CheckpointStoreContract, records, reference, ser


def test_fold_semantics() -> None:
    threads = reference(records("ns", "t"))
    a, b = threads["a"], threads["b"]
    assert {ns: sorted(rows) for ns, rows in a.checkpoints.items()} == {"": ["04"], "child": []}
    assert list(a.writes) == [("", "04")]
    assert sorted(a.blobs) == [("", "x", '"3"'), ("", "y", '"-"'), ("", "z", '"4"'), ("child", "z", '"9"')]
    assert sorted(b.checkpoints[""]) == ["05"] and not b.writes
    assert b.blobs == {("", "x", '"5"'): ser("x5")}
    # Before the deletions: the regular write kept its first value, the special one the last.
    early = reference(records("ns", "t")[:3])["a"]
    rows = early.writes[("", "01")]
    assert rows[("t1", 0)].value == ser("first") and rows[("t1", -1)].value == ser("again")


class TestMemoryCheckpoints(CheckpointStoreContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[CheckpointStore]:
        made = MemoryCheckpoints(unique("cpview"))
        yield made
        await made.close()


class TestPostgresCheckpoints(CheckpointStoreContract):
    @pytest.fixture
    async def store(self, postgres_dsn: str) -> AsyncIterator[CheckpointStore]:
        made = PostgresCheckpoints(postgres_dsn, unique("cpview"))
        yield made
        await made.close()


class RedisCheckpointsContract(CheckpointStoreContract):
    """Redis writes a batch's thread rows, then the checkpoint (on a cluster, in separate slots)."""

    url_fixture = "redis_url"

    @pytest.fixture
    async def store(self, request: pytest.FixtureRequest) -> AsyncIterator[CheckpointStore]:
        made = RedisCheckpoints(request.getfixturevalue(self.url_fixture), unique("cpview"))
        yield made
        await made.close()

    async def test_a_replay_its_guards_skip_moves_the_checkpoint(self, store: CheckpointStore) -> None:
        """A projector killed between the threads' rows and the checkpoint leaves guards ahead of it.
        The replay its guards skip whole still moves the checkpoint; it did not, and a projector at the
        log's end saw that partition behind (or its checkpoint gone) for good."""
        assert isinstance(store, RedisCheckpoints)
        namespace = unique("ns")
        topic = f"helix.memory.{namespace}"
        recs = records(namespace, topic)
        assert (await store.apply(recs)).events == len(recs)
        client = await store._client()  # the kill between the threads' write and the checkpoint's
        await client.hdel(names.checkpoint_key(store.name), f"{topic}:0")
        assert await store.checkpoint(topic, 0) is None
        assert (await store.apply(recs)).events == 0  # every thread's guard has it
        assert await store.checkpoint(topic, 0) == len(recs) - 1


class TestRedisCheckpoints(RedisCheckpointsContract):
    pass


class TestRedisClusterCheckpoints(RedisCheckpointsContract):
    url_fixture = "redis_cluster_url"

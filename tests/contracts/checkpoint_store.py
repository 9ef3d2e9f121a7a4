"""`CheckpointStore`: a LangGraph thread's checkpoint, blob and write rows, folded as
`helix_es.views.checkpoints.fold` folds them; a replay changes nothing; drop is scoped."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from helix_es.model.events import (
    ChannelBlob,
    CheckpointSaved,
    CheckpointsDeleted,
    Event,
    MemoryForgotten,
    Payload,
    PendingWrite,
    Position,
    Record,
    Serialized,
    SessionErased,
    WritesSaved,
)
from helix_es.stores.ports import CheckpointStore
from helix_es.views.checkpoints import Thread, fold
from tests.conftest import unique


def ser(text: str) -> Serialized:
    return Serialized("json", text.encode())


def blob(channel: str, value: str) -> Serialized:
    return Serialized("empty", b"") if value == "-" else ser(channel + value)


def saved(cid: str, parent: str | None, run: str | None, ns: str = "", **blobs: str) -> CheckpointSaved:
    return CheckpointSaved(
        ns,
        cid,
        parent,
        ser(f"cp-{cid}"),
        ser(f"md-{cid}"),
        run,
        tuple(
            ChannelBlob(ch, f'"{v}"', ser(ch + v) if v != "-" else Serialized("empty", b"")) for ch, v in blobs.items()
        ),
    )


def writes(cid: str, task: str, *rows: tuple[int, str, str], ns: str = "") -> WritesSaved:
    return WritesSaved(ns, cid, task, f"path-{task}", tuple(PendingWrite(i, ch, ser(v)) for i, ch, v in rows))


GONE = ("", "x", '"2"')  # a blob the last deletion names
# Two threads; the special channel (idx < 0) replaces, a regular write never overwrites.
SCRIPT: list[tuple[str, Payload]] = [
    ("a", saved("01", None, "r1", x="1", y="-")),
    ("a", writes("01", "t1", (0, "x", "first"), (-1, "__error__", "boom"))),
    ("a", writes("01", "t1", (0, "x", "second"), (-1, "__error__", "again"))),
    ("a", saved("02", "01", "r1", x="2")),
    ("a", saved("01", None, "r2", ns="child", z="9")),
    ("b", saved("01", None, "r2", x="7")),
    ("b", writes("01", "t9", (0, "x", "w"))),
    ("a", saved("03", "02", "r3", x="3")),
    ("a", writes("03", "t2", (0, "x", "p"))),
    ("a", CheckpointsDeleted("runs", ("r2",))),  # the child namespace's checkpoint of r2 goes
    ("a", writes("02", "t3", (0, "y", "q"))),
    ("a", CheckpointsDeleted("keep_latest")),  # 01 and 02 go, with their writes; 03 stays
    ("b", CheckpointsDeleted("thread")),
    ("b", saved("05", None, "r5", x="5")),  # a deleted thread starts afresh
    ("a", saved("04", "03", "r4", z="4")),
    ("a", writes("04", "t4", (0, "z", "r"))),
    # 03 goes with its writes (zz is none), and the blobs the saver found no checkpoint refers to
    ("a", CheckpointsDeleted("checkpoints", checkpoints=(("", "03"), ("", "zz")), blobs=(("", "x", '"1"'), GONE))),
]


def records(namespace: str, topic: str) -> list[Record]:
    return [
        Record(Event(namespace, thread, payload), Position(topic, 0, offset))
        for offset, (thread, payload) in enumerate(SCRIPT)
    ]


def reference(recs: list[Record]) -> dict[str, Thread]:
    threads: dict[str, Thread] = {}
    for r in recs:
        before = threads.get(r.event.session_id, Thread())
        copy = before.copy()
        threads[r.event.session_id] = fold(before, r.event)
        assert before == copy  # pure: the state folded from is unchanged
    return threads


async def rows_of(store: CheckpointStore, namespace: str, thread: str, ref: Thread) -> dict[str, Any]:
    listed = await store.listing(namespace, thread, None, None, None)
    out: dict[str, Any] = {"checkpoints": sorted((s.checkpoint_ns, s.checkpoint_id, s) for s in listed)}
    out["writes"] = {
        (s.checkpoint_ns, s.checkpoint_id): sorted(
            await store.writes(namespace, thread, s.checkpoint_ns, s.checkpoint_id), key=lambda w: (w.task_id, w.idx)
        )
        for s in listed
    }
    wanted: dict[str, list[tuple[str, str]]] = {}
    for ns, channel, version in ref.blobs:
        wanted.setdefault(ns, []).append((channel, version))
    out["blobs"] = {ns: await store.blobs(namespace, thread, ns, pairs) for ns, pairs in wanted.items()}
    return out


def expected_rows(ref: Thread) -> dict[str, Any]:
    return {
        "checkpoints": sorted(
            (s.checkpoint_ns, s.checkpoint_id, s) for rows in ref.checkpoints.values() for s in rows.values()
        ),
        "writes": {
            (s.checkpoint_ns, s.checkpoint_id): sorted(
                ref.writes.get((s.checkpoint_ns, s.checkpoint_id), {}).values(), key=lambda w: (w.task_id, w.idx)
            )
            for rows in ref.checkpoints.values()
            for s in rows.values()
        },
        "blobs": {
            ns: {ch: v for (n, ch, _), v in ref.blobs.items() if n == ns and v.type != "empty"}
            for ns in {n for n, _, _ in ref.blobs}
        },
    }


class CheckpointStoreContract:
    """Subclasses override `store`: a fresh adapter over its real service, closed after the test."""

    @pytest.fixture
    async def store(self) -> AsyncIterator[CheckpointStore]:
        raise NotImplementedError("a CheckpointStoreContract subclass provides the `store` fixture")
        yield  # pragma: no cover

    async def test_store_matches_fold_and_replays_change_nothing(self, store: CheckpointStore) -> None:
        namespace = unique("ns")
        topic = f"helix.memory.{namespace}"
        recs = records(namespace, topic)
        ref = reference(recs)
        applied = 0
        for i in range(0, len(recs), 3):
            applied += (await store.apply(recs[i : i + 3])).events
        assert applied == len(recs)
        assert await store.checkpoint(topic, 0) == len(recs) - 1
        for thread, state in ref.items():
            assert await rows_of(store, namespace, thread, state) == expected_rows(state), thread
        # A re-delivery from the start (a projector that lost its place) folds nothing again.
        assert (await store.apply(recs)).events == 0
        for thread, state in ref.items():
            assert await rows_of(store, namespace, thread, state) == expected_rows(state), thread
        assert await store.runs(namespace, ["r4"]) == ["a"] and await store.runs(namespace, ["r3", "r2"]) == []
        latest = await store.get(namespace, "a", "", None)
        assert latest is not None and latest.checkpoint_id == "04" and latest.parent_checkpoint_id == "03"
        assert await store.blobs(namespace, "a", "", [GONE[1:], ("x", '"1"'), ("x", '"3"')]) == {"x": ser("x3")}
        # A rebuild target readers left: dropped, every thread and checkpoint of the namespace goes.
        await store.drop([namespace], [topic])
        assert await store.checkpoint(topic, 0) is None
        assert await store.listing(namespace, None, None, None, None) == []

    async def test_forgotten_thread_leaves_every_store(self, store: CheckpointStore) -> None:
        """`SessionErased` (helix-es forget) drops the thread's rows, as a deleted thread's."""
        namespace = unique("ns")
        topic = f"helix.memory.{namespace}"
        script: list[tuple[str, Payload]] = [
            ("a", saved("01", None, "r1", x="1")),
            ("a", writes("01", "t1", (0, "x", "w"))),
            ("b", saved("01", None, "r1", x="2")),
            ("a", SessionErased("forgotten")),
        ]
        recs = [Record(Event(namespace, t, p), Position(topic, 0, i)) for i, (t, p) in enumerate(script)]
        assert (await store.apply(recs)).events == len(recs)
        assert await store.listing(namespace, "a", None, None, None) == []
        assert await store.writes(namespace, "a", "", "01") == []
        assert await store.blobs(namespace, "a", "", [("x", '"1"')]) == {}
        assert [s.thread_id for s in await store.listing(namespace, None, None, None, None)] == ["b"]

    async def test_a_ttl_forgetting_spares_a_thread_that_saved_after_it_looked(self, store: CheckpointStore) -> None:
        """A TTL sweep's `MemoryForgotten` names the newest checkpoint it saw: the thread goes whole
        (every namespace, blob and write) unless it holds a newer one by the time the event folds."""
        namespace = unique("ns")
        topic = f"helix.memory.{namespace}"

        def ttl(seen: str) -> MemoryForgotten:
            return MemoryForgotten(("checkpoints",), "ttl", "idle", session=True, ids=(seen,))

        script: list[tuple[str, Payload]] = [
            ("a", saved("01", None, "r1", x="1")),
            ("a", saved("01", None, "r1", ns="child", z="1")),
            ("a", writes("01", "t1", (0, "x", "w"))),
            ("b", saved("01", None, "r1", x="2")),
            ("b", saved("02", "01", "r2", x="3")),  # saved after the sweep looked (it saw 01)
            ("a", ttl("01")),
            ("b", ttl("01")),
            ("c", saved("07", None, "r1", x="4")),
        ]
        recs = [Record(Event(namespace, t, p), Position(topic, 0, i)) for i, (t, p) in enumerate(script)]
        ref = reference(recs)
        assert (await store.apply(recs)).events == len(recs)
        assert ref["a"] == Thread() and [cid for cid in ref["b"].checkpoints[""]] == ["01", "02"]
        for thread, state in ref.items():
            assert await rows_of(store, namespace, thread, state) == expected_rows(state), thread
        assert await store.writes(namespace, "a", "", "01") == []
        assert [(s.thread_id, s.checkpoint_id) for s in await store.latest(namespace)] == [("b", "02"), ("c", "07")]
        assert await store.latest(unique("ns")) == []

    async def test_repeated_rows_in_one_event_fold_as_the_fold_does(self, store: CheckpointStore) -> None:
        """One event naming a special write's (task, idx) twice, or a blob twice: the fold keeps the last
        of each (a regular write, the first). PostgreSQL's one-statement insert refused such an event
        (a row hit twice by ON CONFLICT DO UPDATE), so the projector stopped on it for good."""
        namespace = unique("ns")
        topic = f"helix.memory.{namespace}"
        twice = CheckpointSaved(
            "",
            "01",
            None,
            ser("cp"),
            ser("md"),
            None,
            (ChannelBlob("x", "1", ser("old")), ChannelBlob("x", "1", ser("new"))),
        )
        script: list[Payload] = [
            twice,
            writes("01", "t1", (-1, "__error__", "boom"), (-1, "__error__", "again"), (0, "x", "a"), (0, "x", "b")),
            writes("01", "t1", (-3, "__interrupt__", "i1"), (-3, "__interrupt__", "i2")),
        ]
        recs = [Record(Event(namespace, "a", p), Position(topic, 0, i)) for i, p in enumerate(script)]
        ref = reference(recs)["a"]
        assert (await store.apply(recs)).events == len(recs)
        assert await rows_of(store, namespace, "a", ref) == expected_rows(ref)
        assert await store.blobs(namespace, "a", "", [("x", "1")]) == {"x": ser("new")}
        kept = {(w.idx, w.value) for w in await store.writes(namespace, "a", "", "01")}
        assert kept == {(-1, ser("again")), (0, ser("a")), (-3, ser("i2"))}

    async def test_writes_that_came_after_their_checkpoint_was_deleted_fold_as_the_fold_does(
        self, store: CheckpointStore
    ) -> None:
        """Writes can land after their checkpoint's deletion (a task finishing while its thread is pruned).
        They stay until their thread is deleted, as in the fold: PostgreSQL dropped them on a deletion that
        listed their (gone) checkpoint again, and Redis kept them past their thread's deletion, to show up
        again under a checkpoint saved later with that id."""
        namespace = unique("ns")
        topic = f"helix.memory.{namespace}"
        script: list[tuple[str, Payload]] = [
            ("a", saved("01", None, "r1", x="1")),
            ("a", saved("02", "01", "r1", x="2")),
            ("a", CheckpointsDeleted("checkpoints", checkpoints=(("", "01"),))),
            ("a", writes("01", "t1", (0, "x", "late"))),
            ("a", CheckpointsDeleted("checkpoints", checkpoints=(("", "01"),))),  # gone already: its writes stay
            ("b", saved("01", None, "r1", x="1")),
            ("b", CheckpointsDeleted("keep_latest")),
            ("b", saved("02", "01", "r1", x="2")),
            ("b", CheckpointsDeleted("checkpoints", checkpoints=(("", "01"),))),
            ("b", writes("01", "t1", (0, "x", "late"))),
            ("b", CheckpointsDeleted("thread")),  # every row of the thread goes, those writes too
            ("b", saved("01", None, "r1", x="1")),
        ]
        recs = [Record(Event(namespace, t, p), Position(topic, 0, i)) for i, (t, p) in enumerate(script)]
        ref = reference(recs)
        assert (await store.apply(recs)).events == len(recs)
        for thread, state in ref.items():
            for cid in ("01", "02"):
                got = sorted(await store.writes(namespace, thread, "", cid), key=lambda w: (w.task_id, w.idx))
                assert got == sorted(state.writes.get(("", cid), {}).values(), key=lambda w: (w.task_id, w.idx))
        assert [w.value for w in await store.writes(namespace, "a", "", "01")] == [ser("late")]
        assert await store.writes(namespace, "b", "", "01") == []

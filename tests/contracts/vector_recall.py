"""`VectorStore.rank`, the port under `recall`: each ranker's best candidates under the recall's filters.

Every vector store's test class subclasses it beside `VectorStoreContract`. Batches are folded through a
`VectorProjection` whose view keeps keywords (`search: hybrid`), as a projector would.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from itertools import pairwise

import numpy as np
import pytest

from helix_es import Message
from helix_es.model import names
from helix_es.model.errors import InvalidInput
from helix_es.model.events import MemoryCleared, MessageAdded, MessageRetracted, Position, SessionErased
from helix_es.model.recall import RecallHit, make_recall
from helix_es.projection.vector import VectorProjection
from helix_es.providers.embed import HashEmbedder
from helix_es.stores.ports import SessionKey
from helix_es.stores.ports.vector import RankAsk, VectorStore
from tests.conftest import unique
from tests.contracts.vector_store import T0, entry, record, said, unit, write

CHAT = [
    ("alice", "Caroline", "I moved to Porto last September after the job offer"),
    ("alice", "Dmitri", "My dog is a husky called Miso, she sheds everywhere"),
    ("bob", "Caroline", "Porto has the best custard tarts, I eat them every morning"),
    ("bob", "Dmitri", "I started learning the ukulele on Tuesday evenings"),
    ("alice", "Caroline", "The weather today is grey and rainy again"),
]


def hybrid(store: VectorStore) -> VectorProjection:
    return VectorProjection(unique("vector-recall"), HashEmbedder(64), store, top_k=5, search="hybrid")


async def fill(p: VectorProjection, ns: str) -> None:
    records = [
        record(ns, 0, i, i, MessageAdded(Message("user", text, name=who, metadata={"speaker": who})), session)
        for i, (session, who, text) in enumerate(CHAT)
    ]
    await p.apply(records)


async def recall(p: VectorProjection, ns: str, query: str, **options: object) -> list[RecallHit]:
    limit = options.pop("limit", 10)
    hits = await p.recall(SessionKey(ns, "alice"), make_recall(query, limit, **options), None)  # type: ignore[arg-type]
    assert hits is not None
    return hits


def texts(hits: list[RecallHit]) -> list[str]:
    return [h.message.content for h in hits]


class VectorRecallContract:
    async def test_keywords_rank_the_turn_that_shares_the_rare_words_first(self, store: VectorStore) -> None:
        p, ns = hybrid(store), unique("rec")
        await fill(p, ns)
        hits = await recall(p, ns, "Which instrument is Dmitri learning, the ukulele?", mode="keyword", explain=True)
        assert texts(hits)[0] == CHAT[3][2]
        top = hits[0]
        assert (top.session_id, top.position) == ("bob", Position(names.topic(ns), 0, 3))
        assert top.occurred_at == T0 + timedelta(seconds=3)  # no occurred_at on the message: its event time
        assert top.explain is not None and top.explain["mode"] == "keyword"
        assert top.explain["keyword"]["rank"] == 1 and top.score == top.explain["keyword"]["score"] > 0
        assert all(a.score >= b.score for a, b in pairwise(hits))

    async def test_hybrid_fuses_both_rankers_and_honours_the_limit(self, store: VectorStore) -> None:
        p, ns = hybrid(store), unique("rec")
        await fill(p, ns)
        hits = await recall(p, ns, "Where did Caroline move to? Porto?", limit=2, explain=True)
        assert len(hits) == 2  # limit is what the caller gets, not top_k
        assert CHAT[0][2] in texts(hits)
        assert all(h.explain is not None and h.explain["mode"] == "hybrid" for h in hits)
        assert any("keyword" in h.explain and "vector" in h.explain for h in hits if h.explain)
        assert len(await recall(p, ns, "Porto", limit=50)) == len(CHAT)  # all of them, never more

    async def test_filters_apply_before_ranking(self, store: VectorStore) -> None:
        p, ns = hybrid(store), unique("rec")
        await fill(p, ns)
        for mode in ("hybrid", "vector", "keyword"):
            only_bob = await recall(p, ns, "Porto custard ukulele", sessions=["bob"], mode=mode)
            assert {h.session_id for h in only_bob} == {"bob"}, mode
            assert len(only_bob) == 2 or mode == "keyword"
            said_by = await recall(p, ns, "Porto", where={"speaker": "Dmitri"}, mode=mode)
            assert all(h.message.name == "Dmitri" for h in said_by), mode
            window = await recall(
                p, ns, "Porto husky", after=T0 + timedelta(seconds=0.5), before=T0 + timedelta(seconds=2.5), mode=mode
            )
            assert {h.position.offset for h in window} <= {1, 2}, mode
            assert await recall(p, ns, "Porto", sessions=["nobody"], mode=mode) == []

    async def test_substring_is_case_insensitive_and_oldest_first(self, store: VectorStore) -> None:
        p, ns = hybrid(store), unique("rec")
        await fill(p, ns)
        hits = await recall(p, ns, "PORTO", mode="substring")
        assert texts(hits) == [CHAT[0][2], CHAT[2][2]]
        assert await recall(p, ns, "porto", mode="substring", where={"speaker": "Dmitri"}) == []

    async def test_clears_retractions_and_erasures_leave_the_keyword_index(self, store: VectorStore) -> None:
        p, ns = hybrid(store), unique("rec")
        await fill(p, ns)
        n = len(CHAT)
        await p.apply([record(ns, 0, n, n, MessageRetracted(None, "wrong"), "alice")])  # the grey weather
        assert CHAT[4][2] not in texts(await recall(p, ns, "weather grey rainy", mode="keyword"))
        await p.apply([record(ns, 0, n + 1, n + 1, SessionErased(), "bob")])
        assert {h.session_id for h in await recall(p, ns, "Porto custard ukulele", mode="keyword")} <= {"alice"}
        await p.apply([record(ns, 0, n + 2, n + 2, MemoryCleared(), "alice")])
        for mode in ("keyword", "hybrid", "substring"):
            assert await recall(p, ns, "Porto husky", mode=mode) == [], mode
        await p.apply([record(ns, 0, n + 3, n + 3, said("a fresh start in Porto"), "alice")])
        assert texts(await recall(p, ns, "Porto", mode="keyword")) == ["a fresh start in Porto"]

    async def test_a_recall_waits_for_the_callers_write(self, store: VectorStore) -> None:
        p, ns = hybrid(store), unique("rec")
        await fill(p, ns)
        ahead = Position(names.topic(ns), 0, len(CHAT))
        ask = make_recall("Porto", 5)
        assert await p.recall(SessionKey(ns, "alice"), ask, ahead) is None
        assert await p.recall(SessionKey(ns, "alice"), ask, Position(names.topic(ns), 0, 0)) is not None

    async def test_a_view_without_keywords_refuses_keyword_modes(self, store: VectorStore) -> None:
        p, ns = VectorProjection(unique("vector-recall"), HashEmbedder(64), store), unique("rec")
        await fill(p, ns)
        with pytest.raises(InvalidInput, match="search: hybrid"):
            await recall(p, ns, "Porto", mode="keyword")
        assert texts(await recall(p, ns, "Porto", mode="substring")) == [CHAT[0][2], CHAT[2][2]]
        assert len(await recall(p, ns, "Porto")) == len(CHAT)  # vector: every entry is some distance away

    async def test_occurred_at_orders_and_filters_instead_of_the_event_time(self, store: VectorStore) -> None:
        view, model, ns = unique("vector-recall"), unique("m"), unique("rec")
        old = replace(entry(ns, 0, 10, "said long ago"), occurred_at=T0 - timedelta(days=300))
        new = entry(ns, 1, 11, "said just now")
        await store.write(view, model, write(ns, [old, new], [unit(1, 0, 0, 0), unit(1, 0, 0, 0)], 1))
        ask = make_recall("said", 10, before=T0)
        ranking = await store.rank(view, ns, RankAsk(ask, 10, unit(1, 0, 0, 0), None, "said"), None)
        assert ranking is not None
        for ranked in ranking.ranked:
            assert [ranking.found[int(i)].message.content for i in ranked.ids] == ["said long ago"], ranked.name
        assert ranking.found[int(ranking.ranked[0].ids[0])].occurred_at == T0 - timedelta(days=300)
        assert np.all(np.isfinite(ranking.ranked[0].scores))

    async def test_substring_takes_like_wildcards_literally(self, store: VectorStore) -> None:
        p, ns = hybrid(store), unique("rec")
        texts_ = ["50% off flights", "500 off flights", "snake_case names", "snakeXcase names", "a \\ backslash"]
        await p.apply([record(ns, 0, i, i, said(t)) for i, t in enumerate(texts_)])
        assert texts(await recall(p, ns, "50%", mode="substring")) == ["50% off flights"]
        assert texts(await recall(p, ns, "SNAKE_", mode="substring")) == ["snake_case names"]
        assert texts(await recall(p, ns, "\\", mode="substring")) == ["a \\ backslash"]

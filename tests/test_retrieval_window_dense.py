"""The window's pooled vector as a candidate source: a turn found by what it and its neighbours say together."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from memory_core import Conversation, Document, FetchRequest, MemoryMeta, Namespace, Role, Turn
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.engines.sqlite import windowed as windowed_module
from memory_core.engines.sqlite.pooled import PooledIndex
from memory_core.engines.sqlite.rerank import RERANK_POOL
from memory_core.query import FetchMode
from memory_core.retrieval.dense import DENSE_POOL
from memory_core.retrieval.embedder import Encoded, HashEmbedder
from memory_core.retrieval.window_dense import bound, neighbours, window_cosines, window_top

DIMS = 64


def unit(*parts: tuple[int, float]) -> np.ndarray:
    v = np.zeros(DIMS, dtype=np.float32)
    for axis, value in parts:
        v[axis] = value
    return v / np.linalg.norm(v)


def test_neighbours_are_positions_among_the_keys_and_the_lowest_next_turn_wins() -> None:
    keys = np.array([3, 5, 8, 9, 12], dtype=np.int64)
    prev = np.array([-1, 3, 5, 5, 40], dtype=np.int64)  # 8 and 9 both name 5; 40 is not a key
    before, after = neighbours(keys, prev)
    assert before.tolist() == [-1, 0, 1, 1, -1]
    assert after.tolist() == [1, 2, -1, -1, -1]  # 5 follows 3; 8 (not 9) follows 5
    empty = np.zeros(0, dtype=np.int64)
    assert [a.tolist() for a in neighbours(empty, empty)] == [[], []]


def test_the_bound_holds_and_the_top_is_the_exact_top() -> None:
    rng = np.random.default_rng(11)
    vectors = np.abs(rng.normal(size=(300, 16))).astype(np.float32)  # non-negative: pairwise cosines ≥ 0
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = vectors[7] + vectors[200]
    query /= np.linalg.norm(query)
    keys = np.arange(300, dtype=np.int64) * 2
    prev = np.where(np.arange(300) % 10 == 0, -1, keys - 2)  # threads of ten turns
    before, after = neighbours(keys, prev)
    cos = vectors @ query

    def gather(at: np.ndarray) -> np.ndarray:
        out: np.ndarray = vectors[at]
        return out

    every = np.arange(300, dtype=np.int64)
    exact = window_cosines(cos, before, after, every, gather)
    assert np.all(bound(cos, before, after) >= exact - 1e-6)
    lonely = (before < 0) & (after < 0)
    assert np.allclose(exact[lonely], cos[lonely])  # a turn alone: its own cosine
    brute = [int(i) for i in np.lexsort((every, -exact))[:12]]
    assert window_top(cos, before, after, gather, 12, widen=25).tolist() == brute  # every row rescored
    skip = np.zeros(300, dtype=bool)
    skip[brute[:3]] = True
    assert window_top(cos, before, after, gather, 9, skip, widen=34).tolist() == brute[3:]
    assert window_top(cos, before, after, gather, 0).tolist() == []
    # by default the 4 × 12 best by the bound are rescored: the exact order among them
    first = np.argsort(-bound(cos, before, after), kind="stable")[:48]
    among = [int(first[i]) for i in np.lexsort((first, -exact[first]))[:12]]
    assert window_top(cos, before, after, gather, 12).tolist() == among


class Topics(HashEmbedder):
    """One pooled vector (and the same single token vector) per text, by the topic its words name."""

    name = "topics"
    dims = DIMS

    def encode(self, texts: Sequence[str]) -> Encoded:
        rows = []
        for t in texts:
            if "wanted" in t:
                rows.append(unit((0, 1.0)))  # the query
            elif "colour" in t:
                rows.append(unit((0, 1.0), (3, 1.0)))
            elif "turquoise" in t:
                rows.append(unit((0, 1.0), (5, 1.0)))
            elif "shop" in t:
                rows.append(unit((4, 1.0)))
            elif "medium" in t:
                rows.append(unit((0, 0.45), (2, (1 - 0.45**2) ** 0.5)))
            else:
                rows.append(unit((1, 1.0)))
        pooled = np.array(rows, dtype=np.float32)
        return Encoded(pooled, [pooled[[i]] for i in range(len(texts))])


def stored(engine: SQLiteEngine) -> Conversation:
    """Reports the lexical stage prefers, medium ones the turn's own pooled vector prefers, and a thread whose
    middle turn only its neighbours place: a question about a colour, the report from the shop, turquoise."""
    reports = [Document.of(f"report report weekly number {i}", MemoryMeta()) for i in range(RERANK_POOL + 20)]
    medium = [Document.of(f"report medium {i}", MemoryMeta()) for i in range(DENSE_POOL + 10)]
    for start in range(0, len(reports + medium), 50):
        engine.store_many((reports + medium)[start : start + 50])
    texts = ["what colour was the cover", "the report I took from the shop", "turquoise, like the sea"]
    thread = [
        Conversation(
            turns=(Turn(role=Role.USER, text=text),),
            meta=MemoryMeta(namespace=Namespace.parse("ws:a"), thread_id="t", turns={"first": i, "last": i}),
        )
        for i, text in enumerate(texts)
    ]
    engine.store_many(thread)
    engine.embed_backlog()
    return thread[1]


def test_a_turn_only_its_window_places_is_nominated_and_ranked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    request = FetchRequest(query="wanted report", mode=FetchMode.HYBRID, limit=RERANK_POOL)
    with SQLiteEngine(tmp_path / "m.db", embedder=Topics()) as engine:
        target = stored(engine)
        assert target.id in [h.id for h in engine.fetch(request).hits]
        keyword = engine.fetch(request.model_copy(update={"mode": FetchMode.KEYWORD})).hits
        assert target.id not in [h.id for h in keyword]  # below the lexical head
        monkeypatch.setattr(windowed_module.window_candidates, "__defaults__", (0,))
        assert target.id not in [h.id for h in engine.fetch(request).hits]  # the turn's own vector misses it


def test_the_pooled_copy_holds_previous_turns_and_answers_a_fetchs_second_source_from_its_first(
    tmp_path: Path,
) -> None:
    with SQLiteEngine(tmp_path / "m.db", embedder=Topics()) as engine:
        target = stored(engine)
        conn = sqlite3.connect(tmp_path / "m.db")
        seqs = {str(i): int(s) for s, i in conn.execute("SELECT seq, id FROM items")}
        keys = np.array(sorted(seqs.values()), dtype=np.int64)
        index, query = PooledIndex(), unit((0, 1.0))
        first = index.scored(conn, "topics", keys, query)
        assert first.keys.tolist() == keys.tolist()  # every item embedded
        middle = int(np.searchsorted(keys, seqs[target.id]))
        assert first.prev[middle] == seqs[target.id] - 1  # the thread's first turn, stored just before it
        assert first.prev[0] == -1  # a document has no previous turn
        assert index.scored(conn, "topics", keys, query) is first  # the same arrays: the pooled source's answer
        engine.store(Document.of("report medium late", MemoryMeta()))
        engine.embed_backlog()  # a row written since, not among the keys: their answer holds
        assert index.scored(conn, "topics", keys, query) is first
        assert len(index.scored(conn, "hash", keys, query).keys) == 0  # another model's: none embedded
        again = index.scored(conn, "topics", keys, query)  # the copy was emptied: read and scored again
        assert again is not first and np.array_equal(again.cos, first.cos) and np.array_equal(again.prev, first.prev)
        assert index.scored(conn, "topics", keys.copy(), query) is not again  # other candidates: scored anew
        conn.close()

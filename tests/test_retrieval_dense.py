"""The pooled-vector candidate source: what the lexical stage's top 100 leaves out, the query's pooled vector finds."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from memory_core import Document, FetchRequest, MemoryMeta
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.engines.sqlite import rerank as rerank_module
from memory_core.engines.sqlite.pooled import PooledIndex
from memory_core.engines.sqlite.rerank import RERANK_POOL
from memory_core.query import FetchMode
from memory_core.retrieval.dense import nearest
from memory_core.retrieval.embedder import Encoded, HashEmbedder


class Colour(HashEmbedder):
    """Pooled and token vectors that say only "about a colour" (axis 0) or "not" (axis 1)."""

    name = "colour"

    def encode(self, texts: Sequence[str]) -> Encoded:
        axis = [0 if ("turquoise" in t or "colour" in t) else 1 for t in texts]
        eye = np.eye(64, dtype=np.float32)
        return Encoded(eye[axis], [eye[[a]] for a in axis])


def stored(engine: SQLiteEngine) -> Document:
    """``RERANK_POOL + 20`` reports the lexical stage prefers, and a turquoise one it ranks last."""
    reports = [Document.of(f"report report weekly number {i}", MemoryMeta()) for i in range(RERANK_POOL + 20)]
    for start in range(0, len(reports), 50):
        engine.store_many(reports[start : start + 50])
    target = Document.of("the long appendix of the quarterly report has a turquoise cover page", MemoryMeta())
    engine.store(target)
    engine.embed_backlog()
    return target


def test_an_item_beyond_the_lexical_top_is_nominated_by_its_pooled_vector_and_ranked_by_the_fusion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = FetchRequest(query="report colour", mode=FetchMode.HYBRID, limit=RERANK_POOL)
    with SQLiteEngine(tmp_path / "m.db", embedder=Colour()) as engine:
        target = stored(engine)
        hybrid = [h.id for h in engine.fetch(request).hits]
        assert target.id in hybrid  # nominated by the pooled vector, ranked by the fusion
        keyword = engine.fetch(request.model_copy(update={"mode": FetchMode.KEYWORD})).hits
        assert target.id not in [h.id for h in keyword]  # the lexical stage alone ranks it below its top 100
        monkeypatch.setattr(rerank_module.dense_candidates, "__defaults__", (0,))
        assert target.id not in [h.id for h in engine.fetch(request).hits]  # without the source: out of reach


def test_the_pooled_index_reads_only_new_rows_and_follows_a_model_change(tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "m.db", embedder=Colour()) as engine:
        stored(engine)
    conn = sqlite3.connect(tmp_path / "m.db")
    index = PooledIndex()
    index.refresh(conn, "colour", 64)
    keys = np.array(sorted(r[0] for r in conn.execute("SELECT seq FROM items")), dtype=np.int64)
    query = np.eye(64, dtype=np.float32)[0]
    assert index.nearest(keys, query, 1) == [int(keys[-1])]  # the turquoise one
    assert index.nearest(keys[:10], query, 2) == [int(keys[0]), int(keys[1])]  # only among the given keys
    reads: list[str] = []
    conn.set_trace_callback(reads.append)
    index.refresh(conn, "colour", 64)  # nothing new: one statement (instance, last n), no range read
    assert len(reads) == 1 and "pooled" not in reads[0]
    index.refresh(conn, "hash", 64)  # another model's vectors: none stored
    assert index.nearest(keys, query, 3) == []
    conn.close()


def test_nearest_orders_by_cosine() -> None:
    rng = np.random.default_rng(7)
    rows = rng.normal(size=(50, 32)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    query = rows[3] + 0.5 * rows[9]
    query /= np.linalg.norm(query)
    best, cos = nearest(rows, query, 5)
    assert best.tolist() == np.argsort(-(rows @ query))[:5].tolist() and best[:2].tolist() == [3, 9]
    assert np.all(np.diff(cos) <= 0) and cos[0] == pytest.approx(float(rows[3] @ query), abs=1e-6)
    assert nearest(rows[:0], query, 5)[0].size == 0 and nearest(rows, query, 0)[0].size == 0

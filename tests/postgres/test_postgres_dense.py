"""PostgreSQL's pooled-vector candidate source: nominations in the host, admitted by the database (issue 14).

The twin of ``tests/test_retrieval_dense.py``: an item the lexical stage ranks below its top 100 is nominated by
its pooled vector and ranked by the fusion; the host's copy of the pooled vectors reads only new rows (in the
statement that opens a read), never nominates outside the reach, and never skips a row whose transaction
committed after a later-numbered one's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import psycopg
import pytest

from memory_core import Document, FetchRequest, MemoryMeta, MetaFilter, Namespace, Reach
from memory_core.engines.postgres import PostgresEngine
from memory_core.engines.postgres import engine as engine_module
from memory_core.engines.postgres import pooled as pooled_module
from memory_core.engines.postgres.fusion import Signals
from memory_core.engines.postgres.pooled import PooledCache
from memory_core.engines.postgres.rerank import RERANK_POOL, dense_nominations
from memory_core.engines.postgres.schema import SCHEMA
from memory_core.engines.postgres.vectors import write
from memory_core.query import FetchMode
from memory_core.retrieval.embedder import Encoded, HashEmbedder

pytestmark = pytest.mark.postgres


class Colour(HashEmbedder):
    """Pooled and token vectors that say only "about a colour" (axis 0) or "not" (axis 1)."""

    name = "colour"

    def encode(self, texts: Sequence[str]) -> Encoded:
        axis = [0 if ("turquoise" in t or "colour" in t) else 1 for t in texts]
        eye = np.eye(64, dtype=np.float32)
        return Encoded(eye[axis], [eye[[a]] for a in axis])


@pytest.fixture
def engine(pg_url: str) -> Iterator[PostgresEngine]:
    with PostgresEngine(pg_url, embedder=Colour()) as opened:
        yield opened


def _stored(engine: PostgresEngine, ns: str = "") -> Document:
    """``RERANK_POOL + 20`` reports the lexical stage prefers, and a turquoise one it ranks last."""
    meta = MemoryMeta(namespace=Namespace.parse(ns)) if ns else MemoryMeta()
    reports = [Document.of(f"report report weekly number {i}", meta) for i in range(RERANK_POOL + 20)]
    for start in range(0, len(reports), 50):
        engine.store_many(reports[start : start + 50])
    target = Document.of("the long appendix of the quarterly report has a turquoise cover page", meta)
    engine.store(target)
    engine.embed_backlog()
    return target


def test_an_item_beyond_the_lexical_top_is_nominated_by_its_pooled_vector_and_ranked_by_the_fusion(
    engine: PostgresEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = _stored(engine)
    request = FetchRequest(query="report colour", mode=FetchMode.HYBRID, limit=RERANK_POOL)
    hybrid = [h.id for h in engine.fetch(request).hits]
    assert target.id in hybrid  # nominated by the pooled vector, ranked by the fusion
    keyword = engine.fetch(request.model_copy(update={"mode": FetchMode.KEYWORD})).hits
    assert target.id not in [h.id for h in keyword]  # the lexical stage alone ranks it below its top 100
    monkeypatch.setattr(engine_module.dense_nominations, "__defaults__", (0,))
    assert target.id not in [h.id for h in engine.fetch(request).hits]  # without the source: out of reach


def test_nominations_stay_inside_the_reach(engine: PostgresEngine) -> None:
    _stored(engine, "team:a")
    other = _stored(engine, "team:b")
    request = FetchRequest(
        query="report colour",
        mode=FetchMode.HYBRID,
        limit=RERANK_POOL,
        filter=MetaFilter(reach=Reach.subtree(Namespace.parse("team:a"))),
    )
    hits = engine.fetch(request).hits
    assert hits and other.id not in [h.id for h in hits]
    assert all(str(h.meta.namespace) == "team:a" for h in hits)
    query = np.eye(64, dtype=np.float32)[0]
    near = engine._pooled.nearest(request.filter, None, query, 5)
    assert near and len(near) == 5  # only team:a's rows are looked at: its turquoise one first
    with psycopg.connect(engine.options.conninfo) as conn:
        ns = dict(conn.execute(f"SELECT seq, ns FROM {SCHEMA}.items WHERE seq = ANY(%s)", (near,)).fetchall())
    assert set(ns.values()) == {"team:a/"}


def _refresh(conn: psycopg.Connection[Any], cache: PooledCache) -> list[Any]:
    refresh = cache.refresh("colour", 64)
    row = conn.execute(f"SELECT {refresh.extra.columns} FROM {refresh.extra.source}", refresh.extra.params).fetchone()
    assert row is not None
    cache.absorb(refresh, list(row))
    return list(row)


def test_the_copy_reads_new_rows_only_and_never_skips_a_late_commit(engine: PostgresEngine, pg_url: str) -> None:
    _stored(engine)
    cache = PooledCache()
    with psycopg.connect(pg_url, autocommit=True) as reader:
        _refresh(reader, cache)
        assert cache.size == RERANK_POOL + 21
        assert _refresh(reader, cache)[2] is None  # nothing new: no row moves
        docs = [Document.of(f"a turquoise note {i}", MemoryMeta()) for i in range(2)]
        engine.store_many(docs)
        seqs = [
            int(r[0])
            for r in reader.execute(
                f"SELECT seq FROM {SCHEMA}.items WHERE id = ANY(%s) ORDER BY seq", ([d.id for d in docs],)
            )
        ]
        encoded = Colour().encode(["turquoise", "turquoise"])
        early = psycopg.connect(pg_url)  # begins first (lower transaction id), commits last
        late = psycopg.connect(pg_url)
        try:
            write(early, "colour", seqs[:1], Encoded(encoded.pooled[:1], encoded.tokens[:1]))
            write(late, "colour", seqs[1:], Encoded(encoded.pooled[1:], encoded.tokens[1:]))
            late.commit()
            _refresh(reader, cache)
            assert cache.size == RERANK_POOL + 22  # the later-numbered transaction's row
            early.commit()
            _refresh(reader, cache)
            assert cache.size == RERANK_POOL + 23  # the earlier one, committed after it: not skipped
            assert _refresh(reader, cache)[2] is None
        finally:
            early.close()
            late.close()


def test_dense_nominations_follow_sqlites_rule() -> None:
    def sig(key: int, matched: bool, cosine: float = 0.0) -> Signals:
        return Signals(
            key=key,
            lexical=1.0 if matched else 0.0,
            matched=matched,
            cosine=cosine,
            trigram=0.0,
            when_us=0,
            confidence=0.5,
        )

    signals = [sig(1, True), sig(2, False, 0.9), sig(3, False), sig(4, True), sig(5, True)]
    # 9 was not admitted by the filter, 1 is in the head, 3 is no hybrid hit; two wanted: 2 and 3 (3 dropped)
    assert dense_nominations([9, 1, 2, 3, 4, 5], signals, head=[1], n=2) == [2]
    assert dense_nominations([9, 1, 2, 3, 4, 5], signals, head=[1], n=4) == [2, 4, 5]
    assert dense_nominations([], signals, head=[]) == []


def test_a_large_backlog_fills_the_copy_over_several_reads_whole_transactions_each(
    engine: PostgresEngine, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = [Document.of(f"note number {i}", MemoryMeta()) for i in range(120)]
    engine.store_many(docs[:60])
    engine.store_many(docs[60:])
    assert engine.embed_backlog(batch=50) == 120  # three writing transactions: 50, 50 and 20 rows
    monkeypatch.setattr(pooled_module, "TXS_PER_READ", 1)
    cache = PooledCache()
    with psycopg.connect(pg_url, autocommit=True) as reader:
        sizes = []
        for _ in range(4):
            _refresh(reader, cache)
            sizes.append(cache.size)
    assert sizes == [50, 100, 120, 120]

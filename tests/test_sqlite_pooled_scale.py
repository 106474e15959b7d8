"""Memory at scale (issue 12 item 6): a process's pooled vectors are loaded for the seqs its reads ask about.

A cold hybrid read of one small scope reads that scope's pooled rows, however many another embedded scope holds;
a pack reads a big scope's pooled rows only as far back as its item index's window; the nominations are exactly
those of a copy holding every row; a read whose snapshot is older than the copy's reads its missing seqs for
itself, so a row written in between is never taken for "not embedded". Counted with ``PooledIndex.rows_read``
and ``held()``, never timed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from memory_core import Document
from memory_core.engines.sqlite import SQLiteEngine, scoped
from memory_core.engines.sqlite import pooled as pooled_module
from memory_core.engines.sqlite.pooled import PooledIndex
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.query import FetchMode, FetchRequest
from memory_core.retrieval.dense import nearest
from memory_core.retrieval.embedder import HashEmbedder
from tests._turns import say

MODEL = HashEmbedder.name
WINDOW = 30
LAYOUT = MemoryLayout()
SMALL = 12
BIG = 400


def _say(engine: SQLiteEngine, node_of: str, agent: str, n: int) -> None:
    """``n`` turns by ``agent`` in ``node_of``'s node."""
    say(engine, LAYOUT, node_of, agent, 0, n)


@pytest.fixture(autouse=True)
def _window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scoped, "SCOPE_WINDOW", WINDOW)


@pytest.fixture
def path(tmp_path: Path) -> Iterator[Path]:
    """A file with a small agent's few turns and a big agent's many, all embedded."""
    db = tmp_path / "memory.db"
    with SQLiteEngine(db, synchronous="normal", embedder=HashEmbedder()) as engine:
        _say(engine, "small", "small", SMALL)
        _say(engine, "big", "big", BIG)
        engine.embed_backlog()
    yield db


def _open(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    conn.execute("SELECT count(*) FROM item_vectors").fetchone()  # the snapshot starts here
    return conn


def _seqs(conn: sqlite3.Connection) -> np.ndarray:
    return np.array([r[0] for r in conn.execute("SELECT seq FROM items ORDER BY seq")], dtype=np.int64)


def test_a_cold_hybrid_read_of_a_small_scope_reads_only_its_pooled_rows(path: Path) -> None:
    with SQLiteEngine(path, embedder=HashEmbedder()) as engine:
        request = FetchRequest(
            query="tomatoes kayak", filter=LAYOUT.conversations_filter("small"), mode=FetchMode.HYBRID, limit=5
        )
        assert len(engine.fetch(request).hits) == 5
        assert engine._pooled.rows_read == SMALL  # the big scope's 400 pooled rows were never read
        assert engine._pooled.held() == SMALL
        engine.fetch(request.model_copy(update={"query": "garden"}))
        assert engine._pooled.rows_read == SMALL  # held: nothing read again


def test_a_pack_reads_a_big_scopes_pooled_rows_only_within_its_window(path: Path) -> None:
    with SQLiteEngine(path, embedder=HashEmbedder()) as engine:
        AgentMemory(engine, LAYOUT, "small").recall("tomatoes kayak")  # History, Team (the big scope's newest)
        assert 0 < engine._pooled.held() <= SMALL + WINDOW
        assert engine._pooled.rows_read <= SMALL + WINDOW


def test_nominations_equal_a_copy_holding_every_row(path: Path) -> None:
    conn = _open(path)
    keys = _seqs(conn)
    every = np.array([np.frombuffer(r[0], dtype="<f4") for r in conn.execute("SELECT pooled FROM item_vectors")])
    assert len(every) == len(keys)  # every item embedded, one row each, in seq order
    embedder = HashEmbedder()
    full, lazy = PooledIndex(), PooledIndex()
    full.nearest(conn, MODEL, keys, embedder.encode(["warm up"]).pooled[0], 1)
    assert full.held() == len(keys)
    rng = np.random.default_rng(3)
    for text in ("tomatoes kayak", "garden day 7", "a kayak trip", "grew 12"):
        query = embedder.encode([text]).pooled[0]
        part = np.sort(rng.choice(keys, size=60, replace=False))
        expected = [int(part[i]) for i in nearest(every[part - 1], query, 10)[0]]  # seq s is row s - 1
        assert lazy.nearest(conn, MODEL, part, query, 10) == expected
        assert full.nearest(conn, MODEL, part, query, 10) == expected
    assert lazy.held() <= 4 * 60 < len(keys)
    conn.rollback()


def test_a_seq_held_before_it_is_embedded_is_nominated_once_it_is(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    with SQLiteEngine(db, synchronous="normal", embedder=HashEmbedder()) as engine:
        engine.store_many([Document.of(f"Lake report {i}: the kayak club paddled {i} km.") for i in range(6)])
        conn = sqlite3.connect(db, isolation_level=None)
        keys = _seqs(conn)
        query = HashEmbedder().encode(["kayak club"]).pooled[0]
        index = PooledIndex()
        assert index.nearest(conn, MODEL, keys, query, 3) == []  # none embedded yet: held as such
        assert index.held() == 6 and index.rows_read == 0
        engine.embed_backlog()
        best = index.nearest(conn, MODEL, keys, query, 3)
        assert len(best) == 3 and index.rows_read == 6  # the new rows of held seqs: taken in
        conn.execute(  # another process's model re-embeds the best one: it counts as not embedded
            "UPDATE item_vectors SET model = 'other', n = (SELECT max(n) + 1 FROM item_vectors) WHERE seq = ?",
            (best[0],),
        )
        assert best[0] not in index.nearest(conn, MODEL, keys, query, 6)
        assert len(index.nearest(conn, MODEL, keys, query, 6)) == 5
        conn.close()


def test_a_read_older_than_the_copy_reads_its_missing_seqs_for_itself(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    with SQLiteEngine(db, synchronous="normal", embedder=HashEmbedder()) as engine:
        engine.store_many([Document.of(f"Lake report {i}: the kayak club paddled {i} km.") for i in range(6)])
        engine.embed_backlog()
        engine.store(Document.of("Lake report 9: the kayak club rested."))  # not embedded yet
        old = _open(db)
        engine.embed_backlog()  # embedded after the old snapshot began
        new = _open(db)
    keys = _seqs(new)
    late = int(keys[-1])
    query = HashEmbedder().encode(["Lake report 9: the kayak club rested."]).pooled[0]
    index = PooledIndex()
    assert index.nearest(new, MODEL, keys[:3], query, 1) != []  # the copy is at the new snapshot
    held = index.held()
    assert late not in index.nearest(old, MODEL, keys, query, 7)  # not embedded as the old snapshot sees it
    assert index.private_reads == 1 and index.held() == held  # read for itself: nothing kept
    assert index.nearest(new, MODEL, keys, query, 1) == [late]  # so the new snapshot finds it embedded
    old.rollback()
    new.rollback()


def test_a_backlog_embedded_meanwhile_is_read_in_pages_and_only_held_seqs_vectors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pooled_module, "PAGE", 2)
    db = tmp_path / "memory.db"
    with SQLiteEngine(db, synchronous="normal", embedder=HashEmbedder()) as engine:
        engine.store_many([Document.of(f"Lake report {i}: the kayak club paddled {i} km.") for i in range(7)])
        conn = sqlite3.connect(db, isolation_level=None)
        keys = _seqs(conn)
        query = HashEmbedder().encode(["kayak club"]).pooled[0]
        index = PooledIndex()
        index.nearest(conn, MODEL, keys[:3], query, 3)  # three seqs held, none embedded
        engine.embed_backlog()  # seven rows written
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        assert len(index.nearest(conn, MODEL, keys[:3], query, 3)) == 3
        conn.set_trace_callback(None)
        assert sum("LIMIT" in s for s in statements) == 4  # 2 + 2 + 2 + 1 rows
        assert index.rows_read == 3 and index.held() == 3  # the four seqs not held: passed over, vectors unread
        conn.close()

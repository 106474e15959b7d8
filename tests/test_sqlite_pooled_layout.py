"""A whole-store hybrid fetch looks its candidates up in the pooled copy once, not on every call (issue 14 §6).

``PooledIndex.scored`` keeps the last ``Layout`` (which candidates are embedded, their rows, previous turns and
window neighbours) while the candidates are equal and the held state unchanged, so a run of fetches over the
same store does the per-candidate lookups once. The answers must be exactly a fresh copy's: counted with
``PooledIndex.layouts``, never timed.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from memory_core import Conversation, MemoryMeta, Namespace, Role, Turn
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.engines.sqlite.pooled import PooledIndex, Scored
from memory_core.engines.sqlite.rerank import hybrid_hits
from memory_core.engines.sqlite.windowed import window_candidates
from memory_core.query import MetaFilter
from memory_core.retrieval.embedder import HashEmbedder
from memory_core.retrieval.window_dense import neighbours, window_top

MODEL = HashEmbedder.name
WORDS = ["paint", "sunrise", "clarinet", "camp", "river", "museum", "garden", "race", "school", "mentor"]


def _turn(i: int, thread: str) -> Conversation:
    text = f"{WORDS[i % len(WORDS)]} {WORDS[(i * 3 + 1) % len(WORDS)]} turn {i}"
    return Conversation(
        turns=(Turn(role=Role.USER, text=text),),
        meta=MemoryMeta(namespace=Namespace.parse("ws:a"), thread_id=thread, turns={"first": i, "last": i}),
    )


def _store(engine: SQLiteEngine, n: int, thread: str, start: int = 0) -> None:
    engine.store_many([_turn(i, thread) for i in range(start, start + n)])


def _keys(conn: sqlite3.Connection) -> np.ndarray:
    return np.array([s for (s,) in conn.execute("SELECT seq FROM items ORDER BY seq")], dtype=np.int64)


def _query(text: str) -> np.ndarray:
    return HashEmbedder().encode([text]).pooled[0]


def _same(a: Scored, b: Scored) -> None:
    assert a.keys.tolist() == b.keys.tolist()
    assert np.array_equal(a.cos, b.cos) and a.prev.tolist() == b.prev.tolist()
    every = np.arange(len(a.keys))
    assert np.array_equal(a.vectors(every), b.vectors(every))
    assert [x.tolist() for x in a.neighbours()] == [x.tolist() for x in neighbours(b.keys, b.prev)]


def test_fetches_over_equal_candidates_look_them_up_once_and_answer_as_a_fresh_copy(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with SQLiteEngine(db, embedder=HashEmbedder()) as engine:
        _store(engine, 60, "t")
        engine.embed_backlog()
        _store(engine, 8, "u")  # not embedded: candidates the copy holds as such
    conn = sqlite3.connect(db)
    index = PooledIndex()
    for text in ["paint sunrise", "camp river", "school mentor race"]:
        keys = _keys(conn)  # a new array each fetch, as the item index gives
        answer = index.scored(conn, MODEL, keys, _query(text))
        _same(answer, PooledIndex().scored(conn, MODEL, keys, _query(text)))
        assert len(answer.keys) == 60  # the 8 not embedded are not scored
    assert index.layouts == 1
    index.scored(conn, MODEL, _keys(conn)[:-3], _query("paint"))  # other candidates: looked up anew
    assert index.layouts == 2
    conn.close()


def test_vectors_written_for_held_candidates_renew_the_layout(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with SQLiteEngine(db, embedder=HashEmbedder()) as engine:
        _store(engine, 30, "t")
        engine.embed_backlog()
        _store(engine, 10, "t", start=30)  # the thread goes on, not embedded yet
        conn = sqlite3.connect(db)
        index = PooledIndex()
        query = _query("garden museum")
        first = index.scored(conn, MODEL, _keys(conn), query)
        assert len(first.keys) == 30 and index.layouts == 1
        engine.embed_backlog()
        conn.close()
    conn = sqlite3.connect(db)  # a new snapshot sees the rows written since
    keys = _keys(conn)
    later = index.scored(conn, MODEL, keys, query)
    assert index.layouts == 2 and len(later.keys) == 40
    _same(later, PooledIndex().scored(conn, MODEL, keys, query))
    before, after = later.neighbours()
    assert int(after[29]) == 30  # turn 29's next turn is now embedded, so the window reaches it
    assert index.scored(conn, MODEL, keys.copy(), _query("race")).layout is later.layout
    conn.close()


def test_the_window_source_skips_taken_seqs_found_among_the_candidates(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with SQLiteEngine(db, embedder=HashEmbedder()) as engine:
        _store(engine, 40, "t")
        engine.embed_backlog()
        conn = sqlite3.connect(db)
        conn.execute("BEGIN")
        rows = engine._index.candidates(conn, MetaFilter(), 1 << 62)
        index = PooledIndex()
        query = "paint sunrise clarinet"
        pooled = _query(query)
        free = window_candidates(conn, index, rows, set(), query, pooled, MODEL, n=10)
        assert len(free) == 10
        taken = set(free[:4]) | {10**9}  # a seq that is no candidate changes nothing
        held = window_candidates(conn, index, rows, taken, query, pooled, MODEL, n=6)
        scored = index.scored(conn, MODEL, rows.keys, pooled)
        before, after = neighbours(scored.keys, scored.prev)
        skip = ((before < 0) & (after < 0)) | np.isin(scored.keys, list(taken))  # every candidate looked up
        best = window_top(scored.cos, before, after, scored.vectors, 6, skip)
        assert held == hybrid_hits(conn, rows, [int(s) for s in scored.keys[best]], query)
        assert held and not set(held) & taken
        conn.close()

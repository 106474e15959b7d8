"""What the rerank reads per call, counted: stored token vectors kept as stored and served with one statement,
deletes dropped through the ``deleted`` log (never a row a newer snapshot deleted kept from an older one), and one
full pooled-vector product per query for the sections of a pack."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from memory_core import Document, FetchRequest
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.engines.sqlite.pooled import PooledIndex
from memory_core.engines.sqlite.token_cache import TokenCache
from memory_core.query import FetchMode, ForgetTarget
from memory_core.retrieval.embedder import HashEmbedder
from memory_core.retrieval.late import Quantised

MODEL, DIMS = HashEmbedder.name, HashEmbedder.dims


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[SQLiteEngine]:
    with SQLiteEngine(tmp_path / "m.db", synchronous="normal", embedder=HashEmbedder()) as e:
        e.store_many([Document.of(f"Lake report {i}: the kayak club paddled {i} km.") for i in range(6)])
        e.embed_backlog()
        yield e


def _seqs(conn: sqlite3.Connection) -> list[int]:
    return [int(r[0]) for r in conn.execute("SELECT seq FROM items ORDER BY seq")]


def _connect(engine: SQLiteEngine) -> sqlite3.Connection:
    return sqlite3.connect(engine._db.path, isolation_level=None, check_same_thread=False)


def test_a_hit_is_the_stored_int8_row_served_with_one_statement(engine: SQLiteEngine) -> None:
    cache = TokenCache()
    conn = _connect(engine)
    seqs = _seqs(conn)
    first = cache.load(conn, seqs, MODEL, DIMS)
    assert len(first) == 6 and cache.stats.read == 6 and cache.stats.hits == 0
    assert all(isinstance(r.tokens, Quantised) and r.tokens.values.dtype == np.int8 for r in first.values())
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    again = cache.load(conn, seqs, MODEL, DIMS)
    conn.set_trace_callback(None)
    assert all(again[s] is first[s] for s in seqs)  # the kept rows themselves: nothing decoded
    assert cache.stats.hits == 6 and cache.stats.read == 6
    assert len(statements) == 1 and "deleted" in statements[0] and "items" not in statements[0]
    conn.close()


def test_a_deleted_item_is_dropped_when_the_log_shows_it(engine: SQLiteEngine) -> None:
    cache = TokenCache()
    conn = _connect(engine)
    seqs = _seqs(conn)
    cache.load(conn, seqs, MODEL, DIMS)
    gone = engine.fetch(FetchRequest(query="report 2", mode=FetchMode.KEYWORD, limit=1)).hits[0]
    engine.forget(ForgetTarget(ids=[gone.id]))
    served = cache.load(conn, seqs, MODEL, DIMS)
    assert len(served) == 5 and len(cache) == 5 and cache.stats.dropped == 1
    assert cache.stats.hits == 5 and cache.stats.read == 7  # the five left were hits; the dropped one, a miss
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    assert len(cache.load(conn, list(served), MODEL, DIMS)) == 5
    conn.set_trace_callback(None)
    assert len(statements) == 1  # the log is read once per change, not per call
    conn.close()


def test_a_read_older_than_a_delete_serves_its_snapshot_and_keeps_nothing(engine: SQLiteEngine) -> None:
    cache = TokenCache()
    new, old = _connect(engine), _connect(engine)
    seqs = _seqs(new)
    old.execute("BEGIN")
    assert _seqs(old) == seqs  # the old read's snapshot, taken before the delete
    gone = engine.fetch(FetchRequest(query="report 2", mode=FetchMode.KEYWORD, limit=1)).hits[0]
    engine.forget(ForgetTarget(ids=[gone.id]))
    after = cache.load(new, seqs, MODEL, DIMS)  # a newer snapshot: the deleted item is not there
    (dead,) = set(seqs) - set(after)
    assert len(cache) == 5
    served = cache.load(old, seqs, MODEL, DIMS)  # five hits, and the deleted one read in the old snapshot...
    assert set(served) == set(seqs) and cache.stats.hits == 5
    assert len(cache) == 5  # ...served to it, never kept
    assert dead not in cache.load(new, seqs, MODEL, DIMS)
    old.execute("COMMIT")
    new.close()
    old.close()


def test_a_replaced_file_empties_the_cache(engine: SQLiteEngine) -> None:
    cache = TokenCache()
    conn = _connect(engine)
    seqs = _seqs(conn)
    cache.load(conn, seqs, MODEL, DIMS)
    conn.execute("UPDATE meta SET value = 'another file' WHERE key = 'instance'")
    cache.load(conn, seqs[:2], MODEL, DIMS)
    assert len(cache) == 2 and cache.stats.read == 8
    conn.close()


def test_the_budget_counts_stored_bytes(engine: SQLiteEngine) -> None:
    conn = _connect(engine)
    seqs = _seqs(conn)
    sizes = [row.tokens.nbytes for row in TokenCache().load(conn, seqs, MODEL, DIMS).values() if row.tokens is not None]
    assert all(size % (DIMS + 4) == 0 for size in sizes)  # int8 values and a float32 scale per token
    cache = TokenCache(budget=sum(sorted(sizes)[:2]) + 2 * 200)
    cache.load(conn, seqs, MODEL, DIMS)
    assert 1 <= len(cache) <= 2
    conn.close()


def test_the_sections_of_a_pack_share_one_full_pooled_product(engine: SQLiteEngine) -> None:
    conn = _connect(engine)
    index = PooledIndex()
    keys = np.array(_seqs(conn), dtype=np.int64)
    query = np.eye(DIMS, dtype=np.float32)[3]
    first = index.nearest(conn, MODEL, keys, query, 3)
    assert index.products == 1
    some = set(keys[:4].tolist())
    assert set(index.nearest(conn, MODEL, keys[:4], query, 3)) <= some and index.products == 1  # picked
    assert index.nearest(conn, MODEL, keys, query, 3) == first and index.products == 1  # the same query
    again = query.copy()
    assert index.nearest(conn, MODEL, keys, again, 3) == first and index.products == 2  # another array
    engine.store(Document.of("Lake report 9: a new row"))
    engine.embed_backlog()
    index.nearest(conn, MODEL, keys, again, 3)
    assert index.products == 2  # a row of a seq not held: dropped, the held rows unchanged
    index.nearest(conn, MODEL, np.array(_seqs(conn), dtype=np.int64), again, 3)
    assert index.products == 3  # the new seq loaded: the rows held changed, computed again
    conn.close()


def test_holding_a_seq_not_embedded_keeps_the_pooled_product(engine: SQLiteEngine) -> None:
    """A host's new turn waits for its vectors: holding it adds no vector row, so the pack's other sections (and
    the next read of the same query array) keep the product computed before it was held."""
    conn = _connect(engine)
    index = PooledIndex()
    query = np.eye(DIMS, dtype=np.float32)[3]
    first = index.nearest(conn, MODEL, np.array(_seqs(conn), dtype=np.int64), query, 3)
    assert index.products == 1
    engine.store(Document.of("Lake report 10: not embedded yet"))
    conn.close()
    conn = _connect(engine)
    keys = np.array(_seqs(conn), dtype=np.int64)
    assert index.nearest(conn, MODEL, keys, query, 3) == first and index.products == 1  # held, no vector
    assert index.held() == len(keys)
    engine.embed_backlog()
    conn.close()
    conn = _connect(engine)
    index.nearest(conn, MODEL, keys, query, 3)
    assert index.products == 2  # its vector written: the rows held changed, computed again
    conn.close()


def test_a_pack_reads_its_candidates_vectors_once(engine: SQLiteEngine) -> None:
    request = FetchRequest(query="kayak lake report", mode=FetchMode.HYBRID, limit=3)
    engine.fetch(request)
    read = engine._tokens.stats.read
    engine.fetch(request.model_copy(update={"query": "club paddled km"}))
    assert engine._tokens.stats.read == read and engine._tokens.stats.hits >= 6


def test_a_row_not_embedded_is_kept_until_vectors_are_written(engine: SQLiteEngine) -> None:
    engine.store_many([Document.of("Lake report 7: waiting for the model"), Document.of("Lake report 8: too")])
    cache = TokenCache()
    conn = _connect(engine)
    seqs = _seqs(conn)
    first = cache.load(conn, seqs, MODEL, DIMS)
    waiting = [s for s in seqs if first[s].tokens is None]
    assert len(waiting) == 2 and cache.stats.read == 8
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    again = cache.load(conn, seqs, MODEL, DIMS)
    conn.set_trace_callback(None)
    assert len(statements) == 1 and cache.stats.read == 8 and cache.stats.hits == 8  # no read for the waiting
    assert all(again[s] is first[s] for s in waiting)
    engine.embed_backlog()  # vectors written: the waiting rows are read again, now with their vectors
    embedded = cache.load(conn, seqs, MODEL, DIMS)
    assert cache.stats.read == 10 and all(isinstance(embedded[s].tokens, Quantised) for s in waiting)
    conn.close()

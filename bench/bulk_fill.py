"""A bench-only bulk fill: filler turns stored as copies of a seed the engine stored (the 1M size of issue 12).

Storing 1M turns through ``store_many`` takes hours on a busy 2-core machine (~2.6 ms a turn at a load of 7: the
reference vector, stems and neighbours, the log record, in Python). So the bench stores a seed of up to
``SEED`` turns through the engine (``sqlite_bench._fill``), then copies the seed's rows in SQL, in one
transaction per copy: copy ``c`` takes the seed's seqs shifted past the last one, ``~c`` appended to its id,
thread and agent id, its turn indices moved past the seed's and its times moved past the seed's span, so copies
follow the seed in write order and in time as ``sqlite_bench._turns`` replicas do. Every table the engine
writes for a ``visible`` turn gets its copy: ``items`` (reference vector included), ``bodies``, ``item_terms``
and ``items_fts`` (the same terms), ``item_tags``, the ``put`` records of ``log``, and the scope's
``last_write``. The item JSON in ``bodies`` is the seed's as stored (a copy's hit shows the seed turn's meta),
and no ``pending`` row is written (the copies are indexed, as ``visible`` turns are). Only the bench uses it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import numpy as np

from bench.sqlite_bench import _fill
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.items import Conversation
from memory_core.retrieval.late import quantise

__all__ = ["SEED", "bulk_fill", "bulk_vectors"]

SEED: Final = 20_000
"""Turns stored through the engine before copying."""
_SHIFTED: Final = {
    "id": "id || :tag",
    "thread_id": "thread_id || :tag",
    "agent_id": "agent_id || :tag",
    "turn_first": "turn_first + :turns",
    "turn_last": "turn_last + :turns",
    "observed_at": "observed_at + :span",
}
"""How a copy changes a seed row's columns (the others are copied as they are)."""


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")]


def _copy(conn: sqlite3.Connection, lo: int, hi: int, c: int, shift: int, turns: int, span: int) -> None:
    """Copy ``c`` of seed seqs ``lo..hi``: seqs moved by ``shift`` (one transaction)."""
    cols = _columns(conn, "items")
    exprs = ["seq + :shift" if col == "seq" else _SHIFTED.get(col, col) for col in cols]
    params = {"lo": lo, "hi": hi, "shift": shift, "tag": f"~{c}", "turns": turns, "span": span}
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(
        f"INSERT INTO items ({', '.join(cols)}) SELECT {', '.join(exprs)} FROM items "
        "WHERE seq BETWEEN :lo AND :hi ORDER BY seq",
        params,
    )
    conn.execute("INSERT INTO bodies SELECT seq + :shift, item, text FROM bodies WHERE seq BETWEEN :lo AND :hi", params)
    conn.execute(
        "INSERT INTO item_terms SELECT seq + :shift, text, speaker FROM item_terms WHERE seq BETWEEN :lo AND :hi",
        params,
    )
    conn.execute(
        "INSERT INTO items_fts (rowid, text) SELECT seq, text FROM item_terms "
        "WHERE seq BETWEEN :lo + :shift AND :hi + :shift",
        params,
    )
    conn.execute("INSERT INTO item_tags SELECT tag, seq + :shift FROM item_tags WHERE seq BETWEEN :lo AND :hi", params)
    top = conn.execute("SELECT coalesce(max(lsn), 0), coalesce(max(at), 0) FROM log").fetchone()
    conn.execute(
        "INSERT INTO log (lsn, txn, op, id, status, tier, reason, at) "
        "SELECT :top + row_number() OVER (ORDER BY l.lsn), :top + 1, l.op, l.id || :tag, l.status, l.tier, "
        "l.reason, :at FROM log l JOIN items i ON i.id = l.id WHERE i.seq BETWEEN :lo AND :hi AND l.op = 'put'",
        {**params, "top": int(top[0]), "at": int(top[1])},
    )
    conn.execute(
        "UPDATE scopes SET last_write = last_write + 1 WHERE (ns, kind) IN "
        "(SELECT DISTINCT ns, kind FROM items WHERE seq BETWEEN :lo + :shift AND :hi + :shift)",
        params,
    )
    conn.execute(
        "UPDATE sqlite_sequence SET seq = (SELECT max(seq) FROM items) WHERE name = 'items'",
    )
    conn.execute("COMMIT")


def bulk_fill(engine: SQLiteEngine, path: Path, items: Iterator[Conversation], n: int) -> int:
    """Store ``n`` filler turns: up to ``SEED`` of ``items`` through ``engine``, the rest as copies in SQL.

    Returns:
        How many turns were stored through the engine (the seed).
    """
    seed = min(n, SEED)
    with sqlite3.connect(path, isolation_level=None) as conn:
        before = int(conn.execute("SELECT coalesce(max(seq), 0) FROM items").fetchone()[0])
    _fill(engine, (item for i, item in zip(range(seed), items, strict=False)))
    engine.close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = OFF")
        lo, hi = conn.execute("SELECT min(seq), max(seq) FROM items WHERE seq > ?", (before,)).fetchone()
        turns = int(conn.execute("SELECT max(turn_last) + 1 FROM items WHERE seq >= ?", (lo,)).fetchone()[0] or 0)
        first, last = conn.execute(
            "SELECT min(observed_at), max(observed_at) FROM items WHERE seq >= ?", (lo,)
        ).fetchone()
        span = int(last or 0) - int(first or 0) + 86_400_000_000
        done, c = seed, 1
        while done < n:
            count = min(hi - lo + 1, n - done)
            top = int(conn.execute("SELECT max(seq) FROM items").fetchone()[0])
            _copy(conn, lo, lo + count - 1, c, top + 1 - lo, c * turns, c * span)
            done += count
            c += 1
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return seed


def bulk_vectors(path: Path, model: str, dims: int, seed: int = 0) -> int:
    """Write an ``item_vectors`` row of ``model`` for every item without one; how many were written.

    Bench-only, for the memory a process's pooled vectors take (``engines/sqlite/pooled.py``) on a store whose
    filler no model ran over: each row's pooled vector is a random unit vector of ``dims`` float32 (seeded), its
    token vectors one random token (``late.quantise``), ``prev`` empty, numbered in write order after the file's
    last ``n``. Rankings over these vectors mean nothing; the bytes and the rows read are those of a real model's.
    """
    rng = np.random.default_rng(seed)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")
        seqs = [
            int(r[0])
            for r in conn.execute(
                "SELECT i.seq FROM items i LEFT JOIN item_vectors v ON v.seq = i.seq WHERE v.seq IS NULL ORDER BY i.seq"
            )
        ]
        after = int(conn.execute("SELECT coalesce(max(n), 0) FROM item_vectors").fetchone()[0])
        for start in range(0, len(seqs), 10_000):
            chunk = seqs[start : start + 10_000]
            pooled = rng.normal(size=(len(chunk), dims)).astype(np.float32)
            pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
            conn.execute("BEGIN")
            conn.executemany(
                "INSERT INTO item_vectors (seq, model, prev, pooled, tokens, n) VALUES (?, ?, NULL, ?, ?, ?)",
                (
                    (seq, model, pooled[i].astype("<f4").tobytes(), quantise(pooled[i : i + 1]), after + start + i + 1)
                    for i, seq in enumerate(chunk)
                ),
            )
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return len(seqs)

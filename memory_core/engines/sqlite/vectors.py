"""The model's vectors of stored items (``item_vectors``), written by the embedding job, read by ``rerank``.

One row per embedded item: the embedder's ``model`` name, its pooled vector (float32) and its content-token
vectors (``retrieval.late.quantise``: int8 with a scale per token), its number in write order ``n`` (schema 6),
and ``prev``, the turn before it in its thread when it was embedded (``fts.neighbours``), so the window view
(the turn with the one before it) needs no extra lookup. Storing an item never writes here: an item waits,
ranked lexically, until a worker embeds it (``unembedded`` → model → ``write``, the model run outside any
transaction). A row of another model counts as
not embedded, so changing the ``EMBEDDER`` setting re-embeds everything in the background, and ranking ignores
the old rows meanwhile. A trigger deletes an item's row with the item.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from memory_core.retrieval.embedder import Encoded
from memory_core.retrieval.late import Quantised, Tokens, quantise

from . import fts
from .rows import chunks, placeholders

__all__ = ["SCHEMA", "Stored", "backlog", "load", "unembedded", "write"]

SCHEMA: Final = (
    "CREATE TABLE item_vectors (seq INTEGER PRIMARY KEY, model TEXT NOT NULL, prev INTEGER, "
    "pooled BLOB NOT NULL, tokens BLOB NOT NULL)",
    "CREATE TRIGGER item_vectors_gone AFTER DELETE ON items BEGIN DELETE FROM item_vectors WHERE seq = old.seq; END",
)
"""Statements of schema version 5."""
NUMBERED: Final = (
    "ALTER TABLE item_vectors ADD COLUMN n INTEGER",
    "UPDATE item_vectors SET n = seq",
    "CREATE INDEX item_vectors_n ON item_vectors(n)",
)
"""Statements of schema version 6: ``n`` numbers rows in write order (``pooled.PooledIndex`` reads new ones)."""
_WAITING: Final = (
    "FROM bodies b JOIN items i ON i.seq = b.seq AND i.status = 'live' "
    "LEFT JOIN item_vectors v ON v.seq = b.seq AND v.model = ? WHERE v.seq IS NULL"
)
"""What waits for the model, the one rule ``backlog`` (status's count) and ``unembedded`` (the job) share: live
items (any tier) with no vectors of the model. An item that is retracted (a superseded fact) or stale is served
by no read, so it is not encoded; brought back live (``rollback``, a restore) it waits again."""


def backlog(conn: sqlite3.Connection, model: str) -> int:
    """Live items with no vectors of ``model`` (waiting for the embedding job: ``_WAITING``)."""
    return int(conn.execute(f"SELECT count(*) {_WAITING}", (model,)).fetchone()[0])


def unembedded(conn: sqlite3.Connection, model: str, limit: int) -> list[tuple[int, str]]:
    """Up to ``limit`` ``(seq, text)`` of live items with no vectors of ``model``, oldest first (``_WAITING``)."""
    rows = conn.execute(f"SELECT b.seq, b.text {_WAITING} ORDER BY b.seq LIMIT ?", (model, limit)).fetchall()
    return [(int(seq), str(text)) for seq, text in rows]


def write(conn: sqlite3.Connection, model: str, seqs: Sequence[int], encoded: Encoded) -> int:
    """Store the vectors of ``seqs`` (items deleted since they were read are skipped); how many were stored."""
    done = 0
    for i, seq in enumerate(seqs):
        if conn.execute("SELECT 1 FROM items WHERE seq = ?", (seq,)).fetchone() is None:
            continue
        before = fts.neighbours(conn, seq)
        prev = before[0] if before and before[0] < seq else None
        conn.execute(
            "INSERT OR REPLACE INTO item_vectors (seq, model, prev, pooled, tokens, n) "
            "VALUES (?, ?, ?, ?, ?, (SELECT coalesce(max(n), 0) + 1 FROM item_vectors))",
            (seq, model, prev, np.asarray(encoded.pooled[i], dtype="<f4").tobytes(), quantise(encoded.tokens[i])),
        )
        done += 1
    return done


@dataclass(frozen=True)
class Stored:
    """What ranking reads of one item.

    Attributes:
        tokens: Token vectors, as stored (``late.Quantised``: ``load``) or float32 (None: not embedded by this
            model).
        prev: The turn before it in its thread, when it was embedded.
        speaker: Who said it (``item_terms.speaker``).
        when_us: ``observed_at``, else the write time, µs.
        confidence: A learning's confidence, 0.5 for other kinds.
    """

    tokens: Tokens | None
    prev: int | None
    speaker: str | None
    when_us: int
    confidence: float


def load(conn: sqlite3.Connection, seqs: Sequence[int], model: str, dims: int) -> dict[int, Stored]:
    """``seq → Stored`` for the ``seqs`` that exist, token vectors as stored (``late.Quantised``, not decoded)."""
    out: dict[int, Stored] = {}
    for chunk in chunks(list(seqs)):
        marks = placeholders(len(chunk))
        for seq, tokens, prev, speaker, when, conf in conn.execute(
            "SELECT i.seq, v.tokens, v.prev, t.speaker, coalesce(i.observed_at, i.stored_at), "
            "coalesce(i.confidence, 0.5) FROM items i "
            "LEFT JOIN item_vectors v ON v.seq = i.seq AND v.model = ? "
            f"LEFT JOIN item_terms t ON t.seq = i.seq WHERE i.seq IN ({marks})",
            (model, *chunk),
        ):
            vectors = None if tokens is None else Quantised.parse(bytes(tokens), dims)
            out[int(seq)] = Stored(vectors, None if prev is None else int(prev), speaker, int(when), float(conf))
    return out

"""The model's vectors of stored items (``item_vectors``), written by the embedding job, read by ``rerank``.

The PostgreSQL twin of ``engines.sqlite.vectors``, with the same rules: one row per embedded item holding the
embedder's ``model`` name, its pooled vector (float32 bytes) and its content-token vectors
(``retrieval.late.quantise``: int8 with a scale per token) as ``bytea``, plus ``prev``, the turn before it in its
thread when it was embedded, so the window view needs no extra lookup. Storing an item never writes here: an
item waits, ranked lexically, until a worker embeds it (``unembedded`` → model → ``write``, the model run
outside any transaction). A row of another model counts as not embedded. ``tx`` (schema v5) is the writing
transaction's id, which the hosts' copies of the pooled vectors read from (``pooled``). ``ON DELETE CASCADE``
drops an item's row with the item.

``load`` reads, in one statement, what the rerank needs of its candidates *and* their stored JSON, so the hits
of the page are built without another round trip; a candidate's previous turn's tokens come along unless that
turn is a candidate itself (its tokens are then already in the answer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from memory_core.engines.sqlite.vectors import Stored
from memory_core.retrieval.embedder import F32, Encoded
from memory_core.retrieval.late import dequantise, quantise

from .driver import Conn
from .schema import SCHEMA

__all__ = ["Loaded", "backlog", "load", "unembedded", "write"]

_WAITING: Final = (
    f"FROM {SCHEMA}.items i WHERE i.status = 'live' AND NOT EXISTS (SELECT 1 FROM {SCHEMA}.item_vectors v "
    "WHERE v.seq = i.seq AND v.model = %s)"
)
"""What waits for the model (``backlog``) and what the job encodes (``unembedded``): live items with no vectors of
the model, the rule of ``engines.sqlite.vectors._WAITING``."""
_PREV: Final = (
    f"(SELECT p.seq FROM {SCHEMA}.items p WHERE p.thread_id = i.thread_id AND p.turn_last < i.turn_first "
    "AND p.ns = i.ns AND p.kind = 'conversation' AND i.kind = 'conversation' "
    "ORDER BY p.turn_last DESC, p.seq DESC LIMIT 1)"
)


def backlog(conn: Conn, model: str) -> int:
    """Live items with no vectors of ``model`` (waiting for the embedding job: ``_WAITING``)."""
    row = conn.execute(f"SELECT count(*) {_WAITING}", (model,)).fetchone()
    return int(row[0]) if row else 0


def unembedded(conn: Conn, model: str, limit: int) -> list[tuple[int, str]]:
    """Up to ``limit`` ``(seq, item JSON)`` of live items with no vectors of ``model``, oldest first."""
    rows = conn.execute(f"SELECT i.seq, i.item {_WAITING} ORDER BY i.seq LIMIT %s", (model, limit)).fetchall()
    return [(int(seq), str(body)) for seq, body in rows]


def write(conn: Conn, model: str, seqs: Sequence[int], encoded: Encoded) -> int:
    """Store the vectors of ``seqs`` in one statement (items deleted since they were read are skipped).

    Returns:
        How many rows were stored.
    """
    if not seqs:
        return 0
    pooled = [np.asarray(encoded.pooled[i], dtype="<f4").tobytes() for i in range(len(seqs))]
    tokens = [quantise(encoded.tokens[i]) for i in range(len(seqs))]
    rows = conn.execute(
        f"INSERT INTO {SCHEMA}.item_vectors (seq, model, prev, pooled, tokens) "
        f"SELECT i.seq, %s, {_PREV}, u.pooled, u.tokens "
        "FROM unnest(%s::bigint[], %s::bytea[], %s::bytea[]) AS u(seq, pooled, tokens) "
        f"JOIN {SCHEMA}.items i ON i.seq = u.seq ORDER BY i.seq "
        "ON CONFLICT (seq) DO UPDATE SET model = excluded.model, prev = excluded.prev, pooled = excluded.pooled, "
        "tokens = excluded.tokens, tx = pg_current_xact_id() RETURNING seq",
        (model, list(seqs), pooled, tokens),
    ).fetchall()
    return len(rows)


@dataclass(frozen=True)
class Loaded:
    """What ``load`` read of the candidates.

    Attributes:
        stored: ``seq → Stored`` (tokens, prev, speaker, time, confidence) for candidates and their prev turns.
        bodies: ``seq → (id, item JSON, log status, tier)`` of the candidates.
    """

    stored: dict[int, Stored]
    bodies: dict[int, tuple[str, str, str, str]]


def load(conn: Conn, seqs: Sequence[int], model: str, dims: int) -> Loaded:
    """The candidates' vectors, speakers, bodies and log state, and their previous turns' vectors, in one statement."""
    stored: dict[int, Stored] = {}
    bodies: dict[int, tuple[str, str, str, str]] = {}
    if not seqs:
        return Loaded(stored, bodies)
    rows = conn.execute(
        "SELECT i.seq, i.id, i.item, i.status, i.tier, i.speaker, coalesce(i.observed_at, i.stored_at), "
        "coalesce(i.confidence, 0.5), "
        "v.tokens, v.prev, CASE WHEN v.prev = ANY(%s::bigint[]) THEN NULL ELSE pv.tokens END "
        f"FROM {SCHEMA}.items i LEFT JOIN {SCHEMA}.item_vectors v ON v.seq = i.seq AND v.model = %s "
        f"LEFT JOIN {SCHEMA}.item_vectors pv ON pv.seq = v.prev AND pv.model = %s "
        "WHERE i.seq = ANY(%s::bigint[])",
        (list(seqs), model, model, list(seqs)),
    ).fetchall()
    for seq, item_id, body, status, tier, speaker, when, conf, tokens, prev, prev_tokens in rows:
        key = int(seq)
        bodies[key] = (str(item_id), str(body), str(status), str(tier))
        vectors: F32 | None = None if tokens is None else dequantise(bytes(tokens), dims)
        previous = None if prev is None else int(prev)
        stored[key] = Stored(vectors, previous, speaker, int(when), float(conf))
        if previous is not None and prev_tokens is not None and previous not in stored:
            stored[previous] = Stored(dequantise(bytes(prev_tokens), dims), None, None, 0, 0.5)
    return Loaded(stored, bodies)

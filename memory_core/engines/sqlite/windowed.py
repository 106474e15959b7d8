"""The window's pooled vector as a candidate source of the SQLite engine's hybrid fetch.

``retrieval.window_dense`` scores each turn by the pooled vector of its three-turn window (the turn before it,
the turn, the turn after it), summed from the turns' own stored pooled vectors, so nothing more is stored or
encoded. ``window_candidates`` reads the fetch's candidates' cosines, previous turns and vectors from
``pooled.PooledIndex`` (the product over them is the one the pooled source just computed for this query), and
nominates the best ``WINDOW_POOL`` windows not already among the candidates. An item with no neighbour among
them (a document, a passage, a thread's only turn) is left to the pooled source: its window is itself. Like the
other nominations, each must be a hybrid hit by the contract's rule (``rerank.hybrid_hits``); they join the head
with no lexical rank, after the pooled vector's and the named date's nominations (``rerank.reorder``): before
the date's, they pushed the dated ones down (LoCoMo dev with the brain: pack 80.5% against 80.8%, fetch@10 the
same 80.4%).

A turn's next turn is found among the candidates as the turn whose stored ``prev`` names it (as
``following.next_turns`` finds it in SQL), so a turn whose neighbours are not embedded yet is scored as the
turns of its window that are.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection

import numpy as np

from memory_core.retrieval.embedder import F32
from memory_core.retrieval.window_dense import WINDOW_POOL, window_top

from .index import CandidateRows
from .pooled import PooledIndex
from .rerank import hybrid_hits

__all__ = ["WINDOW_POOL", "window_candidates"]


def window_candidates(
    conn: sqlite3.Connection,
    index: PooledIndex,
    rows: CandidateRows,
    taken: Collection[int],
    query: str,
    pooled: F32,
    model: str,
    n: int = WINDOW_POOL,
) -> list[int]:
    """Up to ``n`` seqs among ``rows``, not in ``taken``, whose windows' pooled vectors are nearest, best first.

    Args:
        conn: The read connection.
        index: The pooled vectors (refreshed, and loaded for ``rows``, by ``PooledIndex.scored``).
        rows: The fetch's candidates (``keys`` ascending).
        taken: Seqs already in the head (the lexical head and the pooled nominations).
        query: The query text (the hit rule).
        pooled: The query's unit pooled vector ``(dims,)``; empty: nothing is nominated.
        model: The embedder's name (whose vectors are read).
        n: At most this many.

    Returns:
        Hybrid hits, nearest first.
    """
    if n <= 0 or len(rows) == 0 or pooled.size == 0:
        return []
    scored = index.scored(conn, model, rows.keys, pooled)
    if len(scored.keys) == 0:
        return []
    before, after = scored.neighbours()  # kept with the candidates' layout (``pooled.Layout``)
    alone = (before < 0) & (after < 0)  # its window is itself: the pooled source's ranking already
    if alone.all():  # documents and passages only (a pack's Brain section): nothing to add
        return []
    skip = alone
    if taken:  # the few taken seqs looked up among the candidates, not each candidate among them
        held = np.unique(np.fromiter(taken, dtype=np.int64, count=len(taken)))
        at = np.minimum(np.searchsorted(scored.keys, held), len(scored.keys) - 1)
        skip = alone.copy()
        skip[at[scored.keys[at] == held]] = True
    best = window_top(scored.cos, before, after, scored.vectors, n, skip)
    return hybrid_hits(conn, rows, [int(s) for s in scored.keys[best]], query)

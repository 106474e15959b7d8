"""The date candidate source: items observed on a day or month the query names, nearest the query first.

A question that names a date ("What painting did Melanie show to Caroline on October 13, 2023?") is about
what was said then, but its evidence often shares few words with it ("Here's the one I did last week") and
sits outside the lexical head and the pooled vector's nominations, where the date signal of ``fusion.fuse``
cannot lift it. So the items among the fetch's candidates observed on a named date (``retrieval.dates``;
``CandidateRows.when_us``) are nominated too: the ``n`` nearest the query's pooled vector
(``pooled.PooledIndex``), bounded so a month named without a year cannot flood the head. Like the pooled
nominations, each must be a hybrid hit by the contract's rule (``rerank.hybrid_hits``), and joins the head with
no lexical rank; ``rerank.reorder`` ranks them with the rest (the date signal applies to them too).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from typing import Final

from memory_core.retrieval.dates import named_dates
from memory_core.retrieval.embedder import F32

from .index import CandidateRows
from .pooled import PooledIndex
from .rerank import hybrid_hits

__all__ = ["DATED_POOL", "dated_candidates"]

DATED_POOL: Final = 20
"""Items observed on the named dates nominated per fetch (LoCoMo logs each utterance once per agent, so about
half as many utterances). LoCoMo dev with the brain, the window view spanning the next turn (fetch@10 / pack):
none 78.5 / 79.5%, 20 → 78.8 / 80.0%; with the two-turn window: 10 → 78.5 / 78.4%, 20 → 78.3 / 78.6%, 40 → 78.3 /
78.6% (``docs/retrieval.md``)."""


def dated_candidates(
    conn: sqlite3.Connection,
    index: PooledIndex,
    rows: CandidateRows,
    taken: Collection[int],
    query: str,
    pooled: F32,
    model: str,
    n: int = DATED_POOL,
) -> list[int]:
    """Up to ``n`` seqs among ``rows`` observed on a date ``query`` names, not in ``taken``, nearest first.

    Args:
        conn: The read connection.
        index: The pooled vectors (refreshed and loaded for ``dated`` rows by ``nearest``).
        rows: The fetch's candidates (``keys`` ascending, ``when_us``).
        taken: Seqs already in the head (the lexical head and the pooled nominations).
        query: The query text (its named dates; the hit rule).
        pooled: The query's unit pooled vector ``(dims,)``; empty: nothing is nominated.
        model: The embedder's name (whose vectors rank the dated items).
        n: At most this many.

    Returns:
        Hybrid hits observed on a named date, nearest the query's pooled vector first; empty when the query
        names no date.
    """
    dates = named_dates(query)
    if n <= 0 or not dates or len(rows) == 0 or pooled.size == 0:
        return []
    dated = rows.keys[dates.covers(rows.when_us)]
    if len(dated) == 0:
        return []
    near = [s for s in index.nearest(conn, model, dated, pooled, n + len(taken)) if s not in taken][:n]
    return hybrid_hits(conn, rows, near, query)

"""The second stage of a hybrid item ranking on PostgreSQL: late interaction over the lexical stage's best.

The same stage as the SQLite engine's, through the same pure function (``engines.sqlite.rerank.reorder``): the
lexical stage (``search`` candidates) gives its best ``RERANK_POOL``, and up to ``DENSE_POOL`` items nearest the
query's pooled vector that the head misses join it (``dense_nominations``: nominated by ``pooled.PooledCache``
in the host, admitted by the database in the candidates' statement). Their stored token vectors (``vectors.load``,
one statement that also brings their bodies) are scored by MaxSim against the query's content tokens over the
item alone and over the item with the turn before it, and ordered by ``retrieval.fusion.fuse`` (weighted RRF of
the rankings, with recency, confidence and the speaker signal). Items not yet embedded rank by the lexical stage
alone; the rest of the ranking follows in lexical order.
"""

from __future__ import annotations

from collections.abc import Sequence

from memory_core.engines.sqlite.rerank import RERANK_POOL, reorder
from memory_core.retrieval.dense import DENSE_POOL
from memory_core.scoring import VECTOR_THRESHOLD

from .fusion import Signals

__all__ = ["DENSE_POOL", "RERANK_POOL", "dense_nominations", "reorder"]


def dense_nominations(
    nominated: Sequence[int], signals: Sequence[Signals], head: Sequence[int], n: int = DENSE_POOL
) -> list[int]:
    """The pooled vector's candidates that join the lexical head, best first (pure).

    SQLite's rule (``engines.sqlite.rerank.dense_candidates``): of the nominations (nearest first) the filter
    admits, the first ``n`` not in the head, keeping only hybrid hits (a query term held, or the reference
    vector's cosine at ``VECTOR_THRESHOLD``), so the hit set stays the contract's.

    Args:
        nominated: Keys nearest the query's pooled vector, best first (some the filter may not admit).
        signals: The candidates' statement's rows: a nominated key among them passed the filter.
        head: The lexical head (``RERANK_POOL`` keys).
        n: Most nominations kept.
    """
    passed = {s.key: s for s in signals}
    held = set(head)
    near = [k for k in nominated if k in passed and k not in held][:n]
    return [k for k in near if passed[k].matched or passed[k].cosine >= VECTOR_THRESHOLD]

"""The second stage of a hybrid item ranking on PostgreSQL: late interaction over the lexical stage's best.

The same stage as the SQLite engine's, through the same pure function (``engines.sqlite.rerank.reorder``): the
lexical stage (``search`` candidates) gives its best ``RERANK_POOL``; their stored token vectors (``vectors.load``,
one statement that also brings their bodies) are scored by MaxSim against the query's content tokens over the
item alone and over the item with the turn before it, and ordered by ``retrieval.fusion.fuse`` (weighted RRF of
the rankings, with recency, confidence and the speaker signal). Items not yet embedded rank by the lexical stage
alone; the rest of the ranking follows in lexical order.
"""

from __future__ import annotations

from memory_core.engines.sqlite.rerank import RERANK_POOL, reorder

__all__ = ["RERANK_POOL", "reorder"]

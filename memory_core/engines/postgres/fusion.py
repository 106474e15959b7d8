"""Fusion of the signals PostgreSQL returns for each candidate into one score (pure: values in, order out).

The database does the candidate work (``search``): lexical matches from the generated ``tsvector`` (GIN),
IDF-weighted per query word, the ``pg_trgm`` word similarity of the query to the candidate, and the cosine of
the stored embeddings (pgvector's HNSW index when installed, else computed in SQL over the reach). This module
turns those signals into scores with the rules the SQLite engine uses (``memory_core.engines.sqlite.search``),
so both engines agree on what a mode returns and how recency and confidence break near-ties:

| mode | a hit when | relevance |
| --- | --- | --- |
| keyword | a query word is among the item's words | ``kw = lex / (lex + BM25_HALF)``, nudged by trigram similarity |
| vector | cosine ≥ ``VECTOR_THRESHOLD`` | cosine |
| hybrid | either | ``(1 - VECTOR_SHARE) × kw + VECTOR_SHARE × cosine`` |

``score = relevance × (0.85 + 0.10 × recency + 0.05 × confidence)`` (``search.weights``); hits observed on a
hinted day come first (``refers_to``). Scores are absolute (no normalisation over the candidates), so a pack's
relevance floor compares sections fairly. Swap ``fuse`` for another fusion by rank without touching SQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from memory_core.engines.sqlite.search import VECTOR_SHARE, keyword_relevance, order, weights
from memory_core.query import FetchMode
from memory_core.scoring import VECTOR_THRESHOLD

__all__ = ["TRIGRAM_SHARE", "Signals", "fuse"]

TRIGRAM_SHARE: Final = 0.10
"""Share of keyword relevance the ``pg_trgm`` word similarity moves (seed 004 combines full-text relevance and
trigram similarity; *memory-core* keeps it a tie-breaker, as full-text relevance carries the IDF)."""


@dataclass(frozen=True)
class Signals:
    """What the database returned for one candidate.

    Attributes:
        key: The row key (``items.seq`` or ``beliefs.bid``).
        lexical: Okapi BM25 of the query words the row holds (``search.bm25``; 0: none).
        matched: Whether any query word is among the row's words.
        cosine: Cosine of the stored embedding with the query's.
        trigram: ``word_similarity(query, words)`` in [0, 1] (0 without ``pg_trgm``).
        when_us: ``observed_at``, else the write time, µs since the epoch.
        confidence: A learning's confidence, 0.5 for other kinds.
        hinted: Observed inside the request's ``refers_to`` window.
    """

    key: int
    lexical: float
    matched: bool
    cosine: float
    trigram: float
    when_us: int
    confidence: float
    hinted: bool = False


def fuse(signals: Sequence[Signals], mode: FetchMode, now_us: int, want: int) -> list[tuple[int, float]]:
    """The best ``want`` hits as ``(key, score)``: score descending, ties by key, hinted hits first.

    Args:
        signals: One per candidate (any order).
        mode: The fetch mode (decides which candidates are hits, see the module table).
        now_us: The time recency is measured from, µs since the epoch.
        want: How many to return at most.
    """
    if not signals or want <= 0:
        return []
    keys = np.fromiter((s.key for s in signals), dtype=np.int64, count=len(signals))
    lexical = np.fromiter((s.lexical for s in signals), dtype=np.float64, count=len(signals))
    matched = np.fromiter((s.matched for s in signals), dtype=bool, count=len(signals))
    cosine = np.fromiter((s.cosine for s in signals), dtype=np.float64, count=len(signals))
    trigram = np.fromiter((s.trigram for s in signals), dtype=np.float64, count=len(signals))
    when = np.fromiter((s.when_us for s in signals), dtype=np.int64, count=len(signals))
    confidence = np.fromiter((s.confidence for s in signals), dtype=np.float64, count=len(signals))
    hinted = np.fromiter((s.hinted for s in signals), dtype=bool, count=len(signals))
    kw = np.where(matched, (1.0 - TRIGRAM_SHARE) * keyword_relevance(lexical) + TRIGRAM_SHARE * trigram, 0.0)
    kw = np.where(matched, np.maximum(kw, 1e-6), 0.0)  # a match on common words only is still a hit
    near = cosine >= VECTOR_THRESHOLD
    if mode is FetchMode.KEYWORD:
        hit, rel = matched, kw
    elif mode is FetchMode.VECTOR:
        hit, rel = near, cosine
    else:
        hit, rel = matched | near, (1.0 - VECTOR_SHARE) * kw + VECTOR_SHARE * np.maximum(cosine, 0.0)
    scores = rel * weights(when, confidence, now_us)
    order_keys = np.argsort(keys[hit], kind="stable")
    k, s, h = keys[hit][order_keys], scores[hit][order_keys], hinted[hit][order_keys]
    return order(k, s, want, h if h.any() else None)

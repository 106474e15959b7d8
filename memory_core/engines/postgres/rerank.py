"""The second stage of a hybrid item ranking on PostgreSQL: late interaction over the lexical stage's best.

The same stage as the SQLite engine's (``engines.sqlite.rerank``), through the same pure seam: the lexical
stage (``search`` candidates scored by ``fusion.fuse``) gives its best ``RERANK_POOL``; their stored token
vectors (``vectors.load``, one statement that also brings their bodies) are scored by MaxSim against the query's
content tokens over the item alone and over the item with the turn before it, and ordered by
``retrieval.fusion.fuse`` (weighted RRF of the three rankings, with recency, confidence and the speaker signal).
Items not yet embedded rank by the lexical stage alone; the rest of the ranking follows in lexical order.

Scores stay the lexical stage's absolute scores, carried along the fused order by ``fusion.envelope``, so a
pack compares the hits of its sections on one scale (``recall.relevance``). ``reorder`` is pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

from memory_core.engines.sqlite.rerank import RERANK_POOL
from memory_core.engines.sqlite.search import weights
from memory_core.engines.sqlite.vectors import Stored
from memory_core.retrieval.embedder import F32
from memory_core.retrieval.fusion import envelope, fuse, names_speaker, query_words
from memory_core.retrieval.late import token_max

__all__ = ["RERANK_POOL", "reorder"]

_MIN_HEAD: Final = 2
"""Fewer candidates than this have nothing to reorder."""


def reorder(
    ranked: Sequence[tuple[int, float]],
    stored: dict[int, Stored],
    query: str,
    query_tokens: F32,
    now_us: int,
) -> list[tuple[int, float]]:
    """``ranked`` (the lexical stage, best first) with its first ``RERANK_POOL`` reordered (module docstring).

    Args:
        ranked: ``(seq, score)`` best first.
        stored: ``vectors.load``'s ``stored`` for the head's seqs (and their previous turns).
        query: The query text (for the speaker signal).
        query_tokens: The query's content-token vectors ``(m, dims)``.
        now_us: The read's clock, µs (recency).
    """
    head, tail = list(ranked[:RERANK_POOL]), list(ranked[RERANK_POOL:])
    if len(head) < _MIN_HEAD or len(query_tokens) == 0:
        return list(ranked)
    dims = query_tokens.shape[1]
    seqs = [s for s, _ in head]
    empty = np.zeros((0, dims), dtype=np.float32)

    def tokens(seq: int | None) -> F32:
        row = stored.get(seq) if seq is not None else None
        return empty if row is None or row.tokens is None or row.tokens.shape[1] != dims else row.tokens

    own = token_max(query_tokens, [tokens(s) for s in seqs])
    before = token_max(query_tokens, [tokens(stored[s].prev if s in stored else None) for s in seqs])
    window = np.maximum(own, before)
    embedded = np.array([len(tokens(s)) > 0 for s in seqs])
    when = np.array([stored[s].when_us if s in stored else now_us for s in seqs], dtype=np.int64)
    conf = np.array([stored[s].confidence if s in stored else 0.5 for s in seqs])
    words = query_words(query)
    spoken = np.array([s in stored and names_speaker(words, stored[s].speaker) for s in seqs])
    fused = fuse(np.arange(1, len(seqs) + 1), own, window, embedded, weights(when, conf, now_us), spoken)
    order_ = np.lexsort((np.arange(len(seqs)), -fused))
    scores = envelope(np.array([head[i][1] for i in order_]))
    floor = scores[-1] if len(scores) else 0.0
    out = [(seqs[i], float(s)) for i, s in zip(order_, scores, strict=True)]
    return out + [(seq, min(score, floor)) for seq, score in tail]

"""The second stage of a hybrid item ranking: late interaction over the lexical stage's best, fused by rank.

``ranking.rank_items`` gives the exact top of the lexical ranking (windowed stemmed BM25, the reference
vector as a tie-breaker, recency and confidence). Its best ``RERANK_POOL`` are read with their stored token
vectors (``vectors``), scored by MaxSim against the query's content tokens over the item alone and over the
item with the turn before it, and ordered by ``retrieval.fusion.fuse`` (RRF of the three rankings, with
recency, confidence and the speaker signal). Items not yet embedded rank by the lexical stage alone. The rest
of the ranking follows in lexical order.

Scores stay the lexical stage's absolute scores, carried along the fused order by ``fusion.envelope``, so a
pack compares the hits of its sections on one scale (``recall.relevance``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Final

import numpy as np

from memory_core.retrieval.embedder import F32
from memory_core.retrieval.fusion import envelope, fuse, names_speaker, query_words
from memory_core.retrieval.late import token_max

from .search import weights
from .vectors import Stored, load

__all__ = ["RERANK_POOL", "rerank"]

RERANK_POOL: Final = 100
"""Lexical candidates the late-interaction stage reorders."""


def rerank(
    conn: sqlite3.Connection,
    ranked: list[tuple[int, float]],
    query: str,
    query_tokens: F32,
    model: str,
    now_us: int,
    loader: Callable[[sqlite3.Connection, Sequence[int], str, int], dict[int, Stored]] = load,
) -> list[tuple[int, float]]:
    """``ranked`` (the lexical stage, best first) with its first ``RERANK_POOL`` reordered (module docstring).

    ``loader`` reads the candidates' stored rows (``vectors.load``, or a cache of it: ``token_cache``).
    """
    head, tail = ranked[:RERANK_POOL], ranked[RERANK_POOL:]
    if len(head) < 2 or len(query_tokens) == 0:
        return ranked
    dims = query_tokens.shape[1]
    seqs = [s for s, _ in head]
    stored = loader(conn, seqs, model, dims)
    prevs = sorted({p for s in seqs if s in stored and (p := stored[s].prev) is not None} - set(stored))
    stored.update(loader(conn, prevs, model, dims))
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

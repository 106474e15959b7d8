"""The second stage of a hybrid item ranking: late interaction over the lexical stage's best, fused by rank.

``ranking.rank_items`` gives the exact top of the lexical ranking (windowed stemmed BM25, the reference
vector as a tie-breaker, recency and confidence). Its best ``RERANK_POOL`` are read with their stored token
vectors (``vectors``), scored by MaxSim against the query's content tokens over the item alone and over the
item with the turns before and after it (``following``), and ordered by ``retrieval.fusion.fuse`` (RRF of
the rankings, with recency, confidence, the speaker signal and the date signal of ``retrieval.dates``). Up to
``retrieval.dense.DENSE_POOL`` items nearest the query's pooled vector that the lexical head misses join it
(``dense_candidates``, read from ``pooled.PooledIndex``), with no lexical rank and their own nomination rank;
so do items observed on a date the query names (``dated.dated_candidates``), after them.
Items not yet embedded rank by the lexical stage alone. The rest of the ranking follows in lexical order.

Scores stay the lexical stage's absolute scores, carried along the fused order by ``fusion.envelope``, so a
pack compares the hits of its sections on one scale (``recall.relevance``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import numpy as np

from memory_core.retrieval.dates import named_dates
from memory_core.retrieval.dense import DENSE_POOL
from memory_core.retrieval.embedder import F32
from memory_core.retrieval.fusion import envelope, fuse, names_speaker, query_words
from memory_core.retrieval.late import token_max
from memory_core.retrieval.terms import query_terms
from memory_core.scoring import VECTOR_THRESHOLD

from . import fts
from .following import next_turns
from .index import CandidateRows
from .pooled import PooledIndex
from .search import query_vector, weights
from .vectors import Stored, load

__all__ = ["RERANK_POOL", "dense_candidates", "hybrid_hits", "reorder", "rerank"]

RERANK_POOL: Final = 50
"""Lexical candidates the late-interaction stage reorders. Deeper heads let the model's two views and the named
speaker lift candidates that share little with the query over better lexical ones; in a pack, where each
section reads one agent's copy of each utterance, that costs evidence. LoCoMo dev with the brain (all three
conversations, date signal on; fetch@10 / pack): 35 → 77.3% / 77.6%, 50 → 78.0% / 78.1%, 70 → 78.1% / 77.4%,
100 → 78.7% / 76.6%. At 50 the pack holds at least its fetch@10, on each conversation the pack gains
(75.7 → 76.4, 75.1 → 76.4, 78.3 → 80.6) and half as many candidates are scored per fetch (``docs/retrieval.md``)."""
NEXT_VIEW: Final = True
"""Whether the window view spans the turn after each candidate too (``following``): LoCoMo dev with the brain,
fetch@10 / pack 78.0 / 78.1% → 78.5 / 79.5% (``docs/retrieval.md``)."""
_MIN_HEAD: Final = 2
"""Fewer candidates than this have nothing to reorder."""


def dense_candidates(
    conn: sqlite3.Connection,
    index: PooledIndex,
    rows: CandidateRows,
    ranked: list[tuple[int, float]],
    query: str,
    pooled: F32,
    model: str,
    n: int = DENSE_POOL,
) -> list[int]:
    """Up to ``n`` seqs among ``rows`` nearest the query's pooled vector and not in the lexical head, best first.

    Only hybrid hits are nominated (a stemmed query term, or the reference vector's cosine at
    ``VECTOR_THRESHOLD``), so the hit set stays the contract's.
    """
    if n <= 0 or len(rows) == 0 or pooled.size == 0:
        return []
    index.refresh(conn, model, int(pooled.shape[-1]))
    head = {s for s, _ in ranked[:RERANK_POOL]}
    near = [s for s in index.nearest(rows.keys, pooled, n + len(head)) if s not in head][:n]
    if not near:
        return []
    return hybrid_hits(conn, rows, near, query)


def hybrid_hits(conn: sqlite3.Connection, rows: CandidateRows, seqs: Sequence[int], query: str) -> list[int]:
    """The seqs of ``seqs`` (all among ``rows``) that are hybrid hits of ``query``, in their order.

    A hybrid hit holds a stemmed query term in its (windowed) indexed text, or passes the reference vector's
    cosine at ``VECTOR_THRESHOLD``: the contract's rule, so a nominated candidate keeps the hit set the contract's.
    """
    if not seqs:
        return []
    keys = np.array(sorted(set(seqs)), dtype=np.int64)
    at = np.searchsorted(rows.keys, keys)
    keep = np.zeros(len(rows), dtype=bool)
    keep[at] = True
    close = rows.subset(keep).cosines(query_vector(query)) >= VECTOR_THRESHOLD
    hit = dict(zip(keys.tolist(), close.tolist(), strict=True))
    rest = keys[~close]
    if len(rest):
        terms = query_terms(query)
        matched = fts.matching(conn, "items_fts", terms, rest, len(rows)) if terms else np.zeros(len(rest), bool)
        hit.update(zip(rest.tolist(), matched.tolist(), strict=True))
    return [s for s in seqs if hit[s]]


def rerank(
    conn: sqlite3.Connection,
    ranked: list[tuple[int, float]],
    query: str,
    query_tokens: F32,
    model: str,
    now_us: int,
    dense: list[int] | None = None,
    loader: Callable[[sqlite3.Connection, Sequence[int], str, int], dict[int, Stored]] = load,
) -> list[tuple[int, float]]:
    """``ranked`` (the lexical stage, best first) with its first ``RERANK_POOL`` and ``dense`` reordered.

    Reads the candidates' stored rows (and their previous turns') with ``loader`` (``vectors.load``, or a cache
    of it: ``token_cache``), then ``reorder``.
    """
    head = ranked[:RERANK_POOL]
    held = {h for h, _ in head}
    extra = [s for s in dense or [] if s not in held]
    if len(head) + len(extra) < _MIN_HEAD or len(query_tokens) == 0:
        return ranked
    dims = query_tokens.shape[1]
    seqs = [s for s, _ in head] + extra
    stored = loader(conn, seqs, model, dims)
    after = next_turns(conn, seqs, model) if NEXT_VIEW else None
    around = {p for s in seqs if s in stored and (p := stored[s].prev) is not None} | set((after or {}).values())
    stored.update(loader(conn, sorted(around - set(stored)), model, dims))
    return reorder(ranked, stored, query, query_tokens, now_us, extra, after)


def reorder(
    ranked: Sequence[tuple[int, float]],
    stored: dict[int, Stored],
    query: str,
    query_tokens: F32,
    now_us: int,
    dense: Sequence[int] = (),
    after: Mapping[int, int] | None = None,
) -> list[tuple[int, float]]:
    """``ranked`` with its first ``RERANK_POOL`` and ``dense`` reordered by the stored vectors; pure.

    Every engine that ranks locally calls it (SQLite through ``rerank``; PostgreSQL with rows read in its page's
    statement). ``dense`` (``dense_candidates``) joins the lexical head with no lexical rank, scored as its last
    member before ``fusion.envelope``; see the module docstring.

    Args:
        ranked: ``(seq, score)`` best first.
        stored: The stored rows (``vectors.Stored``) of the head, ``dense`` and their previous turns.
        query: The query text (for the speaker signal).
        query_tokens: The query's content-token vectors ``(m, dims)``.
        now_us: The read's clock, µs (recency).
        dense: Nominations of the pooled vector not in the head, best first.
        after: ``seq → the turn after it`` (``following.next_turns``), for the next-turn view; None: no view.
    """
    head, tail = list(ranked[:RERANK_POOL]), list(ranked[RERANK_POOL:])
    held = {h for h, _ in head}
    extra = [s for s in dense if s not in held]
    if len(head) + len(extra) < _MIN_HEAD or len(query_tokens) == 0:
        return list(ranked)
    if extra:
        lowest = head[-1][1] if head else 0.0
        taken = set(extra)
        head = head + [(s, lowest) for s in extra]
        tail = [(s, v) for s, v in tail if s not in taken]
    dims = query_tokens.shape[1]
    seqs = [s for s, _ in head]
    empty = np.zeros((0, dims), dtype=np.float32)

    def tokens(seq: int | None) -> F32:
        row = stored.get(seq) if seq is not None else None
        return empty if row is None or row.tokens is None or row.tokens.shape[1] != dims else row.tokens

    prevs = [stored[s].prev if s in stored else None for s in seqs]
    nexts = [after.get(s) for s in seqs] if after is not None else []
    scored = list(dict.fromkeys(t for t in [*seqs, *prevs, *nexts] if t is not None))  # neighbours are often candidates
    at = {t: i for i, t in enumerate(scored)}
    best = np.vstack([token_max(query_tokens, [tokens(t) for t in scored]), token_max(query_tokens, [empty])])

    def view(of: Sequence[int | None]) -> F32:
        return best[[at[t] if t is not None else len(scored) for t in of]]

    own = view(seqs)
    window = np.maximum(own, view(prevs))
    if after is not None:  # the window view spans the turn after too (``following``)
        window = np.maximum(window, view(nexts))
    embedded = np.array([len(tokens(s)) > 0 for s in seqs])
    when = np.array([stored[s].when_us if s in stored else now_us for s in seqs], dtype=np.int64)
    conf = np.array([stored[s].confidence if s in stored else 0.5 for s in seqs])
    words = query_words(query)
    spoken = np.array([s in stored and names_speaker(words, stored[s].speaker) for s in seqs])
    lexical = np.concatenate([np.arange(1, len(head) - len(extra) + 1), np.zeros(len(extra))]).astype(np.int64)
    nominated = np.zeros(len(seqs), dtype=np.int64)
    nominated[len(seqs) - len(extra) :] = np.arange(1, len(extra) + 1)
    dates = named_dates(query)
    dated = dates.covers(when) if dates else None
    fused = fuse(lexical, own, window, embedded, weights(when, conf, now_us), spoken, nominated, dated)
    order_ = np.lexsort((np.arange(len(seqs)), -fused))
    scores = envelope(np.array([head[i][1] for i in order_]))
    floor = scores[-1] if len(scores) else 0.0
    out = [(seqs[i], float(s)) for i, s in zip(order_, scores, strict=True)]
    return out + [(seq, min(score, floor)) for seq, score in tail]

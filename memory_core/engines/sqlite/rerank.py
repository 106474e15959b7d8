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
from memory_core.retrieval.late import Tokens, token_max
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
_EMPTY: Final = np.zeros((0, 0), dtype=np.float32)
"""The tokens of a text not embedded (by this model): ``late.token_max`` gives it -1."""


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
    head = {s for s, _ in ranked[:RERANK_POOL]}
    near = [s for s in index.nearest(conn, model, rows.keys, pooled, n + len(head)) if s not in head][:n]
    if not near:
        return []
    return hybrid_hits(conn, rows, near, query)


def _table_rows(conn: sqlite3.Connection, candidates: int) -> int:
    """About how many rows ``items_fts`` holds (the highest ``seq``, at least ``candidates``).

    ``fts.matching`` weighs rowid ranges around the nominated seqs against one whole-table statement, which reads
    the words' doclists over every agent's rows: weighed against the candidates' count, a small agent's read
    beside a 100k-turn one took the whole-table statement (issue 12 §4).
    """
    top = conn.execute("SELECT coalesce(max(seq), 0) FROM items").fetchone()[0]
    return max(candidates, int(top))


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
        total = _table_rows(conn, len(rows))
        matched = fts.matching(conn, "items_fts", terms, rest, total) if terms else np.zeros(len(rest), bool)
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


def _tokens(row: Stored | None, dims: int) -> Tokens:
    """A stored row's token vectors; none for a row not embedded (by a model of ``dims`` dimensions)."""
    held = None if row is None else row.tokens
    return held if held is not None and held.shape[1] == dims else _EMPTY


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
    rows = [stored.get(s) for s in seqs]
    prevs = [None if row is None else row.prev for row in rows]
    nexts = [after.get(s) for s in seqs] if after is not None else []
    # each text scored once: the candidates, then the turns before and after them that are not candidates
    at = {s: i for i, s in enumerate(seqs)}
    around = list(dict.fromkeys(t for t in [*prevs, *nexts] if t is not None and t not in at))
    at.update((t, len(seqs) + i) for i, t in enumerate(around))
    texts = [_tokens(row, dims) for row in rows] + [_tokens(stored.get(t), dims) for t in around]
    maxima = np.vstack([token_max(query_tokens, texts), np.full((1, len(query_tokens)), -1.0, np.float32)])
    own = maxima[: len(seqs)]
    before = maxima[[len(texts) if p is None else at[p] for p in prevs]]  # no turn before: the -1 row
    window = np.maximum(own, before)
    if after is not None:  # the window view spans the turn after too (``following``); none: the -1 row
        window = np.maximum(window, maxima[[len(texts) if t is None else at[t] for t in nexts]])
    embedded = np.array([len(t) > 0 for t in texts[: len(seqs)]])
    when = np.array([now_us if row is None else row.when_us for row in rows], dtype=np.int64)
    conf = np.array([0.5 if row is None else row.confidence for row in rows])
    words = query_words(query)
    spoken = np.array([row is not None and names_speaker(words, row.speaker) for row in rows])
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

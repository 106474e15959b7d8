"""The top of an item ranking, exact, without scoring what cannot reach it.

``search`` defines every row's score; this module finds the best ``want`` hits (and so whether more exist,
for ``next_cursor``) while doing the expensive parts only where they can change that answer:

1. Cosines for every candidate: one float32 matrix product over the process's ``ItemIndex`` (no SQL).
2. Which query terms (``retrieval.terms``: stemmed, stop-words dropped) are *rare* (``fts.classify``: doclist
   counts, up to a cutoff that is a share of the *candidates*, ``fts.common_cutoff(len(rows))``, not of the
   whole table), and BM25 for the candidates holding one,
   read only over rowid ranges that cover the candidates (``fts.bm25_rows``).
3. Bounds (``bounds``) on every candidate's score, cheap because they need neither recency nor the last
   unknown: whether a candidate holding no rare word holds a *common* one. That bit only adds the near-zero
   ``keyword_relevance(COMMON_ONLY)`` to keyword relevance. The rows whose upper bound cannot reach the
   ``want``-th best lower bound are dropped (``survivors``); recency is computed for the rest, the bounds
   tightened, and the common-word bit is read from FTS5 only for the survivors it could still move into the
   top (``fts.matching``).
4. The survivors are scored exactly as ``search.score_all`` scores every row (a score depends on its own row
   only) and ordered (``search.order``).

Why dropping is exact: ``sure`` rows are hits whatever the common-word bit says (a rare word, or a cosine at
the threshold where the mode reads vectors), and ``lb`` is a sure row's score with the bit unset and the least
recency, so at least ``want`` hits score at least the ``want``-th best ``lb`` (the threshold ``t``). A row whose
``ub`` (bit set, full recency) is below ``t`` can neither enter the top ``want`` nor change whether ``want``
hits exist. With fewer than ``want`` sure rows nothing is dropped and every bit is read. A ``refers_to`` hint
ranks its group first, so both bounds add ``HINT_RANK`` for hinted rows.

Why the rare/common cutoff is a share of the candidates (issue 12 §4, "no section's cost grows with the whole
store"): a word is classified by counting the table's rows holding it up to the cutoff, and each BM25 statement
has FTS5 count every rare word's rows in the whole table again (``bm25()``'s statistics). With the cutoff at 5%
of the *table*, a small agent beside one holding 100k turns counted up to 5,001 rows a word, per pack, for
words the big agent uses; at 5% of the rows the read ranks (at least ``search.COMMON_MIN``), both counts are
bounded by the read's own size. A store under ``COMMON_MIN / COMMON_SHARE`` (10k) items has the cutoff
``COMMON_MIN`` either way, so its rankings are unchanged; so is a single agent's own history, whose candidates
are the store.
"""

from __future__ import annotations

import sqlite3
from typing import Final

import numpy as np

from memory_core.query import FetchMode
from memory_core.retrieval.terms import query_terms
from memory_core.scoring import VECTOR_THRESHOLD

from . import fts
from .index import CandidateRows
from .search import (
    COMMON_ONLY,
    CONFIDENCE_WEIGHT,
    RECENCY_WEIGHT,
    BoolArray,
    Candidates,
    FloatArray,
    IntArray,
    align,
    keyword_relevance,
    members,
    order,
    query_vector,
    relevance,
    score_all,
    weights,
)

__all__ = ["HINT_RANK", "Bounds", "bounds", "rank_items", "survivors"]

HINT_RANK: Final = 4.0
"""Added to a hinted row's bounds: more than any score (a score is at most 1), so hinted rows bound first."""
_SLACK: Final = 1e-9
"""Rows within this of the threshold are kept (float rounding in the bounds)."""

Bounds = tuple[BoolArray, FloatArray, FloatArray]
"""``(sure, lb, ub)`` per candidate (see the module docstring)."""


def bounds(
    rare: BoolArray,
    lex: FloatArray,
    cos: FloatArray | None,
    w_lo: FloatArray,
    w_hi: FloatArray,
    mode: FetchMode,
    common: bool,
    hinted: BoolArray | None,
) -> Bounds:
    """Which candidates are sure hits, and bounds on every candidate's score; pure.

    Args:
        rare: Which candidates hold a rare word.
        lex: Their BM25 (0 elsewhere).
        cos: Cosines (None in keyword mode).
        w_lo: A lower bound on each candidate's ``search.weights``.
        w_hi: An upper bound on it.
        mode: The fetch mode.
        common: Whether the query has common words (a candidate without a rare word may then still match).
        hinted: Rows a ``refers_to`` hint moves first, if any.
    """
    kw_lb = np.where(rare, keyword_relevance(lex), 0.0)
    kw_ub = np.where(rare, kw_lb, float(keyword_relevance(np.array([COMMON_ONLY]))[0])) if common else kw_lb
    if mode is FetchMode.KEYWORD or cos is None:
        sure = rare
    else:
        near = cos >= VECTOR_THRESHOLD
        sure = near if mode is FetchMode.VECTOR else rare | near
    lb = relevance(kw_lb, cos, mode) * w_lo
    ub = relevance(kw_ub, cos, mode) * w_hi
    if hinted is not None:
        lb = lb + HINT_RANK * hinted
        ub = ub + HINT_RANK * hinted
    return sure, lb, ub


def survivors(sure: BoolArray, lb: FloatArray, ub: FloatArray, want: int) -> BoolArray | None:
    """The rows whose ``ub`` reaches the ``want``-th best ``lb`` of the sure rows; None: fewer sure rows."""
    count = int(np.count_nonzero(sure))
    if count < want:
        return None
    sure_lb = lb[sure]
    threshold = float(np.partition(sure_lb, count - want)[count - want])
    out: BoolArray = ub >= threshold - _SLACK
    return out


def rank_items(
    conn: sqlite3.Connection,
    rows: CandidateRows,
    query: str,
    mode: FetchMode,
    want: int,
    total: int,
    now_us: int,
    hinted_keys: IntArray | None = None,
    doc_counts: dict[tuple[str, str, int], int] | None = None,
) -> list[tuple[int, float]]:
    """The best ``want`` hits among ``rows`` as ``(seq, score)``, best first (``search.order``).

    Args:
        conn: A connection inside the read's transaction.
        rows: The candidates (``ItemIndex.candidates``).
        query: The query text.
        mode: The fetch mode.
        want: How many of the best hits to return (fewer when fewer exist).
        total: About how many rows ``items_fts`` holds (what a whole-table statement reads, against which
            ``fts.plan_ranges`` weighs rowid ranges covering the candidates).
        now_us: The read's clock, µs (recency).
        hinted_keys: Seqs observed on a hinted day, ascending (a ``refers_to`` hint), if any.
        doc_counts: The transaction's query-word document counts (``ReadMemo.doc_counts``), shared by the
            sections of one pack.
    """
    n = len(rows)
    if n == 0 or want <= 0:
        return []
    keys, when, conf = rows.keys, rows.when_us, rows.confidence
    cos = rows.cosines(query_vector(query)) if mode is not FetchMode.KEYWORD else None
    hinted = None if hinted_keys is None else members(keys, hinted_keys)
    words = query_terms(query) if mode is not FetchMode.VECTOR else []
    held = fts.classify(conn, "items_fts", words, fts.common_cutoff(n), doc_counts) if words else None
    lex, rare = np.zeros(n), np.zeros(n, dtype=bool)
    if held is not None and held.rare:
        found, rare = align(keys, *fts.bm25_rows(conn, "items_fts", held, keys, total))
        lex = np.maximum(found, 0.0)
    common = held is not None and bool(held.common)
    w_lo = (1.0 - RECENCY_WEIGHT - CONFIDENCE_WEIGHT) + CONFIDENCE_WEIGHT * conf
    keep = survivors(*bounds(rare, lex, cos, w_lo, w_lo + RECENCY_WEIGHT, mode, common, hinted), want)
    idx = np.arange(n) if keep is None else np.flatnonzero(keep)
    keys, when, conf, lex, rare = keys[idx], when[idx], conf[idx], lex[idx], rare[idx]
    cos = None if cos is None else cos[idx]
    hinted = None if hinted is None else hinted[idx]
    weight = weights(when, conf, now_us)
    matched = rare.copy()
    if held is not None and held.common:
        unknown = ~rare
        tight = survivors(*bounds(rare, lex, cos, weight, weight, mode, True, hinted), want)
        if tight is not None:
            unknown &= tight
        if unknown.any():
            at = np.flatnonzero(unknown)[fts.matching(conn, "items_fts", held.common, keys[unknown], total)]
            lex[at] = COMMON_ONLY
            matched[at] = True
    hit, scores = score_all(Candidates(keys, when, conf, cos, lex, matched), mode, weight=weight)
    return order(keys[hit], scores[hit], want, None if hinted is None else hinted[hit])

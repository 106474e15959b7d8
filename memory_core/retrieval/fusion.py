"""Reciprocal-rank fusion, and a fused list's scores on the absolute scale of its hits (pure).

RRF (Cormack, Clarke & Büttcher 2009): an item's fused value is ``Σ 1 / (k + rank)`` over the rankings it is
in (rank from 1; ``k = RRF_K``), so rankings of unlike scales (BM25, cosines) combine without calibration.

A fused value means nothing outside its own list, but a pack compares the hits of several fetches (its
sections, and the relevance floor's bars): a hit's *score* must stay absolute. ``envelope`` gives each hit of
a fused order the best absolute score at or below its position (the upper envelope): scores then fall along
the fused order, and a fetch's best score is the best absolute score it holds, as before fusion.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Final

import numpy as np
import numpy.typing as npt

from .late import maxsim

__all__ = [
    "DATE_BOOST",
    "DENSE_WEIGHT",
    "LEXICAL_WEIGHT",
    "RRF_K",
    "SPEAKER_BOOST",
    "envelope",
    "first_name",
    "fuse",
    "names_speaker",
    "query_words",
    "ranks",
    "rrf",
]

RRF_K: Final = 60
"""The RRF constant of Cormack et al. (2009)."""
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def ranks(values: FloatArray, present: npt.NDArray[np.bool_] | None = None) -> IntArray:
    """Rank of each value, 1 = highest (ties by position); 0 where ``present`` is False (not in the ranking)."""
    order_ = np.lexsort((np.arange(len(values)), -values))
    out = np.zeros(len(values), dtype=np.int64)
    out[order_] = np.arange(1, len(values) + 1)
    if present is not None:
        kept = order_[present[order_]]
        out[:] = 0
        out[kept] = np.arange(1, len(kept) + 1)
    return out


def rrf(rankings: Sequence[IntArray], k: int = RRF_K) -> FloatArray:
    """``Σ 1 / (k + rank)`` per item over ``rankings`` (rank 0: not ranked there, adds nothing)."""
    if not rankings:
        return np.zeros(0)
    out = np.zeros(len(rankings[0]))
    for r in rankings:
        out += np.where(r > 0, 1.0 / (k + np.maximum(r, 1)), 0.0)
    return out


def envelope(scores_in_order: FloatArray) -> FloatArray:
    """Scores of a fused order: each the maximum of its own and every later one (non-increasing)."""
    out: FloatArray = np.maximum.accumulate(scores_in_order[::-1])[::-1]
    return out


SPEAKER_BOOST: Final = 0.5
"""Share a fused value gains when the query names the item's speaker (issue 14's study: "a small boost for
turns spoken by the person the question names"). LoCoMo dev fetch@10 without the pooled source: 0.709 without
it, 0.746 at 0.15, 0.757 at 0.3; with the pooled source and the brain: 76.8% at 0.3, 78.2% at 0.5 (category 1:
45.9% → 50.5%)."""
LEXICAL_WEIGHT: Final = 2.0
"""Weight of the lexical ranking's reciprocal rank: as much as the model's two views together (LoCoMo dev
fetch@10: 0.716 at 0.5, 0.746 at 1, 0.757 at 2)."""
DENSE_WEIGHT: Final = 2.0
"""Weight of the pooled vector's nomination rank (``retrieval.dense``): a nominated item has no lexical rank, and
weighed like the lexical ranking it can compete with the lexical top (LoCoMo dev with the brain, fetch@10:
75.7% without the source, 76.5% at weight 1, 76.8% at 2)."""
DATE_BOOST: Final = 1.0
"""Share a fused value gains when the query names the day or month the item was observed on
(``retrieval.dates``). A named date is a narrower signal than a named speaker (a day holds one session of a
conversation, a person says half of it), so it weighs at least as much: a dated candidate counts as if it held
its place in a second ranking. LoCoMo dev with the brain, fetch@10: 78.2% without it, 78.4% at 0.5, 78.7% at 1
(34 of the 383 questions name a date); no conversation of the three loses."""
_NAME = re.compile(r"[^\W\d_]+")


def names_speaker(query_words: frozenset[str], speaker: str | None) -> bool:
    """Whether a query (its lowercase words) names ``speaker`` by their first name."""
    if not speaker:
        return False
    first = first_name(speaker)
    return first is not None and first in query_words


@lru_cache(maxsize=4096)
def first_name(speaker: str) -> str | None:
    """A speaker's first name, lowercase (its first word of letters); None when it has none.

    Kept per process: a rerank asks it of every candidate, and a store holds few speakers.
    """
    found = _NAME.search(speaker.lower())
    return found.group(0) if found else None


def query_words(query: str) -> frozenset[str]:
    """The lowercase words of a query, for ``names_speaker``."""
    return frozenset(_NAME.findall(query.lower()))


def fuse(
    lexical_rank: IntArray,
    own: npt.NDArray[np.float32],
    window: npt.NDArray[np.float32],
    embedded: npt.NDArray[np.bool_],
    weight: FloatArray,
    spoken: npt.NDArray[np.bool_],
    nominated: IntArray | None = None,
    dated: npt.NDArray[np.bool_] | None = None,
) -> FloatArray:
    """The fused value of each candidate (higher first).

    Args:
        lexical_rank: Rank in the lexical stage (1 = best; 0 = not matched lexically).
        own: ``late.token_max`` rows of each candidate's own token vectors (``(n, m)``).
        window: The same over the candidate and the turn before it (the elementwise max with its rows).
        embedded: Which candidates have vectors (the others rank by the lexical stage alone).
        weight: ``0.85 + 0.10 × recency + 0.05 × confidence`` (``engines.sqlite.search.weights``).
        spoken: Which candidates were said by someone the query names.
        nominated: Rank among the pooled vector's nominations (``retrieval.dense``; 0 = not nominated), if any.
        dated: Which candidates were observed on a date the query names (``retrieval.dates``), if any.

    Returns:
        ``(LEXICAL_WEIGHT/(k + r_lex) + weight × (1/(k + r_own) + 1/(k + r_window)) + DENSE_WEIGHT/(k + r_dense))
        × (1 + SPEAKER_BOOST if spoken) × (1 + DATE_BOOST if dated)``: weighted RRF of the four rankings (a
        candidate not in one gains nothing from it), recency and confidence weighing the model's two views (the
        lexical stage's scores hold them already), so with nothing embedded, nothing nominated and no speaker or
        date named the lexical order is kept.
    """
    r_own = ranks(maxsim(own), embedded)
    r_win = ranks(maxsim(window), embedded)
    lexical = LEXICAL_WEIGHT * rrf([lexical_rank])
    dense = DENSE_WEIGHT * rrf([nominated]) if nominated is not None else 0.0
    out: FloatArray = (lexical + weight * rrf([r_own, r_win]) + dense) * np.where(spoken, 1.0 + SPEAKER_BOOST, 1.0)
    if dated is not None:
        out = out * np.where(dated, 1.0 + DATE_BOOST, 1.0)
    return out

"""Reciprocal-rank fusion, and a fused list's scores on the absolute scale of its hits (pure).

RRF (Cormack, Clarke & Büttcher 2009): an item's fused value is ``Σ 1 / (k + rank)`` over the rankings it is
in (rank from 1; ``k = RRF_K``), so rankings of unlike scales (BM25, cosines) combine without calibration.

A fused value means nothing outside its own list, but a pack compares the hits of several fetches (its
sections, and the relevance floor's bars): a hit's *score* must stay absolute. ``envelope`` gives each hit of
a fused order the best absolute score at or below its position (the upper envelope): scores then fall along
the fused order, and a fetch's best score is the best absolute score it holds, as before fusion.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["RRF_K", "envelope", "ranks", "rrf"]

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

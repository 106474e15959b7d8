"""The window's pooled vector as a candidate source (pure): a turn nominated by what it and its neighbours say.

A question's evidence is often a turn that says little alone ("Yeah, since I was ten!") but answers the turn
before it, or is asked about by the turn after it. The lexical stage indexes each turn with its neighbours
(``retrieval.window``) and late interaction scores a window view (``engines.sqlite.following``), but both only
reorder what the candidate sources give them; the pooled vector (``retrieval.dense``) nominates by the turn
alone. Here each turn is scored by the pooled vector of its three-turn window (the turn before it, the turn,
the turn after it, in one thread): the normalised sum of the three turns' unit pooled vectors, so nothing is
stored for it and nothing is encoded.

Its cosine with the query ``q`` is ``(c_prev + c + c_next) / |v_prev + v + v_next|`` (``c``: the turns' own
cosines with ``q``, which the pooled source computes anyway). ``|v_prev + v + v_next|² = n + 2 Σ v_i·v_j``
over the ``n`` turns present, which needs the vectors; with non-negative pairwise cosines (sentence vectors of
one conversation) it is at least ``√n``, so ``(c_prev + c + c_next) / √n`` is an upper bound (``bound``).
``window_top`` rescores exactly only the ``WIDEN × k`` best by the bound: a fetch gathers three vectors per
rescored row, not per candidate.

Measured on LoCoMo dev (the three conversations with the PEP brain, every turn embedded by MiniLM): of the 157
evidence turns the engine's fetch@10 missed, 6 are among a conversation's first 20 turns by the turn's own pooled
vector, 40 by the window's (37 by late interaction over the window, 21 by the lexical stage; ``docs/retrieval.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["WIDEN", "WINDOW_POOL", "bound", "neighbours", "window_cosines", "window_top"]

WINDOW_POOL: Final = 30
"""Candidates the window's pooled vector nominates per fetch, besides the lexical head and the pooled and dated
nominations. LoCoMo dev with the brain (fetch@10 / pack): none 78.8 / 80.0%, 20 → 80.2 / 80.5% and 30 → 80.4 /
80.5% placed before the dated ones, 30 after them → 80.4 / 80.8% (``docs/retrieval.md``)."""
WIDEN: Final = 4
"""Rows rescored exactly per nomination wanted, in the bound's order (three pooled vectors gathered each). LoCoMo
dev with the brain: the same fetch@10 and pack as rescoring until no row's bound reaches the ``k``-th exact
cosine (exact), which rescored 190 rows per fetch on average, 480 at the 99th percentile."""

F32 = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
_NONE: Final = -1


def neighbours(keys: IntArray, prev: IntArray) -> tuple[IntArray, IntArray]:
    """Positions of each key's previous and next turn among ``keys`` (-1: none among them).

    Args:
        keys: ``(n,)`` seqs, ascending.
        prev: ``(n,)`` each key's previous turn (a seq; -1: none).

    Returns:
        ``(before, after)``: ``before[i]`` is the position of ``prev[i]`` in ``keys``; ``after[j]`` the position of
        the lowest key whose previous turn is ``keys[j]`` (a turn logged once per thread has one).
    """
    n = len(keys)
    before = np.full(n, _NONE, dtype=np.int64)
    after = np.full(n, _NONE, dtype=np.int64)
    if n == 0:
        return before, after
    at = np.minimum(np.searchsorted(keys, prev), n - 1)
    held = (prev >= 0) & (keys[at] == prev)
    before[held] = at[held]
    mine = np.flatnonzero(held)
    lowest = np.full(n, n, dtype=np.int64)
    np.minimum.at(lowest, before[mine], mine)  # the lowest key naming each turn as its previous one
    after[lowest < n] = lowest[lowest < n]
    return before, after


def _gather(values: npt.NDArray[np.floating], at: IntArray) -> npt.NDArray[np.float64]:
    """``values[at]``, 0 where ``at`` is -1."""
    out = np.where(at >= 0, values[np.maximum(at, 0)], 0.0)
    return out.astype(np.float64)


def bound(cos: F32, before: IntArray, after: IntArray) -> npt.NDArray[np.float64]:
    """An upper bound on each window's cosine (exact for a turn alone): ``(c_prev + c + c_next) / √n``."""
    total = cos.astype(np.float64) + _gather(cos, before) + _gather(cos, after)
    present = 1 + (before >= 0) + (after >= 0)
    out: npt.NDArray[np.float64] = total / np.sqrt(present)
    return out


def window_cosines(
    cos: F32, before: IntArray, after: IntArray, rows: IntArray, vectors: Callable[[IntArray], F32]
) -> npt.NDArray[np.float64]:
    """The exact window cosine of the positions ``rows``.

    Args:
        cos: ``(n,)`` each turn's own cosine with the query.
        before: Previous-turn positions (``neighbours``).
        after: Next-turn positions.
        rows: The positions to score.
        vectors: Gives the unit pooled vectors ``(len(at), d)`` of positions ``at``.
    """
    if len(rows) == 0:
        return np.zeros(0)
    b, a = before[rows], after[rows]
    at = np.concatenate([rows, np.maximum(b, 0), np.maximum(a, 0)])
    held = vectors(at).reshape(3, len(rows), -1)
    present = np.stack([b >= 0, a >= 0]).astype(held.dtype)
    window = held[0] + held[1] * present[0][:, None] + held[2] * present[1][:, None]
    norm = np.maximum(np.sqrt(np.einsum("ij,ij->i", window, window).astype(np.float64)), 1e-12)
    total = cos[rows].astype(np.float64) + _gather(cos, b) + _gather(cos, a)
    out: npt.NDArray[np.float64] = total / norm
    return out


def window_top(
    cos: F32,
    before: IntArray,
    after: IntArray,
    vectors: Callable[[IntArray], F32],
    k: int,
    skip: npt.NDArray[np.bool_] | None = None,
    widen: int = WIDEN,
) -> IntArray:
    """Positions of the ``k`` best windows by their pooled vector's cosine, best first (ties by position).

    The ``widen × k`` best by ``bound`` (``skip`` left out) are rescored exactly (``window_cosines``) and the
    best ``k`` of them kept: the exact top whenever no other row's bound reaches the ``k``-th exact cosine.

    Args:
        cos: ``(n,)`` each turn's own cosine with the query.
        before: Previous-turn positions (``neighbours``).
        after: Next-turn positions.
        vectors: Gives the unit pooled vectors of positions.
        k: How many (fewer when fewer candidates).
        skip: Positions not to nominate (already candidates), if any.
        widen: Rows rescored per nomination.
    """
    upper = bound(cos, before, after)
    if skip is not None:
        upper = np.where(skip, -np.inf, upper)
    live = int(np.count_nonzero(np.isfinite(upper)))
    k = min(max(k, 0), live)
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    take = min(k * max(widen, 1), live)
    part = np.argpartition(-upper, take - 1)[:take] if take < len(upper) else np.arange(len(upper))
    part = part[np.isfinite(upper[part])].astype(np.int64)
    exact = window_cosines(cos, before, after, part, vectors)
    out: IntArray = part[np.lexsort((part, -exact))[:k]]
    return out

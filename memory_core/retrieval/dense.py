"""The pooled-vector candidate source (pure): the items nearest the query's pooled vector, by cosine.

The lexical stage finds what shares words with the question; an evidence turn that says the same thing in other
words ("painted a sunrise" for "What did Melanie paint?" is found, "my latest piece of art" is not) is out of its
reach, and late interaction reorders only what it is given. A pooled dense vector per item (the mean of the
model's token states, unit length; all-MiniLM-L6-v2's usual sentence vector) nominates the ``n`` nearest items
among the candidates the fetch's filter admits; ``engines.sqlite.rerank`` adds them to the lexical candidates
and ranks the union by RRF. Alone, the pooled vector is a weak ranker (issue 14's study: R@10 0.544 against
0.624 for stemmed BM25), which is why it only nominates candidates.

Vectors are held int8 with one float32 scale per row (``late.quantise``'s layout, 388 bytes per 384-dimension
item; 38 MB for 100k items): cosine order is kept within the quantisation error (~0.01).
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["DENSE_POOL", "nearest", "quantise_rows"]

DENSE_POOL: Final = 30
"""Candidates the pooled vector nominates per fetch, beside the lexical stage's 100 (LoCoMo dev with the brain,
fetch@10: 76.5% with 30, 76.1% with 60, at weight 1; ``docs/retrieval.md``)."""

_CHUNK: Final = 8192
"""Rows converted to float32 per matrix product (3 MB at 384 dimensions)."""
F32 = npt.NDArray[np.float32]
I8 = npt.NDArray[np.int8]
IntArray = npt.NDArray[np.int64]


def quantise_rows(rows: F32) -> tuple[I8, F32]:
    """``(q, scale)``: int8 rows and their float32 scales, ``rows ≈ q × scale[:, None]``."""
    rows = np.asarray(rows, dtype=np.float32).reshape(len(rows), -1)
    scale = (np.maximum(np.abs(rows).max(axis=1, initial=0.0), 1e-12) / 127.0).astype(np.float32)
    q = np.rint(rows / scale[:, None]).astype(np.int8)
    return q, scale


def nearest(q: I8, scale: F32, query: F32, n: int) -> tuple[IntArray, npt.NDArray[np.float64]]:
    """Positions of the ``n`` rows of ``q`` nearest ``query`` by cosine, best first, and their cosines.

    Args:
        q: ``(rows, d)`` int8 unit vectors (``quantise_rows``).
        scale: ``(rows,)`` their scales.
        query: ``(d,)`` the query's unit pooled vector.
        n: How many (fewer when fewer rows).

    Returns:
        Positions (ties by position) and cosines.
    """
    if len(q) == 0 or n <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    vec = np.asarray(query, dtype=np.float32)
    cos = np.empty(len(q), dtype=np.float32)
    for start in range(0, len(q), _CHUNK):  # int8 → float32 a chunk at a time: no full-size copy
        part_q = q[start : start + _CHUNK]
        cos[start : start + len(part_q)] = (part_q.astype(np.float32) @ vec) * scale[start : start + len(part_q)]
    take = min(n, len(cos))
    part = np.argpartition(-cos, take - 1)[:take] if take < len(cos) else np.arange(len(cos))
    best = part[np.lexsort((part, -cos[part]))]
    return best.astype(np.int64), cos[best].astype(np.float64)

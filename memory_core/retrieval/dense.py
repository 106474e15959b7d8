"""The pooled-vector candidate source (pure): the items nearest the query's pooled vector, by cosine.

The lexical stage finds what shares words with the question; an evidence turn that says the same thing in other
words ("painted a sunrise" for "What did Melanie paint?" is found, "my latest piece of art" is not) is out of its
reach, and late interaction reorders only what it is given. A pooled dense vector per item (the mean of the
model's token states, unit length; all-MiniLM-L6-v2's usual sentence vector) nominates the ``n`` nearest items
among the candidates the fetch's filter admits; ``engines.sqlite.rerank`` adds them to the lexical candidates
and ranks the union by RRF. Alone, the pooled vector is a weak ranker (issue 14's study: R@10 0.544 against
0.624 for stemmed BM25), which is why it only nominates candidates.

Vectors are held float32, as stored (1,536 bytes per 384-dimension item; 154 MB for 100k items in each reading
process), so a fetch costs one BLAS matrix-vector product over its candidates: about twice the reference
vector's product the lexical stage already does (64 dimensions), where int8 rows converted per query cost about
twenty times it (measured side by side over 100k rows).
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["DENSE_POOL", "nearest", "top"]

DENSE_POOL: Final = 30
"""Candidates the pooled vector nominates per fetch, beside the lexical stage's 100 (LoCoMo dev with the brain,
fetch@10: 76.5% with 30, 76.1% with 60, at weight 1; ``docs/retrieval.md``)."""

F32 = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]


def nearest(vectors: F32, query: F32, n: int) -> tuple[IntArray, npt.NDArray[np.float64]]:
    """Positions of the ``n`` rows of ``vectors`` nearest ``query`` by cosine, best first, and their cosines.

    Args:
        vectors: ``(rows, d)`` unit vectors, float32.
        query: ``(d,)`` the query's unit pooled vector.
        n: How many (fewer when fewer rows).

    Returns:
        Positions (ties by position) and cosines.
    """
    if len(vectors) == 0 or n <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    return top(vectors @ np.asarray(query, dtype=np.float32), n)


def top(cos: npt.NDArray[np.float32], n: int) -> tuple[IntArray, npt.NDArray[np.float64]]:
    """Positions of the ``n`` largest of ``cos``, largest first (ties by position), and their values."""
    take = min(n, len(cos))
    if take <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    part = np.argpartition(-cos, take - 1)[:take] if take < len(cos) else np.arange(len(cos))
    best = part[np.lexsort((part, -cos[part]))]
    return best.astype(np.int64), cos[best].astype(np.float64)

"""Late interaction over stored token vectors (pure): quantisation and MaxSim.

A text's token vectors (``Embedder.encode``) are stored int8, one scale per token (``quantise``): a token of
``d`` dimensions costs ``d + 4`` bytes (384-dimension MiniLM: 388 bytes; ``MAX_TOKENS`` = 36 tokens at most
≈ 14 KB a turn). Dequantised cosines are within ~0.01 of the float ones.

MaxSim (Khattab & Zaharia 2020, "ColBERT"): for each query token, the best cosine with any token of the text;
the score is their mean over the query's content tokens. ``token_max`` gives the per-query-token maxima of many
texts in one matrix product, so a view made of several texts (a turn with the turn before it) is the
elementwise max of their rows, without storing the view.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["dequantise", "maxsim", "quantise", "token_max"]

F32 = npt.NDArray[np.float32]
_SCALE: Final = np.dtype("<f4")


def quantise(tokens: F32) -> bytes:
    """``(t, d)`` float vectors as bytes: ``t`` float32 scales, then ``t × d`` int8 (value × 127 / row max)."""
    tokens = np.asarray(tokens, dtype=np.float32)
    scale = np.maximum(np.abs(tokens).max(axis=1, initial=0.0), 1e-12) / 127.0 if len(tokens) else np.zeros(0)
    q = np.rint(tokens / scale[:, None]).astype(np.int8) if len(tokens) else np.zeros((0, 0), dtype=np.int8)
    return np.asarray(scale, dtype=_SCALE).tobytes() + q.tobytes()


def dequantise(blob: bytes, dims: int) -> F32:
    """The ``(t, dims)`` float32 vectors ``quantise`` stored."""
    t = len(blob) // (dims + 4)
    if t * (dims + 4) != len(blob):
        raise ValueError(f"a token blob of {len(blob)} bytes is not whole tokens of {dims} dimensions")
    scale = np.frombuffer(blob, dtype=_SCALE, count=t)
    q = np.frombuffer(blob, dtype=np.int8, offset=4 * t).reshape(t, dims)
    out: F32 = q.astype(np.float32) * scale[:, None]
    return out


def token_max(query: F32, texts: Sequence[F32]) -> F32:
    """``(n, m)``: for each text and each of the ``m`` query tokens, its best cosine with the text's tokens.

    A text with no tokens gets -1 (no evidence) for every query token.
    """
    m = len(query)
    out = np.full((len(texts), m), -1.0, dtype=np.float32)
    sizes = np.array([len(t) for t in texts], dtype=np.int64)
    if m == 0 or not sizes.sum():
        return out
    full = np.flatnonzero(sizes)
    stacked = np.concatenate([texts[int(i)] for i in full])
    sims = stacked @ query.T  # (total tokens, m)
    starts = np.concatenate([[0], np.cumsum(sizes[full])[:-1]])
    out[full] = np.maximum.reduceat(sims, starts, axis=0)
    return out


def maxsim(rows: F32) -> npt.NDArray[np.float64]:
    """MaxSim per text from ``token_max`` rows (the mean over query tokens); 0 when the query has no tokens."""
    if rows.shape[1] == 0:
        return np.zeros(len(rows))
    out: npt.NDArray[np.float64] = rows.mean(axis=1).astype(np.float64)
    return out

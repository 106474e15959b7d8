"""Late interaction over stored token vectors (pure): quantisation and MaxSim.

A text's token vectors (``Embedder.encode``) are stored int8, one scale per token (``quantise``): a token of
``d`` dimensions costs ``d + 4`` bytes (384-dimension MiniLM: 388 bytes; ``MAX_TOKENS`` = 36 tokens at most
≈ 14 KB a turn). Dequantised cosines are within ~0.01 of the float ones. Ranking keeps them as stored
(``Quantised``, a view of the blob: nothing decoded) and scales the products instead of the vectors.

MaxSim (Khattab & Zaharia 2020, "ColBERT"): for each query token, the best cosine with any token of the text;
the score is their mean over the query's content tokens. ``token_max`` gives the per-query-token maxima of many
texts in one matrix product, so a view made of several texts (a turn with the turn before it) is the
elementwise max of their rows, without storing the view.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, cast

import numpy as np
import numpy.typing as npt

__all__ = ["CHUNK", "Quantised", "Tokens", "dequantise", "maxsim", "quantise", "token_max"]

F32 = npt.NDArray[np.float32]
_SCALE: Final = np.dtype("<f4")
CHUNK: Final = 128
"""Token rows ``token_max`` casts and multiplies at a time: a chunk of 384-dimension rows (192 KB) stays in a
core's L2 cache from the cast to the product. Stacking a rerank's ~3,200 rows (4.9 MB) first and multiplying
them at once reads them back from memory: 2.3× the CPU time on the demo's data (0.67 against 1.5 ms)."""


def quantise(tokens: F32) -> bytes:
    """``(t, d)`` float vectors as bytes: ``t`` float32 scales, then ``t × d`` int8 (value × 127 / row max)."""
    tokens = np.asarray(tokens, dtype=np.float32)
    scale = np.maximum(np.abs(tokens).max(axis=1, initial=0.0), 1e-12) / 127.0 if len(tokens) else np.zeros(0)
    q = np.rint(tokens / scale[:, None]).astype(np.int8) if len(tokens) else np.zeros((0, 0), dtype=np.int8)
    return np.asarray(scale, dtype=_SCALE).tobytes() + q.tobytes()


@dataclass(frozen=True)
class Quantised:
    """A text's token vectors as ``quantise`` stored them: vector ``i`` is ``values[i] × scales[i]``.

    Attributes:
        values: ``(t, d)`` int8.
        scales: ``(t,)`` float32, one per token.
    """

    values: npt.NDArray[np.int8]
    scales: F32

    @classmethod
    def parse(cls, blob: bytes, dims: int) -> Quantised:
        """The vectors of a ``quantise`` blob of ``dims``-dimension tokens (views of ``blob``, nothing copied).

        Raises:
            ValueError: the blob is not whole tokens of ``dims`` dimensions.
        """
        t = len(blob) // (dims + 4)
        if t * (dims + 4) != len(blob):
            raise ValueError(f"a token blob of {len(blob)} bytes is not whole tokens of {dims} dimensions")
        scales = np.frombuffer(blob, dtype=_SCALE, count=t).astype(np.float32, copy=False)
        return cls(np.frombuffer(blob, dtype=np.int8, offset=4 * t).reshape(t, dims), scales)

    def __len__(self) -> int:
        return len(self.values)

    @property
    def shape(self) -> tuple[int, int]:
        """``(t, d)``, as the float vectors' shape (the values' own: a rerank asks ~100 texts per fetch)."""
        return cast(tuple[int, int], self.values.shape)

    @property
    def nbytes(self) -> int:
        """Bytes held (``d + 4`` per token)."""
        return int(self.values.nbytes + self.scales.nbytes)

    def dequantise(self) -> F32:
        """The ``(t, d)`` float32 vectors."""
        out: F32 = self.values.astype(np.float32) * self.scales[:, None]
        return out


Tokens = F32 | Quantised
"""A text's token vectors: float32 ``(t, d)``, or as stored (``Quantised``)."""


def dequantise(blob: bytes, dims: int) -> F32:
    """The ``(t, dims)`` float32 vectors ``quantise`` stored."""
    return Quantised.parse(blob, dims).dequantise()


def token_max(query: F32, texts: Sequence[Tokens]) -> F32:
    """``(n, m)``: for each text and each of the ``m`` query tokens, its best cosine with the text's tokens.

    The texts' vectors are stacked ``CHUNK`` token rows at a time into one float32 buffer (int8 values cast on
    the way), each chunk multiplied by the query's vectors while it is in cache, each product row scaled by its
    token's scale (``Quantised``; 1 for float vectors), and each text's rows reduced by
    ``np.maximum.reduceat``. Equal to dequantising each text and taking ``(tokens @ query.T).max(axis=0)`` up to
    float32 rounding (``x·(v·s)`` against ``(x·v)·s``).

    A text with no tokens gets -1 (no evidence) for every query token.
    """
    m, n = len(query), len(texts)
    out = np.full((n, m), -1.0, dtype=np.float32)
    if m == 0 or n == 0:
        return out
    values: list[npt.NDArray[np.int8] | F32] = []
    scales: list[F32 | None] = []
    counts: list[int] = []
    full: list[int] = []
    for i, text in enumerate(texts):  # one pass, no per-text helper calls: a rerank scores ~170 texts
        v: npt.NDArray[np.int8] | F32
        scale: F32 | None
        if isinstance(text, Quantised):
            v, scale = text.values, text.scales
        else:
            v, scale = text, None
        if v.shape[0]:
            values.append(v)
            scales.append(scale)
            counts.append(int(v.shape[0]))
            full.append(i)
    if not full:
        return out
    width = max(CHUNK, max(counts))
    buffer = np.empty((width, values[0].shape[1]), dtype=np.float32)
    across = np.asarray(query, dtype=np.float32).T
    sims = np.empty((sum(counts), m), dtype=np.float32)
    i = at = 0
    while i < len(values):  # whole texts per chunk, at most ``width`` rows
        j, rows = i + 1, counts[i]
        while j < len(values) and rows + counts[j] <= width:
            rows += counts[j]
            j += 1
        np.concatenate(values[i:j], out=buffer[:rows], casting="safe")
        np.matmul(buffer[:rows], across, out=sims[at : at + rows])
        at, i = at + rows, j
    if any(scale is not None for scale in scales):
        ones = [np.ones(c, dtype=np.float32) if sc is None else sc for sc, c in zip(scales, counts, strict=True)]
        sims *= np.concatenate(ones)[:, None]
    starts = np.zeros(len(full), dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    out[full] = np.maximum.reduceat(sims, starts, axis=0)
    return out


def maxsim(rows: F32) -> npt.NDArray[np.float64]:
    """MaxSim per text from ``token_max`` rows (the mean over query tokens); 0 when the query has no tokens."""
    if rows.shape[1] == 0:
        return np.zeros(len(rows))
    out: npt.NDArray[np.float64] = rows.mean(axis=1).astype(np.float64)
    return out

"""The reference engine's scoring, as pure functions (contract reference §3, ``score.rs``).

Tokens are runs of alphanumeric characters, lowercased. ``keyword`` is the share of the query's distinct
words found in the text. ``embed`` is a 64-dimension hashed character-trigram vector (each word padded with a
space on each side; 32-bit FNV-1a over code points; +1 at ``hash % 64``; L2-normalised). ``cosine`` is the
dot product of two unit vectors. A vector hit needs a cosine of at least ``VECTOR_THRESHOLD``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Final

from memory_core.query import FetchMode

__all__ = [
    "EMBED_DIM",
    "VECTOR_THRESHOLD",
    "cosine",
    "embed",
    "keyword_score",
    "mode_score",
    "tokenize",
]

EMBED_DIM: Final = 64
"""Dimensions of the reference embedding (reference §3)."""
VECTOR_THRESHOLD: Final = 0.2
"""Least cosine that counts as a vector hit (reference §3, ``VECTOR_THRESHOLD``)."""

_WORD = re.compile(r"[^\W_]+")


def tokenize(text: str) -> list[str]:
    """Split on non-alphanumeric characters, lowercase, drop empties."""
    return _WORD.findall(text.lower())


def keyword_score(query_words: set[str], text_words: set[str]) -> float:
    """The fraction of the query's distinct words that appear among the text's words (0 for no query words)."""
    if not query_words:
        return 0.0
    return len(query_words & text_words) / len(query_words)


def _fnv_code_points(s: str) -> int:
    h = 0x811C9DC5
    for ch in s:
        h ^= ord(ch)
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def embed(text: str) -> list[float]:
    """The 64-dimension hashed-trigram embedding of ``text``, L2-normalised (all zeros for no words)."""
    vec = [0.0] * EMBED_DIM
    for word in tokenize(text):
        padded = f" {word} "
        for i in range(len(padded) - 2):
            vec[_fnv_code_points(padded[i : i + 3]) % EMBED_DIM] += 1.0
    norm = math.sqrt(sum(v * v for v in vec))
    if norm == 0.0:
        return vec
    return [v / norm for v in vec]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Dot product of two unit vectors."""
    return sum(x * y for x, y in zip(a, b, strict=True))


def mode_score(mode: FetchMode, lexical: float, semantic: float) -> float | None:
    """The score for ``mode``, or None when the item is not a hit in that mode.

    | mode | score | a hit when |
    | --- | --- | --- |
    | keyword | lexical | lexical > 0 |
    | vector | semantic | semantic >= 0.2 |
    | hybrid | (lexical + semantic) / 2 | lexical > 0 or semantic >= 0.2 |
    """
    if mode is FetchMode.KEYWORD:
        return lexical if lexical > 0 else None
    if mode is FetchMode.VECTOR:
        return semantic if semantic >= VECTOR_THRESHOLD else None
    if lexical > 0 or semantic >= VECTOR_THRESHOLD:
        return (lexical + semantic) / 2
    return None

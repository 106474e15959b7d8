"""The BM25 baseline over the same turns (rank-bm25's Okapi BM25, Robertson & Zaragoza 2009).

Each dialog turn is one document; queries and turns are tokenised like the reference engine
(``memory_core.scoring.tokenize``), so the baseline and the engines see the same words.
"""

from __future__ import annotations

from collections.abc import Sequence

from rank_bm25 import BM25Okapi

from memory_core.scoring import tokenize

__all__ = ["Bm25Baseline"]


class Bm25Baseline:
    """Top-k turn ids for a query by BM25 over ``(turn id, text)`` pairs.

    Args:
        turns: The corpus, one ``(id, text)`` per turn.

    Raises:
        ValueError: an empty corpus.
    """

    def __init__(self, turns: Sequence[tuple[str, str]]) -> None:
        if not turns:
            raise ValueError("BM25 needs at least one turn")
        self._ids = [turn_id for turn_id, _ in turns]
        self._bm25 = BM25Okapi([tokenize(text) or [""] for _, text in turns])

    def top(self, query: str, k: int) -> list[str]:
        """The ``k`` best turn ids for ``query``, best first (ties in corpus order)."""
        scores = self._bm25.get_scores(tokenize(query))
        order = sorted(range(len(self._ids)), key=lambda i: (-float(scores[i]), i))
        return [self._ids[i] for i in order[:k]]

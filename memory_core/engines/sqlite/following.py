"""The turn after each candidate: the third view of late interaction (the turn with the one after it).

A reply often carries the answer a question's turn only asks for ("What instruments do you play?" / "Clarinet,
since I was ten."), so the turn *before* a candidate is one view (``vectors.Stored.prev``) and the turn
*after* it is another. The next turn is not known when a turn is embedded, but it is when the next one is:
its ``item_vectors.prev`` names this turn. So the view reads nothing new from storage: the next turn's own
stored row (``next_turns``) gives its token vectors, and the storage per item is unchanged.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Final

from .rows import chunks, placeholders

__all__ = ["INDEXED", "next_turns"]

INDEXED: Final = ("CREATE INDEX item_vectors_prev ON item_vectors(prev)",)
"""Statements of schema version 9: the turn after a candidate is read by an index, not a scan."""


def next_turns(conn: sqlite3.Connection, seqs: Sequence[int], model: str) -> dict[int, int]:
    """``seq → the turn after it`` for those of ``seqs`` whose next turn is embedded by ``model``.

    A turn whose next turn is not embedded yet has none (its view is its own vectors, as for a turn with no
    next turn).
    """
    out: dict[int, int] = {}
    for chunk in chunks(list(seqs)):
        marks = placeholders(len(chunk))
        for prev, seq in conn.execute(
            f"SELECT prev, min(seq) FROM item_vectors WHERE model = ? AND prev IN ({marks}) GROUP BY prev",
            (model, *chunk),
        ):
            out[int(prev)] = int(seq)
    return out

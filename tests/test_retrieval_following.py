"""The next-turn view: a turn whose reply holds the answer is ranked with that reply (``following``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memory_core import Conversation, FetchRequest, MemoryMeta, Namespace, Role, Turn
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.engines.sqlite.following import next_turns
from memory_core.engines.sqlite.rerank import reorder
from memory_core.engines.sqlite.vectors import Stored
from memory_core.query import FetchMode
from memory_core.retrieval.embedder import Encoded, HashEmbedder

DIMS = 4
EYE = np.eye(DIMS, dtype=np.float32)


def test_reorder_lifts_the_turn_whose_next_turn_answers() -> None:
    # behind four unembedded hits, turn 1 leads turn 2 lexically and through the turn before it (8); turn 2 leads
    # by its own words, and the turn after it (9) says what was asked
    query = EYE[:1]

    def row(cos: float, prev: int | None = None) -> Stored:
        return Stored(np.array([[cos, (1 - cos * cos) ** 0.5, 0, 0]], dtype=np.float32), prev, None, 0, 0.5)

    stored = {1: row(0.6, 8), 2: row(0.7), 8: row(0.9), 9: row(1.0, 2)}
    ranked = [(10, 0.9), (11, 0.8), (12, 0.7), (13, 0.6), (1, 0.5), (2, 0.4)]
    plain = reorder(ranked, stored, "what", query, now_us=0)
    viewed = reorder(ranked, stored, "what", query, now_us=0, after={2: 9})
    assert [s for s, _ in plain if s in (1, 2)] == [1, 2]
    assert [s for s, _ in viewed if s in (1, 2)] == [2, 1]
    assert [v for _, v in viewed] == [v for _, v in plain]  # absolute: the envelope of the lexical scores
    unembedded = stored | {9: Stored(None, 2, None, 0, 0.5)}  # the turn after is not embedded yet: no view
    assert reorder(ranked, unembedded, "what", query, now_us=0, after={2: 9}) == plain


class Words(HashEmbedder):
    """One token vector per text: axis 0 when it speaks of a clarinet, axis 1 otherwise."""

    name = "words"

    def encode(self, texts: Sequence[str]) -> Encoded:
        axis = [0 if "clarinet" in t else 1 for t in texts]
        return Encoded(EYE[axis], [EYE[[a]] for a in axis])


def test_next_turns_follows_the_stored_previous_turn_and_only_embedded_ones(tmp_path: Path) -> None:
    turns = ["what do you play", "the clarinet since I was ten", "nice"]
    with SQLiteEngine(tmp_path / "m.db", embedder=Words()) as engine:
        stored = [
            Conversation(
                turns=(Turn(role=Role.USER, text=text),),
                meta=MemoryMeta(namespace=Namespace.parse("ws:a"), thread_id="t", turns={"first": i, "last": i}),
            )
            for i, text in enumerate(turns)
        ]
        engine.store_many(stored[:2])
        engine.embed_backlog()
        engine.store(stored[2])  # not embedded yet
        hits = engine.fetch(FetchRequest(query="what do you play", mode=FetchMode.HYBRID, limit=3)).hits
        assert hits[0].id == stored[0].id
    conn = sqlite3.connect(tmp_path / "m.db")
    seqs = {str(i): int(s) for s, i in conn.execute("SELECT seq, id FROM items")}
    first, second, third = (seqs[c.id] for c in stored)
    assert next_turns(conn, [first, second, third], "words") == {first: second}  # the third is not embedded
    assert next_turns(conn, [first], "hash") == {}
    plan = " ".join(str(r) for r in conn.execute("EXPLAIN QUERY PLAN SELECT seq FROM item_vectors WHERE prev = 1"))
    assert "item_vectors_prev" in plan
    conn.close()

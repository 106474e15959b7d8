"""The date candidate source: an item observed on the day a question names joins the head the ranking reorders."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from memory_core import Document, FetchRequest, MemoryMeta
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.engines.sqlite import dated as dated_module
from memory_core.engines.sqlite.rerank import RERANK_POOL
from memory_core.query import FetchMode
from memory_core.retrieval.dense import DENSE_POOL
from memory_core.retrieval.embedder import Encoded, HashEmbedder


class Flat(HashEmbedder):
    """The same pooled and token vector for every text: the model tells no item from another."""

    name = "flat"

    def encode(self, texts: Sequence[str]) -> Encoded:
        eye = np.eye(64, dtype=np.float32)
        return Encoded(eye[[0] * len(texts)], [eye[[0]] for _ in texts])


def at(day: int) -> datetime:
    return datetime(2023, 10, day, 12, tzinfo=UTC)


def stored(engine: SQLiteEngine) -> Document:
    """More reports than the lexical head and the pooled nominations hold, then a long one said on 13 October."""
    reports = [
        Document.of(f"report report weekly number {i}", MemoryMeta(observed_at=at(1 + i % 10)))
        for i in range(RERANK_POOL + DENSE_POOL + 20)
    ]
    for start in range(0, len(reports), 50):
        engine.store_many(reports[start : start + 50])
    target = Document.of(
        "the long appendix of the quarterly report has a page about the garden", MemoryMeta(observed_at=at(13))
    )
    engine.store(target)
    engine.embed_backlog()
    return target


def test_an_item_said_on_the_named_day_is_nominated_and_ranked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    request = FetchRequest(query="the report on October 13, 2023", mode=FetchMode.HYBRID, limit=10)
    with SQLiteEngine(tmp_path / "m.db", embedder=Flat()) as engine:
        target = stored(engine)
        assert engine.fetch(request).hits[0].id == target.id  # nominated, then first by the date signal
        undated = request.model_copy(update={"query": "the report"})
        assert target.id not in [h.id for h in engine.fetch(undated).hits]  # no date named: out of reach
        monkeypatch.setattr(dated_module.dated_candidates, "__defaults__", (0,))
        assert target.id not in [h.id for h in engine.fetch(request).hits]  # without the source: out of reach


def test_a_dated_item_that_is_not_a_hit_is_not_nominated(tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "m.db", embedder=Flat()) as engine:
        stored(engine)
        other = Document.of("zebra xylophone", MemoryMeta(observed_at=at(13)))
        engine.store(other)
        engine.embed_backlog()
        hits = engine.fetch(FetchRequest(query="the report on October 13, 2023", mode=FetchMode.HYBRID, limit=200))
        assert other.id not in [h.id for h in hits.hits]  # shares no stem and no reference vector with the query

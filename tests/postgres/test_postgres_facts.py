"""Facts on PostgreSQL (issue 20, seed 004): importance takes part in the score, as on SQLite."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from memory_core.engines import open_engine
from memory_core.engines.postgres import PostgresEngine
from memory_core.facts.store import FactStore
from memory_core.memory_log import RecordOp
from memory_core.namespace import Namespace
from memory_core.query import FetchMode, FetchRequest, ListRequest
from memory_core.retrieval.embedder import Encoded, HashEmbedder

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
ROOT = Namespace.parse("team:acme")


@pytest.fixture
def engine(pg_url: str) -> Iterator[PostgresEngine]:
    opened = open_engine(pg_url)
    assert isinstance(opened, PostgresEngine)
    with opened:
        yield opened


@pytest.mark.parametrize("important", ["north", "south"])
def test_importance_orders_otherwise_equal_facts(engine: PostgresEngine, important: str) -> None:
    facts = FactStore(engine, ROOT)
    for side in ("north", "south"):
        facts.learn(f"The {side} office serves green tea", importance=1.0 if side == important else 0.0, at=T0)
    page = engine.fetch(FetchRequest(query="office green tea", mode=FetchMode.KEYWORD, limit=2))
    assert [important in h.text for h in page.hits] == [True, False]
    assert page.hits[0].confidence == page.hits[1].confidence == 0.8  # the item's own confidence is unchanged


def test_a_keyed_fact_keeps_one_current_value(engine: PostgresEngine) -> None:
    facts = FactStore(engine, ROOT)
    facts.learn("The UI theme is dark", key="ui.theme", at=T0)
    facts.learn("The UI theme is light", key="ui.theme", at=T0.replace(hour=10))
    current = facts.current("ui.theme")
    assert current is not None and current.text == "The UI theme is light"


def test_forgetting_a_key_removes_its_superseded_values_too(engine: PostgresEngine) -> None:
    facts = FactStore(engine, ROOT)
    old = facts.learn("The UI theme is dark", key="ui.theme", at=T0)
    new = facts.learn("The UI theme is light", key="ui.theme", at=T0 + timedelta(hours=1))
    assert facts.forget("ui.theme") == 2  # the superseded (retracted) value too, not only the current one
    for item_id in (old.id, new.id):
        assert engine.history(item_id)[-1].op is RecordOp.TOMBSTONE
    assert engine.list(ListRequest(limit=10)).items == ()


class _Recording(HashEmbedder):
    """The hash embedder, recording the texts it encoded."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def encode(self, texts: Sequence[str]) -> Encoded:
        self.texts.extend(texts)
        return super().encode(texts)


def test_a_superseded_fact_neither_waits_for_the_model_nor_is_encoded(pg_url: str) -> None:
    model = _Recording()
    with PostgresEngine(pg_url, embedder=model) as engine:  # the rule of SQLite's (tests/test_retrieval_background)
        facts = FactStore(engine, ROOT)
        for i in range(10):
            facts.learn(f"value {i} of the thing", key=f"k{i}", at=T0)
        before = engine.current_lsn()
        assert facts.learn("a new value of the thing", key="k0", at=T0.replace(hour=10)).superseded
        assert len(engine.list(ListRequest(limit=100)).items) == 10
        assert engine.stats()["embedding_wait"] == 10
        assert engine.embed_backlog() == 10 and engine.stats()["embedding_wait"] == 0
        assert len(model.texts) == 10 and not any("value 0 of" in t for t in model.texts)
        engine.rollback(before, "undo the new value")  # the old value is live again, and has no vectors
        assert engine.stats()["embedding_wait"] == 1
        assert engine.embed_backlog() == 1 and "value 0 of" in model.texts[-1]

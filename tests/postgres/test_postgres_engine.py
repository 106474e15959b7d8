"""PostgreSQL engine writes and reads: one statement per write, replays, one transaction per batch, ranking
agreeing with SQLite on what each mode returns, health naming what ranking uses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_core import (
    Document,
    FetchMode,
    FetchRequest,
    ListRequest,
    MemoryMeta,
    MetaFilter,
    Reach,
    WriteOptions,
)
from memory_core.engines import open_engine
from memory_core.engines.postgres import PostgresEngine
from memory_core.engines.sqlite import SQLiteEngine

pytestmark = pytest.mark.postgres


@pytest.fixture
def engine(pg_url: str) -> Iterator[PostgresEngine]:
    opened = open_engine(pg_url)
    assert isinstance(opened, PostgresEngine)
    with opened:
        yield opened


def _count_statements(engine: PostgresEngine, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[int]]:
    statements: list[str] = []
    transactions: list[int] = []
    run = engine._driver.run

    def counting(fn: Any, **kw: Any) -> Any:
        transactions.append(1)

        def spy(conn: Any) -> Any:
            class Spy:
                def execute(self, sql: Any, params: Any = None) -> Any:
                    statements.append(str(sql))
                    return conn.execute(sql, params)

                def __getattr__(self, name: str) -> Any:
                    return getattr(conn, name)

            return fn(Spy())

        return run(spy, **kw)

    monkeypatch.setattr(engine._driver, "run", counting)
    return statements, transactions


def test_store_with_accepted_is_one_insert_on_conflict_and_a_replay_writes_nothing(
    engine: PostgresEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    item = Document.of("the kayak is blue", MemoryMeta(workspace="w"))
    statements, transactions = _count_statements(engine, monkeypatch)
    first = engine.store_with(item, WriteOptions.accepted())
    assert len(statements) == 1 and len(transactions) == 1
    assert "INSERT INTO memory_core.items" in statements[0] and "ON CONFLICT (id) DO NOTHING" in statements[0]
    again = engine.store_with(item, WriteOptions.accepted())
    assert (first.replayed, again.replayed, again.id) == (False, True, first.id)
    hits = engine.fetch(FetchRequest(query="kayak", mode=FetchMode.KEYWORD, limit=5)).hits
    assert [h.id for h in hits] == [first.id]  # accepted ranks at once: the tsvector is written with the row


def test_store_many_is_one_transaction_with_in_batch_replays(
    engine: PostgresEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = Document.of("alpha", MemoryMeta(workspace="w")), Document.of("beta", MemoryMeta(workspace="w"))
    statements, transactions = _count_statements(engine, monkeypatch)
    receipts = engine.store_many([a, b, a])
    assert len(transactions) == 1 and len(statements) == 1
    assert [(r.id, r.replayed) for r in receipts] == [(a.id, False), (b.id, False), (a.id, True)]
    assert len(engine.list(ListRequest(limit=10)).items) == 2


def test_every_mode_returns_the_hit_set_sqlite_returns(engine: PostgresEngine, tmp_path: Path) -> None:
    texts = [
        "Caroline went to the LGBTQ support group on Tuesday.",
        "Melanie painted a sunrise over the lake last year.",
        "The kayak trip was cancelled because of the storm.",
        "Caroline is researching adoption agencies.",
        "We talked about painting and pottery classes.",
        "x",
    ]
    items = [Document.of(t, MemoryMeta(workspace="w")) for t in texts]
    with SQLiteEngine(tmp_path / "m.db") as lite:
        for e in (engine, lite):
            e.store_many(items)
        for mode in FetchMode.all():
            for query in ("Caroline adoption", "painting sunrise", "storm kayak trip", "zebra"):
                request = FetchRequest(query=query, mode=mode, limit=20, filter=MetaFilter(reach=Reach.subtree()))
                ours = {h.id for h in engine.fetch(request).hits}
                theirs = {h.id for h in lite.fetch(request).hits}
                assert ours == theirs, (mode, query)


def test_health_names_what_ranking_uses_and_repr_masks_the_password(pg_url: str) -> None:
    with_password = pg_url.replace("postgresql://postgres@", "postgresql://postgres:hunter2@")
    with open_engine(with_password) as engine:
        health = engine.health()
        assert health.is_serving and "tsvector+GIN" in (health.reason or "")
        assert "hunter2" not in repr(engine) and "***" in repr(engine)

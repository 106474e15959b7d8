"""The log (seed 002) and the windowed terms together on PostgreSQL: a store's one statement computes the turn's
window and writes its records; a forget leaves tombstones and re-windows the neighbours; a hybrid hit carries the
status and tier of the row the rerank read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from memory_core import FetchMode, FetchRequest, ForgetTarget, MemoryMeta, MetaFilter
from memory_core.engines.postgres import PostgresEngine
from memory_core.engines.postgres.schema import SCHEMA
from memory_core.items import Conversation, Role, Turn
from memory_core.memory_log import MemoryStatus, RecordOp, Tier
from memory_core.meta import ItemKind, TurnRange
from memory_core.retrieval.embedder import HashEmbedder

pytestmark = pytest.mark.postgres


@pytest.fixture
def engine(pg_url: str) -> Iterator[PostgresEngine]:
    with PostgresEngine(pg_url, embedder=HashEmbedder()) as opened:
        yield opened


def _turn(text: str, index: int) -> Conversation:
    meta = MemoryMeta(thread_id="t1", turns=TurnRange(first=index, last=index))
    return Conversation(turns=(Turn(role=Role.USER, text=text),), meta=meta)


def _ids(engine: PostgresEngine, query: str, mode: FetchMode = FetchMode.KEYWORD) -> set[str]:
    flt = MetaFilter(kinds=(ItemKind.CONVERSATION,))
    return {h.id for h in engine.fetch(FetchRequest(query=query, mode=mode, filter=flt, limit=10)).hits}


def _statements(engine: PostgresEngine, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement the engine's calls execute from now on (the round-trip tests' spy)."""
    statements: list[str] = []
    run = engine._driver.run

    def counting(fn: Any, **kw: Any) -> Any:
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
    return statements


def _wterms(url: str, item_id: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT wterms FROM {SCHEMA}.items WHERE id = %s", (item_id,)).fetchone()
    assert row is not None
    return str(row[0])


def test_a_store_is_one_statement_holding_its_window_and_its_put(
    engine: PostgresEngine, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _turn("We went kayaking on the lake", 0)
    engine.store(first)
    second = _turn("Yes, it was last Friday!", 1)
    statements = _statements(engine, monkeypatch)
    engine.store(second)
    assert len(statements) == 1
    assert "kayak" in _wterms(pg_url, second.id)  # computed in the insert from the stored neighbour
    assert "friday" in _wterms(pg_url, first.id)  # the trigger widened the neighbour's
    assert [(r.op, r.id) for r in engine.log(0, 10).records] == [(RecordOp.PUT, first.id), (RecordOp.PUT, second.id)]


def test_a_forget_tombstones_the_turn_and_takes_its_words_out_of_the_neighbours_windows(
    engine: PostgresEngine, pg_url: str
) -> None:
    first, second, third = (
        _turn("We went kayaking on the lake", 0),
        _turn("Yes, it was last Friday!", 1),
        _turn("Lovely weather for that", 2),
    )
    engine.store_many([first, second, third])
    assert _ids(engine, "kayak") == {first.id, second.id}
    engine.forget(ForgetTarget(ids=(first.id,)))
    assert _ids(engine, "kayak") == set()
    assert "kayak" not in _wterms(pg_url, second.id)
    assert [r.op for r in engine.history(first.id)] == [RecordOp.PUT, RecordOp.TOMBSTONE]


def test_a_retracted_turn_leaves_reads_and_returns_with_its_window_when_stored_again(engine: PostgresEngine) -> None:
    first, second = _turn("We went kayaking on the lake", 0), _turn("Yes, it was last Friday!", 1)
    engine.store_many([first, second])
    engine.retract([first.id], "wrong")
    assert _ids(engine, "kayak") == {second.id}  # the neighbour still holds the words in its window
    assert engine.store(first).id == first.id
    assert [r.op for r in engine.history(first.id)] == [RecordOp.PUT, RecordOp.RETRACT, RecordOp.RESTORE]
    assert _ids(engine, "kayak") == {first.id, second.id}


def test_a_hybrid_hit_carries_the_tier_of_the_row_the_rerank_read(engine: PostgresEngine) -> None:
    turns = [_turn(f"kayak trip number {i}", i) for i in range(3)]
    engine.store_many(turns)
    engine.embed_backlog()
    before = engine.current_lsn()
    engine.move([turns[1].id], Tier.LONG, "kept")
    hits = engine.fetch(FetchRequest(query="kayak trip", mode=FetchMode.HYBRID, limit=3)).hits
    assert {h.id: (h.status, h.tier) for h in hits} == {
        turns[0].id: (MemoryStatus.LIVE, Tier.SHORT),
        turns[1].id: (MemoryStatus.LIVE, Tier.LONG),
        turns[2].id: (MemoryStatus.LIVE, Tier.SHORT),
    }
    then = engine.as_of(before).fetch(FetchRequest(query="kayak trip", mode=FetchMode.HYBRID, limit=3)).hits
    assert {h.id: h.tier for h in then}[turns[1].id] == Tier.SHORT

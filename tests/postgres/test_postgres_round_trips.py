"""Round trips of a live turn on PostgreSQL: counted, so a change that adds statements to ``pre_turn`` fails.

A ``pre_turn`` is one write transaction (the logged turn) and, per section the pack fetches, at most
``PER_FETCH`` statements, each a read in autocommit (no ``BEGIN``/``COMMIT``): the row counts with the document
frequencies the cache lacks (items and beliefs in one statement), the scopes a bounded section may keep, the
items' candidates, their token vectors with their bodies (hybrid), and the beliefs' candidates.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from memory_core import ConsolidateRequest, MemoryMeta, Reach
from memory_core.engines.postgres import PostgresEngine
from memory_core.items import Conversation, Role, Turn
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.meta import TurnRange
from memory_core.retrieval.embedder import HashEmbedder

pytestmark = pytest.mark.postgres

PER_FETCH = 5


@pytest.fixture
def engine(pg_url: str) -> Iterator[PostgresEngine]:
    with PostgresEngine(pg_url, embedder=HashEmbedder()) as opened:
        yield opened


def _count(engine: PostgresEngine, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[bool]]:
    statements: list[str] = []
    reads: list[bool] = []
    run = engine._driver.run

    def counting(fn: Any, **kw: Any) -> Any:
        reads.append(bool(kw.get("read")))

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
    return statements, reads


def test_a_pre_turn_is_one_write_and_a_few_autocommit_reads_per_section(
    engine: PostgresEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = MemoryLayout()
    memory = AgentMemory(engine, layout, "melanie")
    for i in range(12):
        memory.pre_turn({"thread_id": "old", "turn_index": 2 * i, "user_text": f"I adopted a rescue dog named Max{i}."})
        memory.post_turn({"thread_id": "old", "turn_index": 2 * i + 1, "assistant_text": f"Lovely, Max{i}!"})
    engine.embed_backlog()
    engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
    memory.pre_turn({"thread_id": "t", "turn_index": 0, "user_text": "Which dog did I adopt?"})  # warm the caches
    statements, reads = _count(engine, monkeypatch)
    ctx = memory.pre_turn({"thread_id": "t", "turn_index": 1, "user_text": "Did I adopt a rescue dog?"})
    assert ctx.log_error is None and ctx.pack.markdown
    item_fetches = sum(s.startswith("WITH lex AS (SELECT i.seq") for s in statements)
    assert item_fetches >= 1
    assert reads.count(False) == 1  # the logged turn: the only transaction
    writes = [s for s in statements if s.startswith("WITH new AS (INSERT")]
    assert len(writes) == 1
    assert len(statements) - 1 <= PER_FETCH * item_fetches
    alone = "SELECT coalesce(max(seq), 0) FROM memory_core.items"  # the snapshot comes with the frequencies
    assert alone not in statements
    assert any("item_vectors" in s for s in statements)  # the hybrid sections were reordered by the model
    assert ctx.pack.sections and any(h.kind.value == "learning" for s in ctx.pack.sections for h in s.hits)
    belief_reads = [s for s in statements if "FROM memory_core.beliefs b WHERE b.bid" in s]
    assert belief_reads and not any("belief_evidence" in s and not s.startswith("SELECT b.bid") for s in statements)


def test_a_hybrid_fetch_reads_its_page_bodies_with_the_vectors(
    engine: PostgresEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memory_core import FetchMode, FetchRequest

    engine.store_many(
        [
            Conversation(
                turns=(Turn(role=Role.USER, text=f"kayak trip number {i}"),),
                meta=MemoryMeta(thread_id="k", turns=TurnRange(first=i, last=i)),
            )
            for i in range(5)
        ]
    )
    engine.embed_backlog()
    statements, reads = _count(engine, monkeypatch)
    page = engine.fetch(FetchRequest(query="kayak trip", mode=FetchMode.HYBRID, limit=3))
    assert len(page.hits) == 3 and reads == [True]
    assert len(statements) == 3  # counts + frequencies, candidates, vectors with bodies

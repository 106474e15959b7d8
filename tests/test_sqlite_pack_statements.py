"""A pack's statements (issue 12 "bounded sections"): the fetch sections of a pack are ranked in one read
(``SQLiteEngine.fetch_together``), so what depends only on the snapshot is read once per pack, beliefs are
ranked once, and the pack is the one the sections read one by one would give. Counted with SQLite's trace
callback on the one connection an inline pre_turn uses (FTS5's own internal statements left out)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memory_core.consolidation import ConsolidateRequest
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.errors import InvalidRequest
from memory_core.items import Document, Learning, Role, Turn
from memory_core.lifecycle.agent import AgentMemory, turn_item
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.meta import ItemKind, MemoryMeta
from memory_core.namespace import Reach
from memory_core.query import FetchMode, FetchPage, FetchRequest
from memory_core.recall.pack import build_pack
from memory_core.recall.types import ContextPack, FetchQuery
from memory_core.settings import get_settings
from tests._executors import ManualExecutor

LAYOUT = MemoryLayout()
T0 = datetime(2023, 5, 1, tzinfo=UTC)
QUESTIONS = (
    "When did Melanie paint the sunrise over the lake?",
    "What did Caroline say about the adoption agency?",
    "Which books does Melanie read to her kids?",
    "How long has Caroline been going to the support group?",
)
LINES = (
    "I painted a sunrise over the lake last weekend, the colours were amazing.",
    "The adoption agency called me back today about the interview.",
    "We read Charlotte's Web with the kids before bed every night.",
    "I have been going to the support group for about four years now.",
    "Pottery class was fun, I made a bowl for my mom.",
    "We went camping in the mountains and saw the stars.",
)
BEGIN = "BEGIN"
BELIEF_VERSION = "SELECT key, value FROM meta WHERE key IN ('instance', 'beliefs_version')"
INDEX_SNAPSHOT = "SELECT coalesce((SELECT min(seq) - 1 FROM pending), (SELECT max(seq) FROM items), 0)"
TOKEN_STATE = (  # the token cache's view of the snapshot (``token_cache.TokenCache.load``)
    "SELECT (SELECT value FROM meta WHERE key = 'instance'), (SELECT coalesce(max(n), 0) FROM deleted), "
    "(SELECT coalesce(max(n), 0) FROM item_vectors)"
)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[SQLiteEngine]:
    with SQLiteEngine(tmp_path / "memory.db", synchronous="normal") as e:
        for agent, name in (("melanie", "Melanie"), ("caroline", "Caroline")):
            node = AgentMemory(e, LAYOUT, agent).node
            e.store_many(
                [
                    turn_item(
                        node,
                        agent,
                        f"s{i % 2}",
                        i,
                        Turn(role=Role.USER, text=f"{name}: {LINES[i % len(LINES)]}"),
                        at=T0 + timedelta(days=i),
                    )
                    for i in range(24)
                ]
            )
        e.store(Document.of("# Painting\n\nWatercolour sunrise paintings need wet paper and a light touch."))
        e.store(Learning(text="Melanie paints sunrises by the lake", meta=MemoryMeta(namespace=LAYOUT.learnings())))
        e.consolidate(ConsolidateRequest(reach=Reach.subtree(), kinds=(ItemKind.CONVERSATION,)))
        assert e.stats()["beliefs"] > 0
        yield e


def _statements(engine: SQLiteEngine, question: str, turn: int) -> Counter[str]:
    """The statements one inline ``pre_turn`` runs, by text (FTS5's internal ``-- `` statements left out)."""
    seen: Counter[str] = Counter()
    conn = engine._db.connection()  # the caller's: an inline pre_turn runs every read and write on it
    conn.set_trace_callback(lambda sql: None if sql.startswith("-- ") else seen.update([" ".join(sql.split())]))
    try:
        memory = AgentMemory(engine, LAYOUT, "melanie", executor=ManualExecutor())  # work it queues runs inline
        memory.pre_turn({"thread_id": f"live{turn}", "turn_index": 0, "user_text": question})  # a thread alone
    finally:
        conn.set_trace_callback(None)
    return seen


def test_a_pre_turn_reads_its_sections_in_one_transaction_with_one_belief_ranking(engine: SQLiteEngine) -> None:
    for turn, question in enumerate(QUESTIONS):
        seen = _statements(engine, question, turn)
        # one read transaction for the four fetch sections, one to look for pending rows to index
        assert seen[BEGIN] == 2, seen
        assert seen[BELIEF_VERSION] == 1  # beliefs ranked once per pack (only Learnings admits them)
        assert seen["SELECT coalesce(max(seq), 0) FROM items"] == 1  # the snapshot's bound, shared
        assert seen[INDEX_SNAPSHOT] == 1  # the item index's view of the snapshot, once for the four sections
        assert seen[TOKEN_STATE] == 1  # the token cache's, once for every rerank of the pack
        assert sum(seen.values()) <= 95, sum(seen.values())  # a constant: 122-128 when each section read alone


def test_statements_per_pre_turn_do_not_grow_with_the_store(engine: SQLiteEngine) -> None:
    _statements(engine, QUESTIONS[1], 9)  # the first pre_turn of the engine loads its per-process indexes
    first = sum(_statements(engine, QUESTIONS[0], 0).values())
    node = AgentMemory(engine, LAYOUT, "melanie").node
    more = [
        turn_item(node, "melanie", f"old{i}", i, Turn(role=Role.USER, text=LINES[i % len(LINES)]), at=T0)
        for i in range(200)
    ]
    engine.store_many(more[:100])
    engine.store_many(more[100:])
    engine.consolidate(ConsolidateRequest(reach=Reach.subtree(), kinds=(ItemKind.CONVERSATION,)))
    _statements(engine, QUESTIONS[1], 1)  # the first read after a build refreshes the belief index
    after = sum(_statements(engine, QUESTIONS[0], 2).values())
    assert after <= first + 4, (first, after)  # a few range statements more, not one per item


def _requests(question: str) -> list[FetchRequest]:
    sections = (
        (LAYOUT.learnings_filter(), None, None),
        (LAYOUT.brain_filter(None), 3, None),
        (LAYOUT.conversations_filter("melanie"), 2, None),
        (LAYOUT.conversations_filter(None), 2, "melanie"),
    )
    return [
        FetchRequest(
            query=question,
            mode=FetchMode.HYBRID,
            filter=flt,
            limit=12,
            beliefs=8,
            max_scopes=scopes,
            exclude_agent_id=agent,
        )
        for flt, scopes, agent in sections
    ]


def _shape(page: FetchPage | Exception) -> object:
    """A page's hits and beliefs (ids, in order, with their scores), its cursor; the error's class for an error.

    Scores are compared to 1e-6: recency is read at each read's own clock.
    """
    if isinstance(page, Exception):
        return type(page)
    return (
        [(h.id, h.status, h.tier, pytest.approx(h.score, rel=1e-6)) for h in page.hits],
        [(h.id, h.derived_from, pytest.approx(h.score, rel=1e-6)) for h in page.beliefs],
        page.next_cursor,
    )


def test_fetching_together_gives_each_request_its_own_fetch(engine: SQLiteEngine) -> None:
    for question in QUESTIONS:
        requests = _requests(question)
        alone = [engine.fetch(r) for r in requests]
        together = engine.fetch_together(requests)
        assert [_shape(p) for p in together] == [_shape(p) for p in alone]
        assert [len(p.beliefs) for p in alone][1:] == [0, 0, 0]  # filters that admit no learning get none
        assert alone[0].beliefs and all(p.hits for p in alone)


def test_a_bad_request_fails_alone(engine: SQLiteEngine) -> None:
    good = _requests(QUESTIONS[0])
    bad = good[1].model_copy(update={"cursor": "not-a-cursor"})
    out = engine.fetch_together([good[0], bad, good[2]])
    assert isinstance(out[1], InvalidRequest)
    assert [_shape(out[0]), _shape(out[2])] == [_shape(engine.fetch(good[0])), _shape(engine.fetch(good[2]))]


def _pack_shape(pack: ContextPack) -> object:
    return (pack.markdown, pack.refs, [(s.heading, [h.id for h in s.hits]) for s in pack.sections], pack.skipped)


def test_packs_are_the_same_as_when_each_section_is_read_alone(
    engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = AgentMemory(engine, LAYOUT, "melanie")
    requests = [memory._recall_request(q, memory._standard()) for q in QUESTIONS]
    together = [build_pack(engine, r, executor=ManualExecutor()) for r in requests]
    monkeypatch.delattr(SQLiteEngine, "fetch_together")  # the sections are then read one fetch each
    alone = [build_pack(engine, r, executor=ManualExecutor()) for r in requests]
    assert [_pack_shape(p) for p in together] == [_pack_shape(p) for p in alone]
    assert all(p.sections for p in alone) and max(len(p.sections) for p in alone) >= 2


def test_by_default_a_pack_reads_its_fetch_sections_in_one_call_on_the_caller_and_the_pool_one_each(
    engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read pool's default (``docs/live-turn.md``, "the read pool"): with no executor the fetch sections are
    one ``fetch_together`` call on the caller's thread, as with a host's executor; with ``MEMORY_CORE_READ_POOL``
    each fetch section is one ``fetch`` submitted to the shared pool. The packs are the same."""
    memory = AgentMemory(engine, LAYOUT, "melanie")
    calls: list[tuple[str, int]] = []
    together, alone = SQLiteEngine.fetch_together, SQLiteEngine.fetch

    def counted_together(self: SQLiteEngine, requests: list[FetchRequest]) -> list[FetchPage | Exception]:
        calls.append((threading.current_thread().name, len(requests)))
        return together(self, requests)

    def counted_fetch(self: SQLiteEngine, request: FetchRequest) -> FetchPage:
        calls.append((threading.current_thread().name, 1))
        return alone(self, request)

    requests = [memory._recall_request(q, memory._standard()) for q in QUESTIONS]
    reference = [_pack_shape(build_pack(engine, r, executor=ManualExecutor())) for r in requests]
    monkeypatch.setattr(SQLiteEngine, "fetch_together", counted_together)
    monkeypatch.setattr(SQLiteEngine, "fetch", counted_fetch)
    fetched = sum(1 for s in memory._standard() if isinstance(s.query, FetchQuery))
    assert fetched >= 2
    packs = [build_pack(engine, r) for r in requests]
    assert calls == [(threading.current_thread().name, fetched)] * len(QUESTIONS)
    assert [_pack_shape(p) for p in packs] == reference
    calls.clear()
    on_executor = [build_pack(engine, r, executor=ManualExecutor()) for r in requests]
    assert calls == [(threading.current_thread().name, fetched)] * len(QUESTIONS)
    assert [_pack_shape(p) for p in on_executor] == reference
    calls.clear()
    monkeypatch.setenv("MEMORY_CORE_READ_POOL", "1")
    get_settings.cache_clear()
    on_pool = [build_pack(engine, r) for r in requests]
    assert len(calls) == fetched * len(QUESTIONS)  # one fetch per section, submitted to the pool
    assert all(n == 1 for _, n in calls), calls  # (one the pool had not started runs on the caller)
    assert [_pack_shape(p) for p in on_pool] == reference

"""Round trips of a live turn on PostgreSQL: counted, so a change that adds statements to ``pre_turn`` fails.

A ``pre_turn`` is one write transaction (the logged turn) and, per section the pack fetches, at most
``TRIPS_PER_FETCH`` round trips, each a read in autocommit (no ``BEGIN``/``COMMIT``): (1) the row counts with the
document frequencies the cache lacks (items and beliefs), the pooled vectors this process lacks and the scopes a
bounded section may keep, in one statement; (2) the items' and the beliefs' candidates, pipelined; (3) for a
hybrid read, the head's token vectors with the page's bodies. Round trips are counted on the wire (libpq's
protocol trace: each ``Sync`` or simple ``Query`` the client sends waits for the server once), statements by a
spy on ``execute``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from psycopg import pq

from memory_core import ConsolidateRequest, FetchMode, FetchRequest, MemoryMeta, Reach
from memory_core.engines.postgres import PostgresEngine
from memory_core.items import Conversation, Role, Turn
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.meta import TurnRange
from memory_core.retrieval.embedder import HashEmbedder

pytestmark = pytest.mark.postgres

PER_FETCH = 5
TRIPS_PER_FETCH = 3


@pytest.fixture
def engine(pg_url: str) -> Iterator[PostgresEngine]:
    with PostgresEngine(pg_url, embedder=HashEmbedder()) as opened:
        yield opened


class Counted:
    """What the spied runs did: statements executed, round trips on the wire per run, and each run's kind."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.trips: list[int] = []
        self.reads: list[bool] = []
        self.runs: list[tuple[bool, int]] = []
        self.prepared = 0

    def read_trips(self) -> int:
        """Round trips of the reads (a write's ``BEGIN``/``COMMIT`` are the driver's, outside the trace)."""
        return sum(trips for read, trips in self.runs if read)


def _wire(trace: str) -> int:
    """Round trips in a libpq protocol trace: messages after which the client waits for the server."""
    return sum(
        1 for line in trace.splitlines() if line.startswith("F") and line.split("\t")[2:3] in (["Sync"], ["Query"])
    )


def _prepares(trace: str) -> int:
    """Statements prepared in a libpq protocol trace: a ``Parse`` naming the statement (psycopg's ``_pg3_<n>``)."""
    return sum(1 for line in trace.splitlines() if line.startswith("F") and '\tParse\t "_pg3_' in line)


def _count(engine: PostgresEngine, monkeypatch: pytest.MonkeyPatch) -> Counted:
    counted = Counted()
    run = engine._driver.run

    def counting(fn: Any, **kw: Any) -> Any:
        counted.reads.append(bool(kw.get("read")))

        def spy(conn: Any) -> Any:
            class Spy:
                def execute(self, sql: Any, params: Any = None) -> Any:
                    counted.statements.append(str(sql))
                    return conn.execute(sql, params)

                def __getattr__(self, name: str) -> Any:
                    return getattr(conn, name)

            with tempfile.TemporaryFile("w+") as out:
                conn.pgconn.trace(out.fileno())
                conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
                try:
                    return fn(Spy())
                finally:
                    conn.pgconn.untrace()
                    out.seek(0)
                    trace = out.read()
                    trips = _wire(trace)
                    counted.prepared += _prepares(trace)
                    counted.trips.append(trips)
                    counted.runs.append((bool(kw.get("read")), trips))

        return run(spy, **kw)

    monkeypatch.setattr(engine._driver, "run", counting)
    return counted


def _memory(engine: PostgresEngine) -> AgentMemory:
    memory = AgentMemory(engine, MemoryLayout(), "melanie")
    for i in range(12):
        memory.pre_turn({"thread_id": "old", "turn_index": 2 * i, "user_text": f"I adopted a rescue dog named Max{i}."})
        memory.post_turn({"thread_id": "old", "turn_index": 2 * i + 1, "assistant_text": f"Lovely, Max{i}!"})
    engine.embed_backlog()
    engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
    memory.pre_turn({"thread_id": "t", "turn_index": 0, "user_text": "Which dog did I adopt?"})  # warm the caches
    return memory


def test_a_pre_turn_is_one_write_and_at_most_three_round_trips_per_section(
    engine: PostgresEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = _memory(engine)
    counted = _count(engine, monkeypatch)
    encodes = engine.model.query_encodes
    ctx = memory.pre_turn({"thread_id": "t", "turn_index": 1, "user_text": "Did I adopt a rescue dog?"})
    assert ctx.log_error is None and ctx.pack.markdown
    assert engine.model.query_encodes == encodes + 1  # one encoding shared by the pack's sections
    statements = counted.statements
    item_fetches = sum(s.startswith("WITH lex AS (SELECT i.seq") for s in statements)
    assert item_fetches >= 3
    assert counted.reads.count(False) == 1  # the logged turn: the only transaction
    writes = [s for s in statements if s.startswith("WITH new AS (INSERT")]
    assert len(writes) == 1
    assert counted.read_trips() <= TRIPS_PER_FETCH * item_fetches  # 17 for 4 sections before the pipeline
    assert len(statements) - 1 <= PER_FETCH * item_fetches
    alone = "SELECT coalesce(max(seq), 0) FROM memory_core.items"  # the snapshot comes with the frequencies
    assert alone not in statements
    assert not any(s.startswith("SELECT s.ns, max(s.last_write)") for s in statements)  # scopes: first statement
    assert any("item_vectors" in s for s in statements)  # the hybrid sections were reordered by the model
    assert ctx.pack.sections and any(h.kind.value == "learning" for s in ctx.pack.sections for h in s.hits)
    belief_reads = [s for s in statements if s.startswith("WITH lex AS (SELECT i.bid")]
    assert belief_reads and all("belief_evidence" in s for s in belief_reads)  # hits read with the candidates
    assert not any("(false)" in s for s in belief_reads)  # a section admitting no belief asks for none
    assert not any("FROM memory_core.beliefs b WHERE b.bid" in s for s in statements)


def test_a_fetch_with_beliefs_pipelines_the_two_rankings(
    engine: PostgresEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    _memory(engine)
    counted = _count(engine, monkeypatch)
    page = engine.fetch(FetchRequest(query="rescue dog Max", mode=FetchMode.HYBRID, limit=3, beliefs=3))
    assert page.hits and page.beliefs and counted.reads == [True]
    assert len(counted.statements) == 4  # counts + frequencies + pooled rows; items, beliefs; vectors with bodies
    assert counted.trips == [3]  # the two rankings in one pipeline


def test_a_hybrid_fetch_reads_its_page_bodies_with_the_vectors(
    engine: PostgresEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
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
    counted = _count(engine, monkeypatch)
    page = engine.fetch(FetchRequest(query="kayak trip", mode=FetchMode.HYBRID, limit=3))
    assert len(page.hits) == 3 and counted.reads == [True]
    assert len(counted.statements) == 3 and counted.trips == [3]  # counts + frequencies, candidates, vectors


def test_a_fetch_repeated_on_one_connection_never_pays_a_trip_to_prepare(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One pooled connection, so every fetch runs its statements where the earlier ones ran: psycopg prepares a
    # statement once it has run a few times there, and that ``Parse`` must travel with its execution
    # (``driver.PooledConnection``), not wait for a ``Sync`` of its own: that was a fetch's fourth round trip,
    # paid by whichever fetch the pool lent that connection.
    with PostgresEngine(f"{pg_url}?pool_min_size=1&pool_max_size=1", embedder=HashEmbedder()) as engine:
        _memory(engine)
        counted = _count(engine, monkeypatch)
        request = FetchRequest(query="rescue dog Max", mode=FetchMode.HYBRID, limit=3, beliefs=3)
        for _ in range(10):
            assert engine.fetch(request).hits
    assert counted.reads == [True] * 10
    assert counted.trips == [TRIPS_PER_FETCH] * 10
    assert counted.prepared >= 1  # statements were prepared within these fetches, in no trip of their own

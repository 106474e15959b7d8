"""Belief builds in the PostgreSQL engine: the same beliefs as SQLite, incremental, never skipping a row that
committed late, one build per scope at a time (advisory lock), and forget/erase cascading to beliefs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from pgkit import ADMIN_URL

from memory_core import (
    BeliefsRequest,
    ConsolidateRequest,
    Conversation,
    EraseRequest,
    FetchMode,
    FetchRequest,
    ForgetTarget,
    MemoryMeta,
    MetaFilter,
    Namespace,
    ObservedActor,
    Reach,
    Role,
    Turn,
)
from memory_core.beliefs import Statement
from memory_core.engine import MemoryEngine
from memory_core.engines import open_engine
from memory_core.engines.postgres import PostgresEngine, beliefs
from memory_core.engines.postgres.schema import SCHEMA
from memory_core.engines.postgres.writes import COLUMNS, prepare
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.engines.sqlite.rows import now_us

pytestmark = pytest.mark.postgres

ANN = Namespace.agent("ann")
BUILD = ConsolidateRequest(reach=Reach.subtree())


def said(text: str, day: int = 8, month: int = 5, thread: str = "t1", ns: Namespace = ANN) -> Conversation:
    return Conversation(
        turns=(Turn(role=Role.USER, text=text),),
        meta=MemoryMeta(
            namespace=ns,
            agent_id="ann",
            thread_id=thread,
            observed_at=datetime(2023, month, day, 12, tzinfo=UTC),
            observed_actor=ObservedActor(id="user:ann", name="Ann"),
        ),
    )


TURNS = [
    said("I adopted a rescue dog named Max yesterday."),
    said("My favorite color is blue.", day=5),
    said("My favorite color is green.", month=6),
    said("I volunteer at the animal shelter every weekend."),
    said("I volunteer at the animal shelter every weekend!", day=9, thread="t2"),
    said("I moved to Denver for a new job at a bakery.", day=12),
    said("I'm planning a trip to Lisbon next month.", day=13),
]


@pytest.fixture
def engine(pg_url: str) -> Iterator[PostgresEngine]:
    opened = open_engine(pg_url)
    assert isinstance(opened, PostgresEngine)
    with opened:
        yield opened


def beliefs_of(engine: MemoryEngine, reach: Reach | None = None) -> dict[str, tuple[str, float, tuple[str, ...]]]:
    hits = engine.beliefs(BeliefsRequest(reach=reach or Reach.subtree(), limit=100))
    return {h.id: (h.text, round(h.confidence or 0.0, 6), h.derived_from) for h in hits}


def test_beliefs_match_sqlite_built_at_once_and_incrementally(engine: PostgresEngine, tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "memory.db") as lite:
        lite.store_many(TURNS)
        lite.consolidate(BUILD)
        expected = beliefs_of(lite)
    assert len(expected) >= 4
    for item in TURNS[:3]:
        engine.store(item)
    engine.consolidate(BUILD)
    engine.store_many(TURNS[3:])
    receipt = engine.consolidate(BUILD)
    assert receipt.built > 0
    assert beliefs_of(engine) == expected
    again = engine.consolidate(BUILD)  # nothing new: nothing built
    assert again.built == 0 and beliefs_of(engine) == expected


def _insert_row_only(conn: psycopg.Connection, item: Conversation) -> None:
    """The first half of ``writes.insert``: the item row (its seq allocated now), not yet its scope's touch."""
    row = prepare(item)
    values = list(row.values)
    values[COLUMNS.index("stored_at")] = now_us()
    marks = ", ".join("%s" for _ in COLUMNS)
    conn.execute(f"INSERT INTO {SCHEMA}.items ({', '.join(COLUMNS)}) VALUES ({marks})", values)


def test_a_row_committed_after_a_later_numbered_one_is_still_built(engine: PostgresEngine, pg_url: str) -> None:
    """Writer L takes seq n, writer E takes seq n + 1 and commits, a build runs, then L commits (two writers
    of one scope can interleave so: L's scope touch waits behind E's). A seq watermark would skip L's row."""
    late, early = said("I adopted a rescue dog named Max yesterday."), said("I moved to Denver for a new job.")
    with psycopg.connect(pg_url) as slow:
        _insert_row_only(slow, late)
        engine.store(early)  # a larger seq, committed first
        engine.consolidate(BUILD)
        covered = {e for _, _, ev in beliefs_of(engine).values() for e in ev}
        assert early.id in covered and late.id not in covered
        slow.execute(
            f"UPDATE {SCHEMA}.scopes SET last_write = last_write + 1 WHERE ns = %s AND kind = %s",
            ("agent:ann/", "conversation"),
        )
        slow.commit()
    with psycopg.connect(pg_url) as conn:
        seqs = dict(conn.execute(f"SELECT id, seq FROM {SCHEMA}.items").fetchall())
    assert seqs[late.id] < seqs[early.id]
    engine.consolidate(BUILD)
    covered = {e for _, _, ev in beliefs_of(engine).values() for e in ev}
    assert {early.id, late.id} <= covered


def _due_build(engine: MemoryEngine) -> list[Namespace]:
    """What beat's ``build_due`` tick does: build exactly the scopes ``scopes`` reports due; their nodes."""
    due = [s for s in engine.scopes(BUILD) if s.due]
    for scope in due:
        engine.consolidate(scope.request())
    return [s.namespace for s in due]


def test_an_item_committed_during_a_build_leaves_its_scope_due(
    engine: PostgresEngine, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second connection stores an item after the build read its rows and before it records the build: the
    build did not cover it, so the scope stays due (``last_build`` unchanged) and the next due build builds it."""
    first, late = said("I adopted a rescue dog named Max yesterday."), said("I moved to Denver for a new job.")
    engine.store(first)
    read = beliefs._statements
    stored: list[bool] = []

    def read_then_write(rows: Sequence[tuple[int, str, str]]) -> list[Statement]:
        out = read(rows)
        if not stored:  # the build's only chunk is read: commit an item it cannot see any more
            with open_engine(pg_url) as other:
                stored.append(not other.store(late).replayed)
        return out

    monkeypatch.setattr(beliefs, "_statements", read_then_write)
    engine.consolidate(BUILD)
    monkeypatch.undo()
    assert stored == [True]
    covered = {e for _, _, ev in beliefs_of(engine).values() for e in ev}
    assert first.id in covered and late.id not in covered
    assert [s.due for s in engine.scopes(BUILD)] == [True]
    assert _due_build(engine) == [ANN]
    covered = {e for _, _, ev in beliefs_of(engine).values() for e in ev}
    assert {first.id, late.id} <= covered
    assert [s.due for s in engine.scopes(BUILD)] == [False]  # that build covered everything: not due any more
    assert _due_build(engine) == []


def _waiting_on_advisory_lock(database: str) -> bool:
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock' "
            "AND wait_event = 'advisory'",
            (database,),
        ).fetchone()
    return row is not None and row[0] > 0


def test_a_scope_build_waits_for_the_scope_lock_held_elsewhere(engine: PostgresEngine, pg_url: str) -> None:
    engine.store(said("I adopted a rescue dog named Max yesterday."))
    done: list[set[str]] = []
    with psycopg.connect(pg_url) as other:
        other.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("memory-core:build:agent:ann/#conversation",)
        )
        worker = threading.Thread(target=lambda: done.append(engine.build_scope(ANN, said("x").item_kind)))
        worker.start()
        deadline = time.monotonic() + 60
        while not _waiting_on_advisory_lock(pg_url.rsplit("/", 1)[1]):
            assert time.monotonic() < deadline, "the build never waited for the scope lock"
            time.sleep(0.05)
        assert not done  # still waiting: the other holder has the scope
        other.rollback()
    worker.join(60)
    assert done and done[0]


def test_forget_and_erase_cascade_to_beliefs_as_on_sqlite(engine: PostgresEngine, tmp_path: Path) -> None:
    keep, gone = said("I adopted a rescue dog named Max yesterday."), said("I ran a charity race for the shelter.")
    blue, green = said("My favorite color is blue.", day=5), said("My favorite color is green.", month=6)
    items = [keep, gone, blue, green]
    with SQLiteEngine(tmp_path / "memory.db") as lite:
        for e in (lite, engine):
            e.store_many(items)
            e.consolidate(BUILD)
            e.forget(ForgetTarget(ids=(gone.id, green.id)))
        expected = beliefs_of(lite)
        assert beliefs_of(engine) == expected
        covered = {i for _, _, ev in expected.values() for i in ev}
        assert gone.id not in covered and green.id not in covered and keep.id in covered
        for e in (lite, engine):
            e.erase(EraseRequest(reach=Reach.exact(ANN)))
        assert beliefs_of(engine) == beliefs_of(lite) == {}


def test_beliefs_stay_inside_their_reach_and_rank_for_a_query(engine: PostgresEngine) -> None:
    bob = Namespace.agent("bob")
    engine.store_many([said("I adopted a rescue dog named Max yesterday."), said("My favorite color is blue.", ns=bob)])
    engine.consolidate(BUILD)
    ann_only = beliefs_of(engine, Reach.exact(ANN))
    assert ann_only and all("Max" in text or "dog" in text for text, _, _ in ann_only.values())
    page = engine.fetch(
        FetchRequest(query="rescue dog", mode=FetchMode.HYBRID, filter=MetaFilter(reach=Reach.exact(bob)), beliefs=5)
    )
    assert page.beliefs == ()
    page = engine.fetch(
        FetchRequest(query="rescue dog", mode=FetchMode.HYBRID, filter=MetaFilter(reach=Reach.exact(ANN)), beliefs=5)
    )
    assert page.beliefs and "dog" in page.beliefs[0].text.lower()

"""Memory at scale (issue 12 item 6): a process's item index loads only the scopes its reads touch.

A cold read of one small scope loads that scope's rows, however big another scope is; a ``max_scopes`` read loads
a big scope's newest ``scoped.SCOPE_WINDOW`` turns, widened when they hold too few candidates, and ranks exactly
what an index holding every row ranks; a read whose snapshot is older than the index's state is served from a
private copy in its own snapshot. Counted with ``ItemIndex.rows_read`` and ``held()``, never timed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from memory_core.engines.sqlite import SQLiteEngine, scoped
from memory_core.engines.sqlite.index import ItemIndex
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.meta import MetaFilter
from memory_core.query import FetchRequest, ForgetTarget
from tests._turns import say

WINDOW = 30
LAYOUT = MemoryLayout()
SMALL = 12
BIG = 400


@pytest.fixture(autouse=True)
def _window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scoped, "SCOPE_WINDOW", WINDOW)


def _say(engine: SQLiteEngine, node_of: str, agent: str, start: int, n: int) -> list[str]:
    """``n`` turns by ``agent`` in ``node_of``'s node; their ids."""
    return say(engine, LAYOUT, node_of, agent, start, n)


@pytest.fixture
def path(tmp_path: Path) -> Iterator[Path]:
    """A file with a small agent's few turns and a big agent's many."""
    db = tmp_path / "memory.db"
    with SQLiteEngine(db, synchronous="normal") as engine:
        _say(engine, "small", "small", 0, SMALL)
        _say(engine, "big", "big", 0, BIG)
    yield db


def _team(query: str = "tomatoes kayak", exclude: str = "small") -> FetchRequest:
    return FetchRequest(
        query=query, filter=LAYOUT.conversations_filter(None), limit=20, max_scopes=8, exclude_agent_id=exclude
    )


def _everything(engine: SQLiteEngine, stored: int = SMALL + BIG) -> None:
    """Load every scope whole (an unbounded read of the whole layout)."""
    engine.fetch(FetchRequest(query="tomatoes", filter=MetaFilter(reach=LAYOUT.holistic_filter().reach)))
    assert engine._index.held() == stored


def test_a_cold_read_of_a_small_scope_loads_only_its_rows(path: Path) -> None:
    with SQLiteEngine(path) as engine:
        hits = engine.fetch(FetchRequest(query="tomatoes", filter=LAYOUT.conversations_filter("small"), limit=50))
        assert len(hits.hits) == SMALL
        assert {h.meta.agent_id for h in hits.hits} == {"small"}
        assert engine._index.rows_read == SMALL  # the big scope's 400 rows were never read
        assert engine._index.held() == SMALL


def test_a_pack_loads_a_big_scopes_newest_turns_only_and_ranks_as_a_full_index(path: Path) -> None:
    with SQLiteEngine(path) as cold:
        AgentMemory(cold, LAYOUT, "small").recall("tomatoes kayak")  # Brain, History, Team
        assert cold._index.rows_read <= SMALL + WINDOW  # History: its own 12; Team: the big scope's newest 30
        assert cold._index.held() == SMALL + WINDOW
        lazy = [h.id for h in cold.fetch(_team()).hits]
        assert cold._index.held() == SMALL + WINDOW
    with SQLiteEngine(path) as warm:
        _everything(warm)
        full = [h.id for h in warm.fetch(_team()).hits]
    assert lazy == full
    assert len(lazy) == 20


def test_a_tail_with_too_few_candidates_is_widened(tmp_path: Path) -> None:
    """The big agent's node holds another agent's older turns: a read leaving the big agent out reaches them."""
    db = tmp_path / "memory.db"
    with SQLiteEngine(db, synchronous="normal") as engine:
        _say(engine, "small", "small", 0, SMALL)
        theirs = set(_say(engine, "big", "guest", 0, 40))  # older rows of another agent in the big node
        _say(engine, "big", "big", 40, 200)
    with SQLiteEngine(db) as cold:
        request = _team(exclude="big")
        lazy = [h.id for h in cold.fetch(request).hits]
        assert cold._index.held() == SMALL + 240  # widened 30, 60, 120, then the rest: the guest's 40 reached
    with SQLiteEngine(db) as warm:
        _everything(warm, SMALL + 240)
        full = [h.id for h in warm.fetch(request).hits]
    assert lazy == full
    assert theirs & set(lazy)


def test_a_scope_holding_only_the_left_out_agents_rows_is_not_widened(path: Path) -> None:
    with SQLiteEngine(path) as cold:
        hits = cold.fetch(_team(exclude="big")).hits
        assert {h.meta.agent_id for h in hits} == {"small"}
        assert cold._index.held() == SMALL + WINDOW  # the big node's older rows are the big agent's: not loaded
        cold.fetch(_team(query="garden", exclude="big"))
        assert cold._index.held() == SMALL + WINDOW


def test_forgotten_rows_are_not_served_from_a_tail(path: Path) -> None:
    with SQLiteEngine(path) as engine:
        engine.fetch(_team())
        newest = [h.id for h in engine.fetch(_team()).hits]
        engine.forget(ForgetTarget(ids=newest[:5]))
        after = [h.id for h in engine.fetch(_team()).hits]
        assert not set(newest[:5]) & set(after)
        assert len(after) == 20
    with SQLiteEngine(path) as warm:
        _everything(warm, SMALL + BIG - 5)
        assert [h.id for h in warm.fetch(_team()).hits] == after


def _open(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    conn.execute("SELECT count(*) FROM items").fetchone()  # the snapshot starts here
    return conn


def test_a_read_older_than_the_index_state_loads_a_private_copy(path: Path) -> None:
    small = LAYOUT.conversations_filter("small")
    big = LAYOUT.conversations_filter("big")
    index = ItemIndex()
    old = _open(path)
    old_top = int(old.execute("SELECT max(seq) FROM items").fetchone()[0])
    with SQLiteEngine(path) as engine:
        gone = _say(engine, "small", "small", SMALL, 1)
        _say(engine, "small", "small", SMALL + 1, 3)
        engine.forget(ForgetTarget(ids=gone))
    new = _open(path)
    new_top = int(new.execute("SELECT max(seq) FROM items").fetchone()[0])
    assert len(index.candidates(new, small, new_top)) == SMALL + 3  # the new snapshot: 3 more, the forgotten one gone
    before = index.held()
    assert len(index.candidates(old, small, old_top)) == SMALL  # held: the shared rows up to its own top seq
    assert index.private_reads == 0
    assert len(index.candidates(old, big, old_top)) == BIG  # not held: loaded in the old snapshot, privately
    assert index.private_reads == 1
    assert index.held() == before  # nothing loaded in the old snapshot went into the shared copy
    assert len(index.candidates(new, big, new_top)) == BIG
    assert index.held() == before + BIG
    old.rollback()
    new.rollback()


def test_a_team_read_loads_only_the_scopes_it_can_rank(tmp_path: Path) -> None:
    """Of 20 agents, a ``max_scopes=8`` read loads the 8 it keeps (the query names one), and ranks as a full index."""
    db = tmp_path / "memory.db"
    with SQLiteEngine(db, synchronous="normal") as engine:
        for a in range(20):
            _say(engine, f"agent{a}", f"agent{a}", 0, 5)
    request = FetchRequest(query="tomatoes agent3", filter=LAYOUT.conversations_filter(None), limit=50, max_scopes=8)
    with SQLiteEngine(db) as cold:
        lazy = [h.id for h in cold.fetch(request).hits]
        assert cold._index.rows_read == 8 * 5
        named = {h.meta.agent_id for h in cold.fetch(request).hits}
        assert "agent3" in named  # the named scope, though written first
        assert len(named) == 8
    with SQLiteEngine(db) as warm:
        _everything(warm, 20 * 5)
        assert [h.id for h in warm.fetch(request).hits] == lazy
    with SQLiteEngine(db) as cold:  # the newest 8 scopes hold nothing the read serves: the next ones are loaded
        cold.fetch(FetchRequest(query="tomatoes", filter=LAYOUT.conversations_filter(None), max_scopes=8))
        first = cold._index.held()
        left_out = _team(exclude="agent19")
        kept = {h.meta.agent_id for h in cold.fetch(left_out.model_copy(update={"limit": 50})).hits}
        assert len(kept) == 8
        assert "agent19" not in kept
        assert cold._index.held() == first + 5  # one more scope: the ninth newest

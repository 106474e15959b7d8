"""Bounded sections (issue 12): the rows a pre_turn's History and Team sections rank are bounded by a constant
(``CONVERSATION_SCOPES_PER_TURN`` scopes × ``scoped.SCOPE_WINDOW`` turns), not by what the store holds, so a big
agent in the layout does not make a small agent's turn cost more. Counted with ``SQLiteEngine.reads``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from memory_core.engines.sqlite import SQLiteEngine, scoped
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.meta import MetaFilter
from tests._turns import say

WINDOW = 30
LAYOUT = MemoryLayout()


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SQLiteEngine]:
    monkeypatch.setattr(scoped, "SCOPE_WINDOW", WINDOW)
    with SQLiteEngine(tmp_path / "memory.db", synchronous="normal") as e:
        yield e


def _say(engine: SQLiteEngine, agent: str, start: int, n: int) -> None:
    say(engine, LAYOUT, agent, agent, start, n)


def _rows(engine: SQLiteEngine, flt: MetaFilter) -> list[int]:
    return [rows for read, rows in engine.reads.recent if read == flt]


def _turn(engine: SQLiteEngine) -> tuple[int, int]:
    """The small agent's standard pack (pre_turn's reads, without its log): the rows History and Team ranked."""
    engine.reads.recent.clear()
    AgentMemory(engine, LAYOUT, "small").recall("tomatoes")
    (history,) = _rows(engine, LAYOUT.conversations_filter("small"))
    (team,) = _rows(engine, LAYOUT.conversations_filter(None))
    return history, team


def test_a_big_agent_does_not_grow_a_small_agents_sections(engine: SQLiteEngine) -> None:
    _say(engine, "small", 0, 10)
    _say(engine, "big", 0, 3 * WINDOW)
    history, team = _turn(engine)
    assert history == 10  # its own turns
    assert team == WINDOW  # the big agent's scope cut to its newest turns: the small one's own are left out first
    _say(engine, "big", 3 * WINDOW, 10 * WINDOW)  # the big agent grows 4x
    _say(engine, "other", 0, 5)
    assert _turn(engine) == (history, team + 5)  # a new small agent joins the team; the big one costs no more


def test_the_window_keeps_the_newest_turns_of_each_scope_and_every_other_row() -> None:
    codes = np.array([0, 1, 0, 0, 1, 0, 2, 0], dtype=np.int64)
    applies = np.array([True, True, True, True, True, True, False, True])
    keep = scoped.newest_per_scope(codes, applies, 2)
    assert keep.tolist() == [False, True, False, False, True, True, True, True]
    assert scoped.newest_per_scope(codes, applies, 8).all()

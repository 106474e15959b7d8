"""A small scope's ranked read costs what its own rows cost, not what the store holds (issue 12 §4).

Counted, never timed: the doclist entries ``fts.classify`` counts to tell rare words from common ones (a share
of the rows the read ranks, not of the table), and the rows the BM25 statements of a belief read return (rowid
ranges over the read's own beliefs, not every belief of the store holding a query word).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memory_core import (
    BeliefsRequest,
    ConsolidateRequest,
    Conversation,
    FetchMode,
    FetchRequest,
    MemoryMeta,
    Namespace,
    ObservedActor,
    Reach,
    Role,
    Turn,
)
from memory_core.engines.sqlite import SQLiteEngine, fts
from memory_core.lifecycle.layout import MemoryLayout
from tests._turns import say

LAYOUT = MemoryLayout()
SMALL_MIN = 5
"""``COMMON_MIN`` in these tests, so a few hundred rows show what 100k would (the share is 5% either way)."""


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[SQLiteEngine]:
    with SQLiteEngine(tmp_path / "memory.db", synchronous="normal") as e:
        yield e


def _counted(monkeypatch: pytest.MonkeyPatch, name: str, size: Any) -> list[int]:
    """Spy on ``fts.<name>``: each call's result size (``size(result)``) is appended to the returned list."""
    seen: list[int] = []
    real = getattr(fts, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        seen.append(size(out))
        return out

    monkeypatch.setattr(fts, name, spy)
    return seen


def _small_fetch(engine: SQLiteEngine) -> list[str]:
    flt = LAYOUT.conversations_filter("small")
    page = engine.fetch(FetchRequest(query="garden kayak tomatoes", filter=flt, mode=FetchMode.KEYWORD, limit=5))
    return [hit.id for hit in page.hits]


def test_word_counts_are_bounded_by_the_scope_not_the_store(
    engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fts, "COMMON_MIN", SMALL_MIN)
    mine = say(engine, LAYOUT, "small", "small", 0, 10)
    say(engine, LAYOUT, "big", "big", 0, 400)  # holds every query word in every turn
    counts = _counted(monkeypatch, "_doc_count", int)
    first = _small_fetch(engine)
    per_word = int(fts.common_cutoff(10)) + 1  # 5% of the small agent's 10 rows, at least SMALL_MIN
    assert len(counts) == 3
    assert sum(counts) <= 3 * per_word  # was 5% of the 410-row table: 21 entries a word
    say(engine, LAYOUT, "big", "big", 400, 800)  # the big agent triples
    counts.clear()
    assert _small_fetch(engine) == first
    assert sum(counts) <= 3 * per_word
    assert set(first) <= set(mine)


def _said(agent: str, text: str, day: int) -> Conversation:
    return Conversation(
        turns=(Turn(role=Role.USER, text=text),),
        meta=MemoryMeta(
            namespace=Namespace.agent(agent),
            agent_id=agent,
            thread_id="t1",
            observed_at=datetime(2023, 5, day, 12, tzinfo=UTC),
            observed_actor=ObservedActor(id=f"user:{agent}", name=agent.title()),
        ),
    )


def test_a_belief_read_scores_its_own_beliefs_not_every_agents(
    engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = ConsolidateRequest(reach=Reach.subtree())
    engine.store_many([_said("ann", f"I walked my dog Rex to lake number {i}.", 1 + i) for i in range(3)])
    engine.consolidate(build)
    reach = Reach(at=Namespace.agent("ann"), inherit=False, descendants=True)
    ann = engine.beliefs(BeliefsRequest(reach=reach, limit=50))
    assert ann
    pets = [f"My dog Bella chased squirrel {i} across field {i}." for i in range(60)]
    engine.store_many([_said("bob", text, 1 + i % 28) for i, text in enumerate(pets)])
    engine.consolidate(build)
    everyone = engine.beliefs(BeliefsRequest(reach=Reach.subtree(), limit=100))
    assert len(everyone) >= len(ann) + 30  # bob's build wrote many beliefs holding "dog"
    scored = _counted(monkeypatch, "_bm25", lambda out: len(out[0]))
    hits = engine.beliefs(BeliefsRequest(reach=reach, query="dog", limit=5))
    assert hits and {h.id for h in hits} <= {h.id for h in ann}
    assert scored and sum(scored) <= len(ann)  # ranges over ann's beliefs: bob's are never scored

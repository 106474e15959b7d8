"""A small agent beside a big one (issue 12): what the small agent's pack reads does not follow its neighbour.

Counted, never timed: the rows FTS5 statements hand back to the belief ranking for the query's common words, the
document-count statements a pack's sections run, and the token cache's reads of rows not embedded yet.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest

from memory_core.consolidation import ConsolidateRequest
from memory_core.engines.sqlite import SQLiteEngine, fts
from memory_core.engines.sqlite import belief_index as beliefs
from memory_core.items import Conversation, Role, Turn
from memory_core.lifecycle.agent import AgentMemory, turn_item
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.meta import ItemKind
from memory_core.namespace import Reach
from memory_core.query import FetchMode, FetchRequest
from memory_core.retrieval.embedder import HashEmbedder
from tests._executors import ManualExecutor

LAYOUT = MemoryLayout()
T0 = datetime(2023, 5, 1, tzinfo=UTC)
SMALL = tuple(
    f"Melanie: I painted a {subject} by the lake with my {who}"
    for subject in ("sunrise", "heron", "boat", "storm", "pier", "willow", "cabin", "canoe", "bridge", "sunset")
    for who in ("kids", "mom")
)
"""The small agent's turns: distinct facts, so each builds a belief; every one names the lake."""
_PLACES = ("studio", "bank", "gym", "museum", "park", "beach", "library", "market", "theatre", "station", "harbour")
_THINGS = ("shoes", "guitar", "bike", "camera", "lamp", "desk", "coat", "book", "kettle", "tent", "drum", "scarf")
BIG = tuple(
    f"Jon: I bought a {_THINGS[i % 12]} at the {_PLACES[(i // 12) % 11]} for the show of the "
    f"{('spring', 'summer', 'autumn', 'winter')[i // 132]}"
    for i in range(528)
)
"""The neighbour's turns: each a distinct fact, so each builds a belief, and each holds "the"."""
QUESTIONS = (
    "What did Melanie paint by the lake?",
    "Who went to the lake with Melanie?",
    "When was the sunset on the lake?",
)
BUILD = ConsolidateRequest(reach=Reach.subtree(), kinds=(ItemKind.CONVERSATION,))


def _turns(agent: str, lines: tuple[str, ...], start: int, n: int) -> list[Conversation]:
    """``n`` turns of ``agent`` from ``lines``, numbered from ``start``, 20 a thread, an hour apart."""
    at = LAYOUT.conversations(agent)
    out = []
    for k in range(start, start + n):
        turn = Turn(role=Role.USER, text=lines[k % len(lines)])
        out.append(turn_item(at, agent, f"t{k // 20}", k, turn, at=T0 + timedelta(hours=k)))
    return out


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[SQLiteEngine]:
    with SQLiteEngine(tmp_path / "memory.db", synchronous="normal", embedder=HashEmbedder()) as e:
        e.store_many(_turns("melanie", SMALL, 0, len(SMALL)))
        e.consolidate(BUILD)
        yield e


def _grow_neighbour(engine: SQLiteEngine, start: int, n: int) -> None:
    items = _turns("jon", BIG, start, n)
    for at in range(0, n, 100):
        engine.store_many(items[at : at + 100])
    engine.consolidate(BUILD)


def _common_rows(engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[list[str]]]:
    """Rows the belief ranking's common-word statements returned over the small agent's packs, and the packs.

    Inline packs (every read on the calling thread's connection); a statement's rowids are counted when the
    ranking parses them (``fts._ints``).
    """
    last = [""]
    returned: list[int] = []
    real = fts._ints

    def counting(csv: str | None) -> object:
        out = real(csv)
        if last[0].startswith("SELECT group_concat(rowid) FROM beliefs_fts WHERE beliefs_fts MATCH"):
            returned.append(len(out))
        return out

    monkeypatch.setattr(fts, "_ints", counting)
    conn = engine._db.connection()
    conn.set_trace_callback(lambda sql: None if sql.startswith("-- ") else last.__setitem__(0, sql))  # not FTS5 own
    memory = AgentMemory(engine, LAYOUT, "melanie", executor=ManualExecutor())
    packs = []
    try:
        for i, question in enumerate(QUESTIONS):
            pack = memory.pre_turn({"thread_id": f"q{i}", "turn_index": 0, "user_text": question}).pack
            packs.append([h.id for s in pack.sections for h in s.hits])
    finally:
        conn.set_trace_callback(None)
        monkeypatch.setattr(fts, "_ints", real)
    return sum(returned), packs


def test_beliefs_read_for_common_words_do_not_grow_with_a_big_neighbour(
    engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fts, "COMMON_MIN", 20)  # "the" is common from 20 beliefs on, not 500: a small test
    _grow_neighbour(engine, 0, 60)
    beside_few = engine.stats()["beliefs"]
    before, packs = _common_rows(engine, monkeypatch)
    _grow_neighbour(engine, 60, 180)
    assert engine.stats()["beliefs"] >= beside_few + 180  # the neighbour's build added a belief a turn
    after, _ = _common_rows(engine, monkeypatch)
    # each question holds "the", as every neighbour's belief does: the whole-table read returned them all per pack
    assert after <= before, (before, after)
    assert all(packs), packs


def test_beliefs_ranked_as_the_whole_table_matches_rank_them(
    engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fts, "COMMON_MIN", 20)
    _grow_neighbour(engine, 0, 120)
    flt = LAYOUT.learnings_filter()
    questions = (*QUESTIONS, "the studio", "What happened at the show of the tour?", "the night")

    def whole(conn, held, cos, query, mode, limit, counts):  # type: ignore[no-untyped-def]
        return fts.fts_matches(conn, "beliefs_fts", query, len(held.keys))

    def ranked(question: str, mode: FetchMode, limit: int, index: beliefs.BeliefIndex | None) -> list[object]:
        hits = engine._read(partial(beliefs.rank, flt=flt, query=question, mode=mode, limit=limit, index=index))
        return [(h.id, round(h.score, 9)) for h in hits]

    for mode in (FetchMode.HYBRID, FetchMode.KEYWORD):
        for question in questions:
            for limit in (1, 3, 8):
                got = ranked(question, mode, limit, engine._belief_index)
                with monkeypatch.context() as m:
                    m.setattr(beliefs, "_matches", whole)
                    want = ranked(question, mode, limit, None)
                assert got == want, (question, mode, limit)


def _count_statements(engine: SQLiteEngine, question: str) -> Counter[str]:
    """The document-count statements of the four sections of a pack, each read as its own fetch (one thread)."""
    seen: Counter[str] = Counter()
    conn = engine._db.connection()
    conn.set_trace_callback(lambda sql: seen.update([sql]) if "SELECT count(*) FROM (SELECT 1 FROM" in sql else None)
    try:
        for flt, scopes, agent in (
            (LAYOUT.learnings_filter(), None, None),
            (LAYOUT.brain_filter(None), 4, None),
            (LAYOUT.conversations_filter("melanie"), 8, None),
            (LAYOUT.conversations_filter(None), 8, "melanie"),
        ):
            engine.fetch(FetchRequest(query=question, mode=FetchMode.HYBRID, filter=flt, limit=6, beliefs=8,
                                      max_scopes=scopes, exclude_agent_id=agent))  # fmt: skip
    finally:
        conn.set_trace_callback(None)
    return seen


def test_each_word_is_counted_once_per_index_state(engine: SQLiteEngine) -> None:
    _grow_neighbour(engine, 0, 60)
    seen = _count_statements(engine, QUESTIONS[0])
    assert seen and max(seen.values()) == 1, seen  # three item sections and the beliefs: one count per word
    again = _count_statements(engine, QUESTIONS[0])
    assert not again  # the same index state: nothing counted again
    engine.store_many(_turns("melanie", SMALL, 100, 1))
    after = _count_statements(engine, QUESTIONS[0])
    assert {s for s in after if "items_fts" in s} == {s for s in seen if "items_fts" in s}  # a new state: once each
    assert max(after.values()) == 1


def test_a_row_not_embedded_is_kept_while_others_are_embedded(engine: SQLiteEngine) -> None:
    _grow_neighbour(engine, 0, 40)
    cache, model = engine._tokens, engine.embedder.name
    waiting = engine._read(lambda c: [int(r[0]) for r in c.execute("SELECT seq FROM items ORDER BY seq DESC LIMIT 5")])
    dims = engine.embedder.dims
    engine._read(lambda c: cache.load(c, waiting, model, dims))
    read = cache.stats.read
    engine.embed_backlog(limit=10)  # the oldest ten: none of the five newest
    rows = engine._read(lambda c: cache.load(c, waiting, model, dims))
    assert cache.stats.read == read  # kept: checked (one statement), not read again
    assert cache.stats.checks == 1 and cache.stats.checked == 5
    assert all(rows[s].tokens is None for s in waiting)
    engine.embed_backlog()
    rows = engine._read(lambda c: cache.load(c, waiting, model, dims))
    assert cache.stats.read == read + 5  # now embedded: read anew, with their vectors
    assert all(rows[s].tokens is not None for s in waiting)

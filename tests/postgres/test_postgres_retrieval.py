"""The project's retrieval on PostgreSQL: stemmed windowed terms in the ``tsvector``, token vectors computed by
``embed_backlog`` and stored as ``bytea``, late interaction and the speaker signal reordering a hybrid fetch."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import psycopg
import pytest

from memory_core import FetchMode, FetchRequest, ForgetTarget, MemoryMeta, MetaFilter
from memory_core.engines.postgres import PostgresEngine
from memory_core.engines.postgres.rerank import reorder
from memory_core.engines.postgres.schema import SCHEMA
from memory_core.engines.sqlite.vectors import Stored
from memory_core.items import Conversation, Role, Turn
from memory_core.meta import ItemKind, ObservedActor, TurnRange
from memory_core.retrieval.embedder import HashEmbedder

pytestmark = pytest.mark.postgres


@pytest.fixture
def engine(pg_url: str) -> Iterator[PostgresEngine]:
    with PostgresEngine(pg_url, embedder=HashEmbedder()) as opened:
        yield opened


def _turn(text: str, index: int, *, thread: str = "t1", speaker: str | None = None) -> Conversation:
    meta = MemoryMeta(
        thread_id=thread,
        turns=TurnRange(first=index, last=index),
        observed_actor=ObservedActor(id=f"person:{speaker}", name=speaker) if speaker else None,
    )
    return Conversation(turns=(Turn(role=Role.USER, text=text),), meta=meta)


def _ids(engine: PostgresEngine, query: str, mode: FetchMode = FetchMode.KEYWORD) -> list[str]:
    flt = MetaFilter(kinds=(ItemKind.CONVERSATION,))
    return [h.id for h in engine.fetch(FetchRequest(query=query, mode=mode, filter=flt, limit=10)).hits]


def test_a_turn_matches_its_neighbours_words_until_the_neighbour_is_forgotten(engine: PostgresEngine) -> None:
    first, second, third = (
        _turn("We went kayaking on the lake", 0),
        _turn("Yes, it was last Friday!", 1),
        _turn("Lovely weather for that", 2),
    )
    engine.store_many([first, second, third])
    assert set(_ids(engine, "kayak")) == {first.id, second.id}  # stemmed, and the window of the next turn
    assert set(_ids(engine, "friday")) == {first.id, second.id, third.id}
    engine.forget(ForgetTarget(ids=(first.id,)))
    assert _ids(engine, "kayak") == []  # forgotten text leaves every window
    later = _turn("Then we painted the boat", 3)
    engine.store(later)  # a later write widens its neighbour's window
    assert set(_ids(engine, "paintings")) == {third.id, later.id}


def test_embed_backlog_stores_token_vectors_once_and_a_forget_drops_them(engine: PostgresEngine, pg_url: str) -> None:
    turns = [_turn(f"turn number {i} about gardening", i) for i in range(5)]
    engine.store_many(turns)
    assert engine.stats()["embedding_wait"] == 5
    assert engine.embed_backlog(batch=2) == 5
    assert engine.embed_backlog() == 0 and engine.stats()["embedding_wait"] == 0
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(f"SELECT model, prev, length(tokens) FROM {SCHEMA}.item_vectors ORDER BY seq").fetchall()
    assert [r[0] for r in rows] == ["hash"] * 5
    assert rows[0][1] is None and all(r[1] is not None for r in rows[1:])  # the turn before, for the window view
    assert all(r[2] > 0 for r in rows)
    engine.forget(ForgetTarget(ids=(turns[0].id,)))
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(f"SELECT count(*) FROM {SCHEMA}.item_vectors").fetchone()
    assert row is not None and row[0] == 4


def test_a_hybrid_fetch_moves_the_named_speakers_turn_up(engine: PostgresEngine) -> None:
    mine = _turn("the garden party is on saturday", 0, thread="a", speaker="Caroline")
    theirs = _turn("the garden party is on saturday", 0, thread="b", speaker="Melanie")
    engine.store_many([theirs, mine])
    engine.embed_backlog()
    assert _ids(engine, "when is the garden party", FetchMode.KEYWORD)[0] == theirs.id  # ties: newest first
    assert _ids(engine, "when is Caroline's garden party", FetchMode.HYBRID)[0] == mine.id


def test_reorder_ranks_the_token_match_first_and_keeps_scores_non_increasing() -> None:
    rng = np.random.default_rng(7)
    query = rng.normal(size=(3, 8)).astype(np.float32)
    query /= np.linalg.norm(query, axis=1, keepdims=True)
    noise = rng.normal(size=(4, 8)).astype(np.float32)
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    stored = {
        1: Stored(None, None, None, 0, 0.5),  # not embedded yet: ranks by the lexical stage alone
        2: Stored(noise, None, None, 0, 0.5),
        3: Stored(query.copy(), None, None, 0, 0.5),
    }
    ranked = [(1, 0.9), (3, 0.8), (2, 0.7), (4, 0.1)]  # the lexical rank weighs as much as the model's two
    out = reorder(ranked, stored, "anything", query, now_us=0)
    assert [s for s, _ in out] == [3, 2, 1, 4]
    scores = [score for _, score in out]
    assert scores == sorted(scores, reverse=True) and scores[0] == pytest.approx(0.9)
    assert reorder(ranked, {}, "anything", query, now_us=0) == ranked  # nothing embedded: the lexical order


def test_a_version_1_database_gets_its_terms_and_windows_when_it_migrates(pg_url: str) -> None:
    from memory_core.engines.postgres import schema
    from memory_core.engines.postgres.writes import COLUMNS, prepare
    from memory_core.engines.sqlite.rows import now_us

    first, second = _turn("We went kayaking on the lake", 0), _turn("Yes, it was last Friday!", 1)
    v1_columns = COLUMNS[: COLUMNS.index("terms")]
    with psycopg.connect(pg_url) as conn:
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        schema.MIGRATIONS[0](conn)
        conn.execute(f"INSERT INTO {SCHEMA}.meta (key, value) VALUES ('schema_version', '1')")
        for item in (first, second):
            values = list(prepare(item).values[: len(v1_columns)])
            values[v1_columns.index("stored_at")] = now_us()
            marks = ", ".join("%s" for _ in v1_columns)
            conn.execute(f"INSERT INTO {SCHEMA}.items ({', '.join(v1_columns)}) VALUES ({marks})", values)
    with PostgresEngine(pg_url, embedder=HashEmbedder()) as engine:
        assert set(_ids(engine, "kayak")) == {first.id, second.id}
        assert engine.embed_backlog() == 2

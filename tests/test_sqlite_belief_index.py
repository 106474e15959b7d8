"""The per-process belief index: ranked belief reads equal the SQL path's, and every belief write invalidates it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory_core import (
    BeliefsRequest,
    ConsolidateRequest,
    Conversation,
    EraseRequest,
    FetchMode,
    FetchRequest,
    ItemKind,
    MemoryMeta,
    MetaFilter,
    Namespace,
    ObservedActor,
    Reach,
    Role,
    Turn,
)
from memory_core.engines.sqlite import SQLiteEngine, beliefs_store
from memory_core.engines.sqlite import belief_index as belief_index_module
from memory_core.query import Hit

BUILD = ConsolidateRequest(reach=Reach.subtree())


def said(agent: str, text: str, day: int = 8, month: int = 5) -> Conversation:
    return Conversation(
        turns=(Turn(role=Role.USER, text=text),),
        meta=MemoryMeta(
            namespace=Namespace.agent(agent),
            agent_id=agent,
            thread_id="t1",
            observed_at=datetime(2023, month, day, 12, tzinfo=UTC),
            observed_actor=ObservedActor(id=f"user:{agent}", name=agent.title()),
        ),
    )


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[SQLiteEngine]:
    with SQLiteEngine(tmp_path / "memory.db") as e:
        yield e


def ranked(engine: SQLiteEngine, query: str, reach: Reach | None = None) -> list[tuple[str, str, float]]:
    hits = engine.beliefs(BeliefsRequest(reach=reach or Reach.subtree(), query=query, limit=50))
    return [(h.id, h.text, round(h.confidence or 0.0, 6)) for h in hits]


def by_sql(engine: SQLiteEngine, flt: MetaFilter, query: str, mode: FetchMode = FetchMode.HYBRID) -> list[Hit]:
    return engine._db.run(lambda conn: beliefs_store.rank(conn, flt, query, mode, 50))


def by_index(engine: SQLiteEngine, flt: MetaFilter, query: str, mode: FetchMode = FetchMode.HYBRID) -> list[Hit]:
    return engine._db.run(lambda conn: beliefs_store.rank(conn, flt, query, mode, 50, engine._belief_index))


def _seed(engine: SQLiteEngine) -> None:
    engine.store_many(
        [
            said("ann", "I adopted a rescue dog named Max yesterday."),
            said("ann", "My favorite color is blue."),
            said("bob", "I volunteer at the animal shelter every weekend."),
            said("bob", "I am training for the Berlin marathon.", day=9),
        ]
    )
    engine.consolidate(BUILD)


@pytest.mark.parametrize(
    "flt",
    [
        MetaFilter(),
        MetaFilter(reach=Reach.subtree(Namespace.agent("ann"))),
        MetaFilter(reach=Reach.subtree(), kinds=[ItemKind.LEARNING]),
        MetaFilter(reach=Reach.subtree(), kinds=[ItemKind.DOCUMENT]),  # admits no belief
        MetaFilter(reach=Reach.subtree(), agent_id="bob"),  # through SQL keys
    ],
    ids=["all", "ann", "learnings", "documents", "sql-filter"],
)
@pytest.mark.parametrize("mode", FetchMode.all())
def test_the_index_ranks_exactly_as_sql(engine: SQLiteEngine, flt: MetaFilter, mode: FetchMode) -> None:
    _seed(engine)
    for query in ("dog named Max", "animal shelter weekend", "marathon", "favorite color"):
        expected = [(h.id, h.score) for h in by_sql(engine, flt, query, mode)]
        assert [(h.id, h.score) for h in by_index(engine, flt, query, mode)] == expected
    if flt.admits_kind(ItemKind.LEARNING) and flt.agent_id is None:
        assert by_index(engine, flt, "dog named Max")  # not vacuous


def test_a_build_a_supersede_a_forget_and_an_erase_are_seen_at_once(engine: SQLiteEngine) -> None:
    blue = said("ann", "My favorite color is blue.")
    engine.store(blue)
    engine.consolidate(BUILD)
    assert [t for _, t, _ in ranked(engine, "favorite color")] == ["Ann's favorite color is blue (said 8 May 2023)."]
    green = said("ann", "My favorite color is green.", month=6)
    engine.store(green)
    engine.consolidate(BUILD)  # supersedes blue
    assert [t for _, t, _ in ranked(engine, "favorite color")] == ["Ann's favorite color is green (said 8 June 2023)."]
    engine.forget({"ids": [green.id]})  # restores blue
    assert [t for _, t, _ in ranked(engine, "favorite color")] == ["Ann's favorite color is blue (said 8 May 2023)."]
    a, b = said("ann", "I volunteer at the shelter."), said("ann", "I volunteer at the shelter!", day=9)
    engine.store_many([a, b])
    engine.consolidate(BUILD)
    (before,) = [r for r in ranked(engine, "volunteer shelter") if "shelter" in r[1]]
    engine.forget({"ids": [a.id]})  # shrinks the belief: a new confidence in the same row
    (after,) = [r for r in ranked(engine, "volunteer shelter") if "shelter" in r[1]]
    assert after[0] == before[0] and after[2] < before[2]
    engine.erase(EraseRequest(reach=Reach.subtree(Namespace.agent("ann"))))
    assert ranked(engine, "favorite color volunteer shelter") == []


def test_another_process_writing_beliefs_is_seen(tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "m.db") as reader, SQLiteEngine(tmp_path / "m.db") as writer:
        writer.store(said("ann", "I adopted a rescue dog named Max yesterday."))
        assert ranked(reader, "dog") == []  # loads the (empty) index
        writer.consolidate(BUILD)
        assert [t for _, t, _ in ranked(reader, "dog")] == ["Ann adopted a rescue dog named Max on 7 May 2023."]
        fetched = reader.fetch(FetchRequest(query="rescue dog", beliefs=5)).beliefs
        assert [h.text for h in fetched] == ["Ann adopted a rescue dog named Max on 7 May 2023."]


def test_every_belief_write_moves_the_version(engine: SQLiteEngine) -> None:
    def version() -> int:
        conn = sqlite3.connect(engine.path)
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (belief_index_module.VERSION_KEY,)).fetchone()
        conn.close()
        return int(row[0]) if row else 0

    assert version() == 0
    engine.store(said("ann", "I adopted a rescue dog named Max yesterday."))
    assert version() == 0  # an item write is not a belief write
    engine.consolidate(BUILD)
    built = version()
    assert built > 0
    assert engine.consolidate(BUILD).built == 0 and version() == built  # nothing new: nothing written
    engine.forget({"filter": {"reach": {"at": "", "inherit": False, "descendants": True}}})
    assert version() > built


def test_a_snapshot_older_than_the_index_ranks_from_sql(engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    _seed(engine)
    flt = MetaFilter()
    expected = [(h.id, h.score) for h in by_sql(engine, flt, "dog")]
    assert [(h.id, h.score) for h in by_index(engine, flt, "dog")] == expected  # the index holds the newest
    real = belief_index_module._read_version

    def older(conn: sqlite3.Connection) -> tuple[str, int]:
        instance, version = real(conn)
        return instance, version - 1

    monkeypatch.setattr(belief_index_module, "_read_version", older)
    assert engine._db.run(lambda conn: engine._belief_index.rows(conn, flt)) is None
    assert [(h.id, h.score) for h in by_index(engine, flt, "dog")] == expected


def test_a_build_loads_only_the_beliefs_it_changed_and_cached_hits_survive(engine: SQLiteEngine) -> None:
    """Issue 12: after the first full load, each build costs the next read the rows it wrote, not every belief."""
    index = engine._belief_index
    engine.store_many([said("ann", f"I planted {n} tomato seedlings in garden bed {n}.", day=n) for n in range(1, 21)])
    engine.consolidate(BUILD)
    first = engine.fetch(FetchRequest(query="tomato seedlings garden", beliefs=50)).beliefs
    assert index.stats.full == 1 and index.stats.refreshes == 0
    loaded = index._loaded
    assert loaded is not None
    active = loaded.active
    cached = dict(loaded.hits)
    assert cached and active > 5
    engine.store(said("bob", "I adopted a rescue dog named Max yesterday."))
    engine.consolidate(BUILD)
    changed = engine._db.run(
        lambda conn: conn.execute("SELECT count(*) FROM beliefs WHERE version > ?", (loaded.version,)).fetchone()[0]
    )
    assert 0 < changed < active
    rows_before = index.stats.rows
    after = engine.fetch(FetchRequest(query="tomato seedlings garden rescue dog", beliefs=50)).beliefs
    assert index.stats.full == 1 and index.stats.refreshes == 1
    assert index.stats.rows - rows_before == changed  # only what the build wrote was read
    refreshed = index._loaded
    assert refreshed is not None and refreshed.active == active + changed
    assert all(refreshed.hits[bid] is hit for bid, hit in cached.items())  # the parsed hits were kept
    assert {h.id for h in first} < {h.id for h in after}
    assert [(h.id, h.score) for h in by_index(engine, MetaFilter(), "tomato dog")] == [
        (h.id, h.score) for h in by_sql(engine, MetaFilter(), "tomato dog")
    ]


@pytest.mark.parametrize("compact_min", [0, 1024], ids=["compacting", "delta-only"])
def test_refreshes_follow_supersedes_forgets_and_erases_exactly(
    engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch, compact_min: int
) -> None:
    """A sequence of writes, each followed by a read through the refreshed index and one through SQL.

    Both ways a refresh applies changes: rebuilding the arrays at once (``COMPACT_MIN`` 0 on a small store), and
    keeping every change in the delta beside the first load's base (1024).
    """
    monkeypatch.setattr(belief_index_module, "COMPACT_MIN", compact_min)
    index = engine._belief_index
    filters = [MetaFilter(), MetaFilter(reach=Reach.subtree(Namespace.agent("ann"))), MetaFilter(agent_id="ann")]
    steps = [
        lambda: engine.store(said("ann", "My favorite color is blue.")),
        lambda: engine.store(said("ann", "My favorite color is green.", month=6)),
        lambda: engine.store_many([said("bob", "I volunteer at the shelter."), said("bob", "I run marathons.")]),
    ]
    for step in steps:
        step()
        engine.consolidate(BUILD)
        for query in ("favorite color", "volunteer shelter marathon"):
            for flt in filters:
                assert [(h.id, h.score) for h in by_index(engine, flt, query)] == [
                    (h.id, h.score) for h in by_sql(engine, flt, query)
                ]
    green = said("ann", "My favorite color is green.", month=6)
    engine.forget({"ids": [green.id]})
    assert [(h.id, h.score) for h in by_index(engine, MetaFilter(), "favorite color")] == [
        (h.id, h.score) for h in by_sql(engine, MetaFilter(), "favorite color")
    ]
    assert [t for _, t, _ in ranked(engine, "favorite color")][0] == "Ann's favorite color is blue (said 8 May 2023)."
    engine.erase(EraseRequest(reach=Reach.subtree(Namespace.agent("bob"))))
    after_erase = by_index(engine, MetaFilter(), "volunteer shelter marathon")
    assert [(h.id, h.score) for h in after_erase] == [
        (h.id, h.score) for h in by_sql(engine, MetaFilter(), "volunteer shelter marathon")
    ]
    assert not [h for h in after_erase if h.text.startswith("Bob")]
    assert index.stats.full == 1 and index.stats.refreshes == 4  # two builds, a forget, an erase
    assert (index.stats.compactions > 0) == (compact_min == 0)


def test_a_refresh_copies_what_changed_until_the_delta_outgrows_its_share(
    engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 12: a build commit costs the live read the rows it wrote, not a copy of every active belief's arrays;
    the whole arrays are rebuilt once the changes outgrow ``compact_at`` (then the delta starts again)."""
    monkeypatch.setattr(belief_index_module, "COMPACT_MIN", 3)
    index = engine._belief_index
    engine.store_many([said("ann", f"I planted {n} tomato seedlings in garden bed {n}.", day=n) for n in range(1, 25)])
    engine.consolidate(BUILD)
    query = "tomato seedlings garden dog hiking"
    by_index(engine, MetaFilter(), query)
    loaded = index._loaded
    assert loaded is not None and index.stats.full == 1
    base = len(loaded.base.keys)
    assert belief_index_module.compact_at(base) == 3 and base >= 24
    news = [
        "I adopted a rescue dog named Max yesterday.",
        "I went hiking in the Alps last summer.",
        "I am learning to play the cello.",
        "I moved to Lisbon in March.",
    ]
    deltas: list[int] = []
    for n, text in enumerate(news):
        copied = index.stats.copied
        engine.store(said("bob", text, day=n + 1))
        engine.consolidate(BUILD)
        for flt in (MetaFilter(), MetaFilter(reach=Reach.subtree(Namespace.agent("bob")))):
            assert [(h.id, h.score) for h in by_index(engine, flt, query)] == [
                (h.id, h.score) for h in by_sql(engine, flt, query)
            ]
        now = index._loaded
        assert now is not None
        deltas.append(len(now.delta.keys))
        if index.stats.compactions == 0:
            assert now.base is loaded.base  # the first load's arrays, not copied
            assert index.stats.copied - copied == len(now.delta.keys) <= 3
    assert deltas[0] >= 1 and index.stats.compactions == 1  # the changes outgrew 3 rows once
    assert 0 in deltas[1:]  # the rebuild folded the delta into the base
    assert index.stats.refreshes == len(news) and index.stats.full == 1


def test_a_read_during_another_threads_refresh_keeps_the_previous_version(engine: SQLiteEngine) -> None:
    """One refresh per process at a time: a read that finds one running ranks from the version held, and shows
    no belief its own snapshot has removed."""
    index = engine._belief_index
    blue = said("ann", "My favorite color is blue.")
    engine.store_many([blue, said("bob", "I adopted a rescue dog named Max yesterday.")])
    engine.consolidate(BUILD)
    assert len(ranked(engine, "favorite color dog")) == 2
    engine.forget({"ids": [blue.id]})  # deletes Ann's belief: a newer version
    assert index._loading.acquire(blocking=False)  # "another thread" is refreshing
    try:
        texts = [t for _, t, _ in ranked(engine, "favorite color dog")]
        assert texts == ["Bob adopted a rescue dog named Max on 7 May 2023."]
        assert index.stats.stale == 1 and index.stats.refreshes == 0
    finally:
        index._loading.release()
    assert [t for _, t, _ in ranked(engine, "favorite color dog")] == texts
    assert index.stats.refreshes == 1 and index.stats.full == 1


def test_a_full_load_in_small_pages_ranks_as_sql(engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(belief_index_module, "LOAD_PAGE", 2)
    _seed(engine)
    for query in ("dog named Max", "animal shelter weekend", "marathon"):
        assert [(h.id, h.score) for h in by_index(engine, MetaFilter(), query)] == [
            (h.id, h.score) for h in by_sql(engine, MetaFilter(), query)
        ]
    loaded = engine._belief_index._loaded
    assert loaded is not None and loaded.active > 2  # more than one page was read
    assert engine._belief_index.stats.full == 1

"""Belief builds in the SQLite engine: incremental per scope, served apart from items, provenance on forget."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memory_core import (
    BeliefsRequest,
    ConsolidateRequest,
    Conversation,
    Document,
    EraseRequest,
    FetchMode,
    FetchRequest,
    ItemKind,
    ListRequest,
    MemoryMeta,
    MetaFilter,
    Namespace,
    ObservedActor,
    Reach,
    Role,
    Turn,
)
from memory_core.beliefs import Belief, SourceItem, Statement, extract
from memory_core.engines.sqlite import SQLiteEngine, beliefs_store
from memory_core.engines.sqlite.rows import vec_blob
from memory_core.scoring import embed

ANN = Namespace.agent("ann")


def said(text: str, day: int = 8, month: int = 5, thread: str = "t1", **meta: object) -> Conversation:
    return Conversation(
        turns=(Turn(role=Role.USER, text=text),),
        meta=MemoryMeta(
            namespace=ANN,
            agent_id="ann",
            thread_id=thread,
            observed_at=datetime(2023, month, day, 12, tzinfo=UTC),
            observed_actor=ObservedActor(id="user:ann", name="Ann"),
            **meta,
        ),
    )


BUILD = ConsolidateRequest(reach=Reach.subtree())


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[SQLiteEngine]:
    with SQLiteEngine(tmp_path / "memory.db") as e:
        yield e


def active(engine: SQLiteEngine, reach: Reach | None = None) -> dict[str, float]:
    hits = engine.beliefs(BeliefsRequest(reach=reach or Reach.subtree(), limit=100))
    return {h.text: h.confidence or 0.0 for h in hits}


def writes(engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the engine's write transactions from now on (one entry per ``BEGIN IMMEDIATE``)."""
    seen: list[int] = []
    run = engine._db.run

    def counting(fn: Callable[[sqlite3.Connection], Any], *, write: bool = False, **how: Any) -> Any:
        if write:
            seen.append(1)
        return run(fn, write=write, **how)

    monkeypatch.setattr(engine._db, "run", counting)
    return seen


def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys of the beliefs read back from the file from now on (each state read, parsed or kept parsed)."""
    seen: list[str] = []
    real = beliefs_store._parsed

    def counting(state: str) -> Belief:
        seen.append(json.loads(state)["key"])
        return real(state)

    monkeypatch.setattr(beliefs_store, "_parsed", counting)
    return seen


def test_a_build_with_nothing_new_is_a_no_op(engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    engine.store(said("I adopted a rescue dog named Max yesterday."))
    engine.store(Document.of("Deploys happen on Tuesdays after the standup.", MemoryMeta(namespace="source:files")))
    first = engine.consolidate(BUILD)
    assert first.status.value == "completed" and first.built == 2 and first.scopes == 2
    parsed: list[object] = []
    monkeypatch.setattr(beliefs_store, "parse_item", lambda body: parsed.append(body))
    monkeypatch.setattr(beliefs_store, "extract", lambda items: parsed.append(items))
    locked = writes(engine, monkeypatch)
    again = engine.consolidate(BUILD)
    assert (again.built, again.scopes) == (0, 2)
    assert parsed == [] and locked == []  # no item read, no write lock taken
    assert "Ann adopted a rescue dog named Max on 7 May 2023." in active(engine)


def test_a_build_reads_only_what_was_written_since_the_last(
    engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine.store_many([said(f"I planted {n} tomato seedlings in the garden.", day=n) for n in range(1, 21)])
    engine.consolidate(BUILD)
    seen: list[int] = []

    def counting(items: list[SourceItem]) -> list[Statement]:
        seen.append(len(items))
        return extract(items)

    monkeypatch.setattr(beliefs_store, "extract", counting)
    engine.store_many(
        [said("I bought a blue kayak for the lake.", day=25), said("I signed up for a pottery class.", day=26)]
    )
    assert engine.consolidate(BUILD).built == 2
    assert seen == [2]


def test_scopes_say_what_is_due(engine: SQLiteEngine) -> None:
    engine.store(said("I started learning the violin last month."))
    engine.store(Document.of("Deploys happen on Tuesdays.", MemoryMeta(namespace="source:files")))
    (ann,) = engine.scopes(ConsolidateRequest(reach=Reach.subtree(ANN)))
    assert ann.namespace == ANN and ann.kinds == (ItemKind.CONVERSATION,) and ann.items == 1 and ann.due
    engine.consolidate(ann.request())
    scopes = {str(s.namespace): s.due for s in engine.scopes(BUILD)}
    assert scopes == {"agent:ann": False, "source:files": True}
    engine.store(said("I finished my first violin recital today."))
    assert next(s for s in engine.scopes(BUILD) if s.namespace == ANN).due


def test_beliefs_are_not_items(engine: SQLiteEngine) -> None:
    item = said("I moved to Denver for a new job at a bakery.")
    engine.store(item)
    engine.consolidate(BUILD)
    (belief,) = engine.beliefs(BeliefsRequest(reach=Reach.of(ANN), limit=5))
    assert belief.kind is ItemKind.LEARNING and "belief" in belief.meta.tags and belief.meta.namespace == ANN
    assert belief.derived_from == (item.id,)
    assert [h.id for h in engine.list(ListRequest(limit=50)).items] == [item.id]
    assert engine.forget({"ids": [belief.id]}).forgotten == 0
    assert engine.fetch(FetchRequest(query="Denver bakery", filter=MetaFilter(kinds=(ItemKind.LEARNING,)))).hits == ()


def test_fetch_serves_beliefs_on_the_first_page_within_its_filter(engine: SQLiteEngine) -> None:
    lines = ["I ran a charity race for the shelter.", "I baked muffins to sell at the charity race.", "I won a medal."]
    engine.store_many([said(text, day=n) for n, text in enumerate(lines, 1)])
    engine.consolidate(BUILD)
    req = FetchRequest(query="charity race", limit=1, beliefs=2)
    page = engine.fetch(req)
    assert len(page.beliefs) == 2 and all("race" in b.text for b in page.beliefs)
    assert engine.fetch(req.model_copy(update={"cursor": page.next_cursor})).beliefs == ()
    for flt in (
        MetaFilter(kinds=(ItemKind.CONVERSATION,)),
        MetaFilter(reach=Reach.of("agent:bob")),
        MetaFilter(tags_any=("other",)),
        MetaFilter(thread_id="t2"),
    ):
        assert engine.fetch(req.model_copy(update={"filter": flt})).beliefs == ()
    assert len(engine.fetch(req.model_copy(update={"filter": MetaFilter(thread_id="t1")})).beliefs) == 2


def test_without_a_query_the_most_confident_come_first(engine: SQLiteEngine) -> None:
    engine.store_many([said("I love baking sourdough bread."), said("I love baking sourdough bread!", day=9)])
    engine.store(said("I'm planning a trip to Lisbon next month."))
    engine.consolidate(BUILD)
    confidences = [h.confidence or 0.0 for h in engine.beliefs(BeliefsRequest(reach=Reach.subtree(), limit=10))]
    assert confidences == sorted(confidences, reverse=True) and len(confidences) == 2


def test_newer_statements_supersede_and_forgetting_restores(engine: SQLiteEngine) -> None:
    blue, green = said("My favorite color is blue."), said("My favorite color is green.", month=6)
    engine.store(blue)
    engine.consolidate(BUILD)
    engine.store(green)
    engine.consolidate(BUILD)
    assert list(active(engine)) == ["Ann's favorite color is green (said 8 June 2023)."]
    assert engine.stats()["superseded"] == 1
    assert engine.forget({"ids": [green.id]}).forgotten == 1
    assert list(active(engine)) == ["Ann's favorite color is blue (said 8 May 2023)."]


def test_forget_shrinks_or_removes_beliefs_with_their_sources(engine: SQLiteEngine) -> None:
    a, b = (
        said("I volunteer at the animal shelter every weekend."),
        said("I volunteer at the animal shelter every weekend!", day=9),
    )
    engine.store_many([a, b])
    engine.consolidate(BUILD)
    (belief,) = engine.beliefs(BeliefsRequest(reach=Reach.subtree(), limit=5))
    assert set(belief.derived_from) == {a.id, b.id}
    engine.forget({"ids": [a.id]})
    (shrunk,) = engine.beliefs(BeliefsRequest(reach=Reach.subtree(), limit=5))
    assert (
        shrunk.id == belief.id
        and shrunk.derived_from == (b.id,)
        and (shrunk.confidence or 0) < (belief.confidence or 0)
    )
    engine.erase(EraseRequest(reach=Reach.subtree(ANN)))
    assert engine.beliefs(BeliefsRequest(reach=Reach.subtree(), limit=5)) == []
    assert engine.belief_evidence([belief.id]) == {}


def test_two_builds_at_once_give_the_beliefs_of_one(tmp_path: Path) -> None:
    items = [
        said(f"I hiked the {name} trail with my sister.", day=d) for d, name in enumerate(["Elk", "Fox", "Owl"], 1)
    ]
    items += [said("My favorite color is blue.", day=5), said("My favorite color is red.", day=6)]
    with SQLiteEngine(tmp_path / "one.db") as one:
        one.store_many(items)
        one.consolidate(BUILD)
        expected = {
            (h.id, h.text, h.confidence, h.derived_from)
            for h in one.beliefs(BeliefsRequest(reach=Reach.subtree(), limit=50))
        }
    path = tmp_path / "two.db"
    with SQLiteEngine(path) as seed:
        seed.store_many(items)
    engines = [SQLiteEngine(path) for _ in range(3)]
    threads = [threading.Thread(target=e.consolidate, args=(BUILD,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = {
        (h.id, h.text, h.confidence, h.derived_from)
        for h in engines[0].beliefs(BeliefsRequest(reach=Reach.subtree(), limit=50))
    }
    assert got == expected
    assert engines[0].stats()["superseded"] == 1
    for e in engines:
        e.close()


def test_derive_false_items_are_indexed_but_build_nothing(engine: SQLiteEngine) -> None:
    engine.store(said("I deployed the payment service at midnight.", derive=False))
    assert engine.consolidate(BUILD).built == 0
    assert len(engine.fetch(FetchRequest(query="payment service")).hits) == 1


def test_forgetting_the_item_that_gave_a_belief_its_text_rebuilds_it_from_the_others(engine: SQLiteEngine) -> None:
    sweet = said("I adopted a sweet rescue dog named Max yesterday.")
    plain = said("I adopted a rescue dog named Max yesterday!", thread="t2")
    engine.store_many([sweet, plain])
    engine.consolidate(BUILD)
    (belief,) = engine.beliefs(BeliefsRequest(reach=Reach.subtree(), limit=5))
    assert "sweet" in belief.text and belief.derived_from == (sweet.id, plain.id) and belief.meta.thread_id is None
    engine.forget({"ids": [sweet.id]})
    (rebuilt,) = engine.beliefs(BeliefsRequest(reach=Reach.subtree(), limit=5))
    assert rebuilt.id == belief.id and rebuilt.text == "Ann adopted a rescue dog named Max on 7 May 2023."
    assert rebuilt.derived_from == (plain.id,) and rebuilt.meta.thread_id == "t2"
    evidence = engine._db.run(lambda conn: beliefs_store.evidence_of(conn, [belief.id, "unknown"]))
    assert evidence == {belief.id: (plain.id,)}
    assert engine.beliefs(BeliefsRequest(reach=Reach.subtree(), query="sweet", limit=5)) == []
    keyword = FetchRequest(query="sweet", mode=FetchMode.KEYWORD, filter=MetaFilter(kinds=(ItemKind.LEARNING,)))
    assert engine.fetch(keyword.model_copy(update={"beliefs": 5})).beliefs == ()
    assert [h.id for h in engine.beliefs(BeliefsRequest(reach=Reach.subtree(), query="rescue dog", limit=5))] == [
        belief.id
    ]
    vec = engine._db.run(lambda conn: conn.execute("SELECT vec FROM beliefs").fetchone()[0])
    assert vec == vec_blob(embed(rebuilt.text))


def test_evidence_is_listed_in_write_order_and_the_stored_state_does_not_grow_with_it(engine: SQLiteEngine) -> None:
    def state_size() -> int:
        return int(engine._db.run(lambda conn: conn.execute("SELECT length(state) FROM beliefs").fetchone()[0]))

    first = [said("I volunteer at the animal shelter every weekend.", day=1 + n % 9, thread=f"t{n}") for n in range(2)]
    engine.store_many(first)
    engine.consolidate(BUILD)
    small = state_size()
    more = [
        said("I volunteer at the animal shelter every weekend.", day=1 + n % 9, thread=f"t{n}") for n in range(2, 40)
    ]
    engine.store_many(more)
    engine.consolidate(BUILD)
    (belief,) = engine.beliefs(BeliefsRequest(reach=Reach.subtree(), limit=5))
    assert belief.derived_from == tuple(i.id for i in [*first, *more])
    assert state_size() - small <= 2  # the support count's digits; no list of ids


def test_a_build_reads_only_the_active_belief_of_a_restated_subject(
    engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    colors = ["blue", "green", "red", "teal", "gold", "plum", "rust", "sage", "navy", "pink", "gray", "jade"]
    engine.store_many([said(f"My favorite color is {c}.", day=1 + i) for i, c in enumerate(colors)])
    engine.consolidate(BUILD)
    assert engine.stats()["superseded"] == len(colors) - 1
    read = loads(monkeypatch)
    engine.store(said("My favorite color is lilac.", day=20))
    engine.consolidate(BUILD)
    assert set(read) == {"ann|favorite color=jade"}  # the active value; none of its superseded history
    assert list(active(engine)) == ["Ann's favorite color is lilac (said 20 May 2023)."]


def test_forgetting_a_value_reads_only_what_can_become_active(
    engine: SQLiteEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = [
        said(f"My favorite color is {c}.", day=1 + i) for i, c in enumerate(["blue", "green", "red", "teal", "gold"])
    ]
    engine.store_many(items)
    engine.consolidate(BUILD)
    read = loads(monkeypatch)
    engine.forget({"ids": [items[1].id]})  # a superseded value
    assert set(read) == {"ann|favorite color=green"}
    read.clear()
    engine.forget({"ids": [items[4].id]})  # the active one: the newest of the rest takes over
    assert set(read) == {"ann|favorite color=gold", "ann|favorite color=teal"}
    assert list(active(engine)) == ["Ann's favorite color is teal (said 4 May 2023)."]
    assert engine.stats()["superseded"] == 2


def test_an_active_value_that_loses_its_newest_evidence_yields_to_a_newer_one(engine: SQLiteEngine) -> None:
    green, blue, again = (
        said("My favorite color is green."),
        said("My favorite color is blue.", day=20),
        said("My favorite color is green!", month=6, day=2),
    )
    engine.store_many([green, blue, again])
    engine.consolidate(BUILD)
    assert list(active(engine)) == ["Ann's favorite color is green (said 8 May 2023)."]
    engine.forget({"ids": [again.id]})
    assert list(active(engine)) == ["Ann's favorite color is blue (said 20 May 2023)."]


def _snapshot(engine: SQLiteEngine) -> set[tuple[str, str, float | None, tuple[str, ...]]]:
    return {
        (h.id, h.text, h.confidence, h.derived_from)
        for h in engine.beliefs(BeliefsRequest(reach=Reach.subtree(), limit=100))
    }


def store_all(engine: SQLiteEngine, items: list[Conversation]) -> None:
    for start in range(0, len(items), 100):
        engine.store_many(items[start : start + 100])


def _many() -> list[Conversation]:
    places = ["lake", "park", "museum", "harbor", "library", "market", "garden", "stadium", "bakery", "zoo"]
    return [
        said(f"I visited the {places[n % 10]} with my cousin number {n}.", day=1 + n % 27, thread=f"t{n}")
        for n in range(120)
    ]


def _built_at_once(tmp_path: Path) -> set[tuple[str, str, float | None, tuple[str, ...]]]:
    """The beliefs of ``_many()`` built by one uninterrupted consolidate, as ``_snapshot`` gives them."""
    with SQLiteEngine(tmp_path / "once.db") as once:
        store_all(once, _many())
        once.consolidate(BUILD)
        return _snapshot(once)


def test_a_build_commits_whenever_it_has_held_the_lock_its_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _built_at_once(tmp_path)
    with SQLiteEngine(tmp_path / "steps.db") as steps:
        store_all(steps, _many())
        locked = writes(steps, monkeypatch)
        beliefs_store.build_scope(steps._db, "agent:ann/", ItemKind.CONVERSATION.value, budget_s=0.0)
        # one build transaction per batch when out of budget; a commit (its log records) whenever PUBLISH_MAX
        # beliefs changed since the last, and at the end: each publishes at most that many plus one item's
        holds = steps._db.stats.holds
        assert holds["build"].count == -(-120 // beliefs_store.MERGE_BATCH) and holds["build"].most_items == 1
        assert len(locked) == holds["build"].count + holds["publish"].count
        assert holds["publish"].count >= 2
        assert beliefs_store.PUBLISH_MAX <= holds["publish"].most_items < 2 * beliefs_store.PUBLISH_MAX
        assert _snapshot(steps) == expected  # the same beliefs as one commit at the end


def test_a_build_overtaken_between_its_read_and_its_write_gives_the_beliefs_of_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _built_at_once(tmp_path)
    path = tmp_path / "race.db"
    with SQLiteEngine(path) as slow, SQLiteEngine(path) as fast:
        store_all(slow, _many())
        real = beliefs_store._statements
        calls: list[int] = []

        def overtaken(rows: Any) -> Any:
            calls.append(len(rows))
            if len(calls) == 1:
                fast.consolidate(BUILD)  # another process builds while this one extracts
            return real(rows)

        monkeypatch.setattr(beliefs_store, "_statements", overtaken)
        assert slow.consolidate(BUILD).built == 0
        assert len(calls) == 2 and _snapshot(slow) == expected  # its own extraction and the other build's


def test_an_item_forgotten_while_a_build_extracts_it_adds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "memory.db"
    keep, gone = said("I adopted a rescue dog named Max yesterday."), said("I ran a charity race for the shelter.")
    with SQLiteEngine(path) as builder, SQLiteEngine(path) as other:
        builder.store_many([keep, gone])
        real = beliefs_store._statements

        def forgetting(rows: Any) -> Any:
            groups = real(rows)
            other.forget({"ids": [gone.id]})
            return groups

        monkeypatch.setattr(beliefs_store, "_statements", forgetting)
        assert builder.consolidate(BUILD).built == 1
        (belief,) = builder.beliefs(BeliefsRequest(reach=Reach.subtree(), limit=5))
        assert belief.derived_from == (keep.id,)

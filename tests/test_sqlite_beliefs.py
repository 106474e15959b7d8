"""Belief builds in the SQLite engine: incremental per scope, served apart from items, provenance on forget."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory_core import (
    BeliefsRequest,
    ConsolidateRequest,
    Conversation,
    Document,
    EraseRequest,
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
from memory_core.beliefs import SourceItem, Statement, extract
from memory_core.engines.sqlite import SQLiteEngine, beliefs_store

ANN = Namespace.agent("ann")


def said(text: str, day: int = 8, month: int = 5, **meta: object) -> Conversation:
    return Conversation(
        turns=(Turn(role=Role.USER, text=text),),
        meta=MemoryMeta(
            namespace=ANN,
            agent_id="ann",
            thread_id="t1",
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


def test_a_build_with_nothing_new_is_a_no_op(engine: SQLiteEngine) -> None:
    engine.store(said("I adopted a rescue dog named Max yesterday."))
    first = engine.consolidate(BUILD)
    assert first.status.value == "completed" and first.built == 1 and first.scopes == 1
    assert engine.consolidate(BUILD).built == 0
    assert active(engine) == {"Ann adopted a rescue dog named Max on 7 May 2023.": 0.65}


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

"""Facts (seed 004, issue 20): keys replace values, the latest statement wins, unkeyed facts dedupe, bad input stores
nothing, importance ranks on SQLite, and a keyed fact leads a pack's learnings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memory_core.engine import MemoryEngine
from memory_core.engines.reference import ReferenceEngine
from memory_core.engines.sqlite.engine import SQLiteEngine
from memory_core.errors import InvalidRequest
from memory_core.facts.model import (
    IMPORTANCE_WEIGHT,
    MAX_FACT_CHARS,
    MAX_KEY_CHARS,
    check_importance,
    content_hash,
    ranking_confidence,
    read_tags,
)
from memory_core.facts.pack import facts_first, key_subject
from memory_core.facts.store import FactStore, fact_item
from memory_core.lifecycle import AgentMemory, MemoryLayout, PreTurn
from memory_core.limits import BELIEF_TAG
from memory_core.memory_log import MemoryStatus, RecordOp
from memory_core.meta import ItemKind, MemoryMeta
from memory_core.namespace import Namespace
from memory_core.query import FetchMode, FetchRequest, Hit, ListRequest
from memory_core.recall.render import PACK_LABEL

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
ROOT = Namespace.parse("team:acme")


@pytest.fixture(autouse=True)
def _hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_CORE_EMBEDDER", "hash")  # no model: these tests count and order, never embed


@pytest.fixture(params=["reference", "sqlite"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "reference":
        yield ReferenceEngine()
        return
    with SQLiteEngine(tmp_path / "m.db") as e:
        yield e


def _all(engine: MemoryEngine) -> list[Hit]:
    return list(engine.list(ListRequest(limit=1000)).items)


def at(hours: int) -> datetime:
    return T0 + timedelta(hours=hours)


# validation ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"text": "x" * (MAX_FACT_CHARS + 1)}, "text"),
        ({"text": "   "}, "text"),
        ({"text": "ok", "key": ""}, "key"),
        ({"text": "ok", "key": "  \t "}, "key"),
        ({"text": "ok", "key": "k" * (MAX_KEY_CHARS + 1)}, "key"),
        ({"text": "ok", "importance": 1.5}, "importance"),
        ({"text": "ok", "importance": -0.1}, "importance"),
        ({"text": "ok", "importance": float("nan")}, "importance"),
        ({"text": "ok", "importance": "0.5"}, "importance"),
        ({"text": "ok", "importance": True}, "importance"),
    ],
)
def test_bad_input_is_invalid_naming_the_field_and_stores_nothing(
    engine: MemoryEngine, kwargs: dict[str, Any], field: str
) -> None:
    memory = AgentMemory(engine, MemoryLayout(ROOT), "writer")
    with pytest.raises(InvalidRequest) as err:
        memory.learn(**kwargs)
    assert err.value.field == field
    assert _all(engine) == []


def test_the_limits_themselves_are_accepted(engine: MemoryEngine) -> None:
    memory = AgentMemory(engine, MemoryLayout(ROOT), "writer")
    memory.learn("x" * MAX_FACT_CHARS, key="k" * MAX_KEY_CHARS, importance=1, at=T0)
    memory.learn("y", importance=0, at=T0)
    assert len(_all(engine)) == 2


def test_a_naive_time_is_refused() -> None:
    memory = AgentMemory(ReferenceEngine(), MemoryLayout(ROOT), "writer")
    with pytest.raises(InvalidRequest) as err:
        memory.learn("x", key="k", at=datetime(2026, 1, 1))
    assert err.value.field == "at"


# keys ------------------------------------------------------------------------------------------------------
def test_a_key_keeps_one_current_value(engine: MemoryEngine) -> None:
    facts = FactStore(engine, ROOT)
    first = facts.learn("The UI theme is dark", key="ui.theme", at=at(1))
    second = facts.learn("The UI theme is light", key="ui.theme", at=at(2))
    assert second.current and second.superseded == (first.id,)
    current = facts.current("ui.theme")
    assert current is not None and current.text == "The UI theme is light"
    assert [h.text for h in facts.all()] == ["The UI theme is light"]
    facts.learn("Other keys are apart", key="ui.font", at=at(3))
    assert facts.current("ui.theme") is not None and facts.current("ui.theme").text == "The UI theme is light"  # type: ignore[union-attr]


def test_keys_are_per_scope(engine: MemoryEngine) -> None:
    FactStore(engine, ROOT).learn("dark", key="ui.theme", at=at(1))
    FactStore(engine, ROOT.child("agent", "other")).learn("light", key="ui.theme", at=at(2))
    root_value = FactStore(engine, ROOT).current("ui.theme")
    assert root_value is not None and root_value.text == "dark"


def test_the_latest_statement_wins_whatever_order_writes_arrive_in(engine: MemoryEngine) -> None:
    """Queued writes delivered out of order: light (stated second) arrives first, dark (stated first) after."""
    dark = fact_item("The UI theme is dark", ROOT, key="ui.theme", at=at(1))
    light = fact_item("The UI theme is light", ROOT, key="ui.theme", at=at(2))
    facts = FactStore(engine, ROOT)
    assert facts.apply(light).current
    late = facts.apply(dark)
    assert not late.current and late.superseded_by is not None
    current = facts.current("ui.theme")
    assert current is not None and current.text == "The UI theme is light"
    assert [h.text for h in facts.all()] == ["The UI theme is light"]


def test_stating_an_old_value_again_makes_it_current_again(engine: MemoryEngine) -> None:
    facts = FactStore(engine, ROOT)
    facts.learn("dark", key="ui.theme", at=at(1))
    facts.learn("light", key="ui.theme", at=at(2))
    facts.learn("dark", key="ui.theme", at=at(3))
    facts.apply(fact_item("light", ROOT, key="ui.theme", at=at(2)))  # a late redelivery of the second statement
    assert [h.text for h in facts.all()] == ["dark"]


def test_a_superseded_value_is_kept_retracted_where_the_engine_keeps_a_log() -> None:
    engine = ReferenceEngine()
    facts = FactStore(engine, ROOT)
    old = facts.learn("dark", key="ui.theme", at=at(1))
    new = facts.learn("light", key="ui.theme", at=at(2))
    history = engine.history(old.id)
    assert history[-1].op is RecordOp.RETRACT and history[-1].status is MemoryStatus.RETRACTED
    assert history[-1].reason is not None and new.id in history[-1].reason and "ui.theme" in history[-1].reason
    assert [h.id for h in _all(engine)] == [new.id]  # not served


def test_forget_removes_every_statement_of_a_key(engine: MemoryEngine) -> None:
    facts = FactStore(engine, ROOT)
    facts.learn("dark", key="ui.theme", at=at(1))
    facts.learn("kept", at=at(1))
    assert facts.forget("ui.theme") >= 1
    assert facts.current("ui.theme") is None and [h.text for h in facts.all()] == ["kept"]


# dedupe ----------------------------------------------------------------------------------------------------
def test_unkeyed_facts_dedupe_by_content(engine: MemoryEngine) -> None:
    facts = FactStore(engine, ROOT)
    first = facts.learn("Likes green tea", at=at(1))
    again = facts.learn("likes   GREEN tea", importance=0.9, at=at(2))
    assert again.replayed and again.id == first.id
    assert len(_all(engine)) == 1
    assert content_hash("Likes green tea") == content_hash(" likes green  TEA ")
    assert content_hash("Likes green tea") != content_hash("Likes black tea")


# ranking ---------------------------------------------------------------------------------------------------
def test_ranking_confidence_blends_importance_and_leaves_other_items_alone() -> None:
    assert ranking_confidence(0.8, ("ops",)) == 0.8
    assert ranking_confidence(None, ()) is None
    assert ranking_confidence(0.8, ("fact-importance:1.0",)) == pytest.approx(0.8 + IMPORTANCE_WEIGHT * 0.2)
    assert ranking_confidence(0.8, ("fact-importance:0.0",)) == pytest.approx(0.8 * (1 - IMPORTANCE_WEIGHT))
    assert ranking_confidence(None, ("fact-importance:0.5",)) == pytest.approx(0.5)
    assert ranking_confidence(0.8, ("fact-importance:7",)) == 0.8  # malformed: ignored
    assert check_importance(1) == 1.0


@pytest.mark.parametrize("important", ["north", "south"])
def test_importance_orders_otherwise_equal_facts_on_sqlite(tmp_path: Path, important: str) -> None:
    with SQLiteEngine(tmp_path / "m.db") as engine:
        facts = FactStore(engine, ROOT)
        for side in ("north", "south"):
            facts.learn(f"The {side} office serves green tea", importance=1.0 if side == important else 0.0, at=T0)
        page = engine.fetch(FetchRequest(query="office green tea", mode=FetchMode.KEYWORD, limit=2))
        assert [important in h.text for h in page.hits] == [True, False]
        assert page.hits[0].confidence == page.hits[1].confidence == 0.8  # the item's own confidence is unchanged


# the pack --------------------------------------------------------------------------------------------------
def _hit(text: str, tags: tuple[str, ...], hours: int = 0) -> Hit:
    return Hit(
        id=f"{text}-{hours}",
        kind=ItemKind.LEARNING,
        text=text,
        meta=MemoryMeta(namespace=ROOT, tags=tags, observed_at=at(hours)),
    )


def test_facts_first_puts_the_current_value_first_and_beliefs_about_its_key_last() -> None:
    belief = _hit("User prefers the dark theme", (BELIEF_TAG,))
    other = _hit("Lives in Lisbon", (BELIEF_TAG,))
    plain = _hit("Ships on Fridays", ())
    old = _hit("The UI theme is dark", ("fact-key:ui.theme",), 1)
    new = _hit("The UI theme is light", ("fact-key:ui.theme",), 2)
    assert facts_first([belief, other, old, plain, new]) == [new, other, plain, belief]
    assert facts_first([belief, plain]) == [belief, plain]  # no keyed fact: unchanged
    assert key_subject("user.home_city") == {"home", "city"} and key_subject("ui.theme") == {"theme"}


def test_the_pack_shows_the_current_value_first_under_the_fallible_context_label(engine: MemoryEngine) -> None:
    memory = AgentMemory(engine, MemoryLayout(ROOT), "writer")
    memory.pre_turn(PreTurn(thread_id="t", turn_index=0, user_text="I prefer the dark theme for the UI.", at=T0))
    memory.run_background(memory.history_build())
    memory.learn("The UI theme is dark", key="ui.theme", at=at(1))
    memory.learn("The UI theme is light", key="ui.theme", at=at(2))
    pack = memory.recall("which UI theme does the user prefer")
    learnings = next(s for s in pack.sections if s.heading == "Learnings")
    assert learnings.hits[0].text == "The UI theme is light"
    assert all(h.text != "The UI theme is dark" for s in pack.sections for h in s.hits)
    assert pack.markdown.index(PACK_LABEL) < pack.markdown.index("The UI theme is light")
    assert "The UI theme is dark" not in pack.markdown


def test_fact_tags_round_trip() -> None:
    item = fact_item("The UI theme is light", ROOT, key=" ui.theme ", importance=0.25, at=at(2), tags=("prefs",))
    facts = read_tags(item.meta.tags)
    assert (facts.key, facts.importance, facts.content_hash) == ("ui.theme", 0.25, None)
    assert facts.stated is not None and facts.stated.startswith("2026-03-01T11:00:00")
    assert "prefs" in item.meta.tags and item.meta.observed_at == at(2)
    unkeyed = read_tags(fact_item("x", ROOT).meta.tags)
    assert unkeyed.key is None and unkeyed.content_hash == content_hash("x") and unkeyed.importance == 0.5

"""Retention (seed 004, issue 20): old and surplus turns go by the forget rules; facts and beliefs stay."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import beat_schedule
from memory_core.consolidation import BeliefsRequest, WriteOptions
from memory_core.descriptor import EngineDescriptor
from memory_core.engine import MemoryEngine
from memory_core.engines.reference import ReferenceEngine
from memory_core.engines.sqlite.engine import SQLiteEngine
from memory_core.errors import InvalidRequest
from memory_core.items import Role, Turn
from memory_core.lifecycle import AgentMemory, MemoryLayout, PreTurn
from memory_core.lifecycle import retention as rules
from memory_core.lifecycle.agent import turn_item
from memory_core.memory_log import RecordOp, Tier
from memory_core.meta import ItemKind, MetaFilter
from memory_core.namespace import Namespace, Reach
from memory_core.query import ListRequest
from memory_core.recall.render import PACK_LABEL
from memory_core.settings import Settings

DAY0 = datetime(2026, 1, 1, tzinfo=UTC)
ROOT = Namespace.parse("team:acme")
LAYOUT = MemoryLayout(ROOT)


@pytest.fixture(autouse=True)
def _hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_CORE_EMBEDDER", "hash")


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[SQLiteEngine]:
    with SQLiteEngine(tmp_path / "m.db") as engine:
        yield engine


def log_turns(engine: MemoryEngine, count: int, days: float, agent: str = "writer") -> None:
    """``count`` user turns spread evenly over ``days`` from DAY0, turn i at DAY0 + i * days / count."""
    items = [
        turn_item(
            LAYOUT.conversations(agent),
            agent,
            "main",
            i,
            Turn(role=Role.USER, text=f"turn number {i}"),
            at=DAY0 + timedelta(days=days * i / count),
        )
        for i in range(count)
    ]
    for start in range(0, count, 100):
        engine.store_many_with(items[start : start + 100], WriteOptions.accepted())


def turn_times(engine: MemoryEngine) -> list[datetime]:
    flt = MetaFilter(reach=Reach.subtree(ROOT), kinds=(ItemKind.CONVERSATION,))
    out: list[datetime] = []
    cursor = None
    while True:
        page = engine.list(ListRequest(filter=flt, limit=1000, cursor=cursor))
        out.extend(h.meta.observed_at for h in page.items if h.meta.observed_at is not None)
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


# the rule, pure --------------------------------------------------------------------------------------------
def test_select_takes_the_too_old_then_all_but_the_newest() -> None:
    now = DAY0 + timedelta(days=100)
    turns = [("old", DAY0), ("a", now - timedelta(days=3)), ("b", now - timedelta(days=2)), ("c", now), ("u", None)]
    too_old, over, kept = rules.select(turns, now, rules.RetentionPolicy(max_age_days=90, max_turns=2))
    assert too_old == ["old"] and over == ["u", "a"] and kept == 2  # undated counts as the oldest
    assert rules.select(turns, now, rules.RetentionPolicy(max_age_days=200, max_turns=10)) == ([], [], 5)
    exactly = [("edge", now - timedelta(days=90))]
    assert rules.select(exactly, now, rules.RetentionPolicy()) == ([], [], 1)  # at the cutoff: kept


@pytest.mark.parametrize(("field", "kwargs"), [("max_age_days", {"max_age_days": 0}), ("max_turns", {"max_turns": 0})])
def test_a_limit_that_is_not_positive_is_refused(field: str, kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidRequest) as err:
        rules.RetentionPolicy(**kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


def test_the_policy_comes_from_settings() -> None:
    s = Settings(_env_file=None, retention_max_age_days=30, retention_max_turns=7, retention_archive=True)
    assert rules.RetentionPolicy.from_settings(s) == rules.RetentionPolicy(30, 7, True)
    assert rules.RetentionPolicy.from_settings(Settings(_env_file=None)) == rules.RetentionPolicy(90, 5000, False)


# the scenario (issue 20 "Must show") ----------------------------------------------------------------------
def test_scenario_one_current_value_then_retention_keeps_the_last_90_days_and_every_fact(sqlite: SQLiteEngine) -> None:
    memory = AgentMemory(sqlite, LAYOUT, "writer")
    memory.learn("The UI theme is dark", key="ui.theme", at=DAY0)
    memory.learn("The UI theme is light", key="ui.theme", at=DAY0 + timedelta(minutes=1))
    memory.learn("The user's name is Ana", at=DAY0)
    assert [h.text for h in memory.facts().all()] == ["The UI theme is light", "The user's name is Ana"]
    pack = memory.recall("what UI theme")
    assert "The UI theme is light" in pack.markdown and "dark" not in pack.markdown and PACK_LABEL in pack.markdown

    log_turns(sqlite, 6000, 120)
    now = DAY0 + timedelta(days=120)  # the fake clock
    dry = rules.plan(sqlite, ROOT, now, rules.RetentionPolicy())
    assert (dry.scanned, len(dry.too_old), len(dry.over_count), dry.kept) == (6000, 1500, 0, 4500)
    assert len(turn_times(sqlite)) == 6000  # a plan changes nothing

    done = rules.apply(sqlite, dry)
    assert done.done == 1500
    times = turn_times(sqlite)
    assert len(times) == 4500 <= 5000 and min(times) >= now - timedelta(days=90)
    assert [h.text for h in memory.facts().all()] == ["The UI theme is light", "The user's name is Ana"]
    assert "The UI theme is light" in memory.recall("what UI theme").markdown

    tighter = rules.apply(sqlite, rules.plan(sqlite, ROOT, now, rules.RetentionPolicy(max_turns=4000)))
    assert (len(tighter.too_old), len(tighter.over_count), tighter.done) == (0, 500, 500)
    left = turn_times(sqlite)
    assert len(left) == 4000 and min(left) >= now - timedelta(days=80)  # the newest 4,000 (50 a day)
    assert len(memory.facts().all()) == 2


def test_count_is_per_layout_root(sqlite: SQLiteEngine) -> None:
    log_turns(sqlite, 10, 1)
    other = MemoryLayout("team:other")
    sqlite.store(turn_item(other.conversations("x"), "x", "t", 0, Turn(role=Role.USER, text="elsewhere"), at=DAY0))
    planned = rules.plan(sqlite, ROOT, DAY0 + timedelta(days=1), rules.RetentionPolicy(max_turns=4))
    assert (planned.scanned, len(planned.over_count)) == (10, 6)
    rules.apply(sqlite, planned)
    assert len(list(sqlite.list(ListRequest(filter=other.conversations_filter(), limit=10)).items)) == 1


def test_beliefs_only_from_removed_turns_go_and_the_rest_stay(sqlite: SQLiteEngine) -> None:
    memory = AgentMemory(sqlite, LAYOUT, "writer")
    memory.pre_turn(PreTurn(thread_id="t", turn_index=0, user_text="I live in Paris and I love it.", at=DAY0))
    recent = DAY0 + timedelta(days=100)
    memory.pre_turn(PreTurn(thread_id="t", turn_index=1, user_text="I drink green tea every morning.", at=recent))
    memory.run_background(memory.history_build())
    reach = Reach.subtree(ROOT)

    def beliefs() -> list[str]:
        return [b.text for b in sqlite.beliefs(BeliefsRequest(reach=reach, limit=10))]

    assert any("Paris" in b for b in beliefs()) and any("tea" in b for b in beliefs())
    rules.apply(sqlite, rules.plan(sqlite, ROOT, recent, rules.RetentionPolicy()))
    assert not any("Paris" in b for b in beliefs()) and any("tea" in b for b in beliefs())


@pytest.mark.parametrize("kind", ["reference", "sqlite"])
def test_archive_moves_turns_on_an_engine_with_tiers(kind: str, sqlite: SQLiteEngine) -> None:
    engine: MemoryEngine = ReferenceEngine() if kind == "reference" else sqlite
    log_turns(engine, 20, 20)
    now = DAY0 + timedelta(days=20)
    planned = rules.plan(engine, ROOT, now, rules.RetentionPolicy(max_age_days=10, archive=True))
    assert planned.action == "archive" and planned.note is None and len(planned.ids) == 10
    done = rules.apply(engine, planned)
    assert done.done == 10
    tiers = [h.tier for h in engine.list(ListRequest(limit=100)).items]
    assert tiers.count(Tier.ARCHIVE) == 10 and len(tiers) == 20  # kept, moved out of the standard read
    history = engine.history(planned.ids[0])
    assert history[-1].op is RecordOp.MOVE and history[-1].tier is Tier.ARCHIVE
    again = rules.plan(engine, ROOT, now, rules.RetentionPolicy(max_age_days=10, max_turns=10, archive=True))
    assert (again.scanned, again.ids) == (10, ())  # archived turns neither count nor go twice


class NoTiers(ReferenceEngine):
    """The reference engine declaring neither a log nor tiers (an engine that cannot archive)."""

    def descriptor(self) -> EngineDescriptor:
        return super().descriptor().model_copy(update={"log": False, "tiers": False})


def test_archive_without_tiers_forgets_and_says_so() -> None:
    engine = NoTiers()
    log_turns(engine, 20, 20)
    planned = rules.plan(engine, ROOT, DAY0 + timedelta(days=20), rules.RetentionPolicy(max_age_days=10, archive=True))
    assert planned.action == "forget" and planned.note is not None and "no tiers" in planned.note
    assert rules.apply(engine, planned).done == 10 and len(turn_times(engine)) == 10


def test_a_naive_clock_is_refused() -> None:
    with pytest.raises(InvalidRequest) as err:
        rules.plan(ReferenceEngine(), ROOT, datetime(2026, 1, 1))
    assert err.value.field == "now"


def test_beat_runs_retention_daily_by_default() -> None:
    entry = beat_schedule.ENTRIES["retention"]
    assert entry["task"] == "memory.retention"
    assert getattr(Settings(_env_file=None), entry["every"]) == 86_400.0


def test_the_docs_spell_the_archive_setting_one_way_and_it_turns_archiving_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    from memory_core.settings import get_settings

    root = Path(__file__).parents[1]
    spelled = {
        name: set(re.findall(r"MEMORY_CORE_RETENTION_ARCHIVE=(\w+)", (root / name).read_text(encoding="utf-8")))
        for name in ("README.md", "docs/facts.md")
    }
    assert spelled == {"README.md": {"true"}, "docs/facts.md": {"true"}}
    for value in ("true", "on"):  # the documented spelling, and the one older notes used: both parse
        monkeypatch.setenv("MEMORY_CORE_RETENTION_ARCHIVE", value)
        get_settings.cache_clear()
        assert get_settings().retention_archive is True
    get_settings.cache_clear()

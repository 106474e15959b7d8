"""The packs' relevance floor (``HolisticRecall.min_relevance``, a memory-core extension) and its policy default."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory_core import Conversation, Document, InvalidRequest, ItemKind, Learning, MemoryMeta, MetaFilter, Role, Turn
from memory_core.engine import AnyItem
from memory_core.engines.reference import ReferenceEngine
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.lifecycle.policy import DEFAULT_MIN_RELEVANCE, RecallPolicy
from memory_core.query import FetchPage, FetchRequest, Hit, ListPage, ListRequest
from memory_core.recall import HolisticRecall, ScopeSection, ThreadWindow, build_pack

DOCS = MetaFilter.of_kinds([ItemKind.DOCUMENT])
CONVS = MetaFilter.of_kinds([ItemKind.CONVERSATION])
LEARNS = MetaFilter.of_kinds([ItemKind.LEARNING])


def _doc(text: str) -> Document:
    return Document.of(text)


def _turn(text: str, thread: str = "t", index: int = 0) -> Conversation:
    meta = MemoryMeta(thread_id=thread, turns={"first": index, "last": index})
    return Conversation(turns=(Turn(role=Role.USER, text=text),), meta=meta)


class Scored(ReferenceEngine):
    """Fetches return fixed hits with fixed scores per kind; beliefs come with every fetch."""

    def __init__(
        self, hits: dict[ItemKind, list[tuple[AnyItem, float]]], beliefs: list[tuple[Learning, float]]
    ) -> None:
        super().__init__()
        self.hits = hits
        self.belief_hits = beliefs
        self.lists = 0

    def _fetch(self, request: FetchRequest) -> FetchPage:
        kind = request.filter.kinds[0]
        hits = tuple(Hit.of(item, score) for item, score in self.hits.get(kind, []))
        beliefs = tuple(Hit.of(b, s) for b, s in self.belief_hits) if request.beliefs else ()
        return FetchPage(hits=hits, beliefs=beliefs)

    def _list(self, request: ListRequest) -> ListPage:
        self.lists += 1
        return ListPage(items=tuple(Hit.of(item, 0.0) for item, _ in self.hits.get(request.filter.kinds[0], [])))


def _engine() -> Scored:
    return Scored(
        {
            ItemKind.DOCUMENT: [(_doc("strong doc"), 0.50), (_doc("weak doc"), 0.20)],
            ItemKind.CONVERSATION: [(_turn("best turn", index=1), 0.80), (_turn("middling turn", index=2), 0.45)],
        },
        beliefs=[(Learning(text="strong belief"), 0.60), (Learning(text="weak belief"), 0.10)],
    )


def _request(floor: float | None, **extra: object) -> HolisticRecall:
    sections = (
        ScopeSection.fetch("Learnings", LEARNS, 4),
        ScopeSection.fetch("Brain", DOCS, 4),
        ScopeSection.fetch("History", CONVS, 4),
    )
    return HolisticRecall.model_validate({"query": "q", "sections": sections, "min_relevance": floor, **extra})


def _texts(request: HolisticRecall, engine: Scored) -> dict[str, list[str]]:
    pack = build_pack(engine, request)
    return {s.heading: [h.text.removeprefix("user: ") for h in s.hits] for s in pack.sections}


def test_without_a_floor_every_ranked_hit_is_kept() -> None:
    assert _texts(_request(None), _engine()) == {
        "Learnings": ["strong belief", "weak belief"],
        "Brain": ["strong doc", "weak doc"],
        "History": ["best turn", "middling turn"],
    }


def test_a_floor_drops_hits_and_beliefs_below_its_share_of_the_packs_best() -> None:
    # stored hits: best 0.80 (a turn), bar 0.5 × 0.80 = 0.40 in every section; beliefs: best 0.60, bar 0.30
    assert _texts(_request(0.5), _engine()) == {
        "Learnings": ["strong belief"],
        "Brain": ["strong doc"],
        "History": ["best turn", "middling turn"],
    }
    assert _texts(_request(0.7), _engine()) == {"Learnings": ["strong belief"], "History": ["best turn"]}


def test_an_excluded_hit_does_not_set_the_bar() -> None:
    engine = _engine()
    best = engine.hits[ItemKind.CONVERSATION][0][0]
    request = _request(0.7, exclude_ids=(best.id,))
    # best stored hit now 0.50 (the strong doc): bar 0.35; beliefs keep theirs (0.42)
    assert _texts(request, engine) == {
        "Learnings": ["strong belief"],
        "Brain": ["strong doc"],
        "History": ["middling turn"],
    }
    windowed = _request(0.7, exclude_thread=ThreadWindow(thread_id="t", from_turn=1))  # both turns in the prompt
    assert _texts(windowed, _engine()) == {"Learnings": ["strong belief"], "Brain": ["strong doc"]}


def test_beliefs_set_the_score_bar_of_beliefs_only() -> None:
    # beliefs are ranked over their own index (short sentences, the speaker's name repeated) and score about twice
    # what turns do for the same question: drawn from the best belief, the bar (0.5 × 0.74) would drop every turn
    engine = Scored(
        {ItemKind.CONVERSATION: [(_turn("best turn", index=1), 0.36), (_turn("weak turn", index=2), 0.15)]},
        beliefs=[(Learning(text="strong belief"), 0.74), (Learning(text="weak belief"), 0.30)],
    )
    sections = (ScopeSection.fetch("Learnings", LEARNS, 4), ScopeSection.fetch("History", CONVS, 4))
    kept = _texts(HolisticRecall(query="q", sections=sections, min_relevance=0.5), engine)
    assert kept == {"Learnings": ["strong belief"], "History": ["best turn"]}


def test_latest_sections_are_never_filtered() -> None:
    engine = _engine()
    request = HolisticRecall(
        query="q",
        sections=(ScopeSection.latest("Docs", DOCS, 4), ScopeSection.fetch("History", CONVS, 4)),
        min_relevance=0.9,
    )
    texts = _texts(request, engine)
    assert texts == {"Docs": ["strong doc", "weak doc"], "History": ["best turn"]} and engine.lists == 1


@pytest.mark.parametrize("bad", [-0.1, 1.5])
def test_the_floor_is_a_share(bad: float) -> None:
    with pytest.raises(InvalidRequest) as info:
        _request(bad)
    assert info.value.field == "min_relevance"


def test_an_unset_floor_is_left_out_of_json() -> None:
    assert "min_relevance" not in _request(None).to_json()
    assert '"min_relevance":0.5' in _request(0.5).to_json()


def test_lifecycle_packs_use_the_policy_floor() -> None:
    assert RecallPolicy().min_relevance == DEFAULT_MIN_RELEVANCE
    assert RecallPolicy(min_relevance=None).min_relevance is None
    layout = MemoryLayout("ws:f")
    engine = _engine()
    on = AgentMemory(engine, layout, "a").recall("q")
    off = AgentMemory(engine, layout, "a").with_policy({"min_relevance": None}).recall("q")
    assert len(on.refs) < len(off.refs)


def test_sqlite_scores_compare_across_fetches_of_one_query(tmp_path: Path) -> None:
    """The score of an item does not depend on which other rows its fetch read (no per-fetch normalisation)."""
    with SQLiteEngine(tmp_path / "m.db") as engine:
        at = datetime(2025, 1, 1, tzinfo=UTC)
        strong = Document.of("kayak trip on the river with the kids", MemoryMeta(observed_at=at))
        weak = Document.of("a trip report", MemoryMeta(namespace="ws:x/project:other", observed_at=at))
        engine.store_many([strong, weak, Document.of("unrelated text about taxes", MemoryMeta(observed_at=at))])
        query = "kayak trip with the kids"
        both = {h.id: h.score for h in engine.fetch(FetchRequest(query=query, limit=10)).hits}
        alone = engine.fetch(
            FetchRequest(query=query, limit=10, filter={"reach": {"at": "ws:x/project:other", "inherit": False}})
        )
        assert [h.id for h in alone.hits] == [weak.id]
        assert alone.hits[0].score == pytest.approx(both[weak.id])  # the same score read alone
        assert both[weak.id] < 0.5 * both[strong.id]  # and far below the strong match, not ~1 as its fetch's best


# query coverage ---------------------------------------------------------------------------------------------
BEACH = "How often does Melanie go to the beach with her kids?"
GO_CODE = 'case ["go", direction]:\n    go(direction)\ncase ["go"]:\n    print("Go where?")'
BEST_TURN = "We don't go often, usually only once or twice a year, but the kids love the beach"


def _beach_engine(*docs: tuple[str, float]) -> Scored:
    turn = _turn(BEST_TURN)
    return Scored(
        {ItemKind.CONVERSATION: [(turn, 0.44)], ItemKind.DOCUMENT: [(_doc(t), s) for t, s in docs]}, beliefs=[]
    )


def _beach(engine: Scored, floor: float | None = 0.5) -> dict[str, list[str]]:
    sections = (ScopeSection.fetch("Brain", DOCS, 4), ScopeSection.fetch("History", CONVS, 4))
    return _texts(HolisticRecall(query=BEACH, sections=sections, min_relevance=floor), engine)


def test_a_hit_scoring_well_on_function_words_alone_is_dropped() -> None:
    # 0.34 is 0.77 of the best score, over the score bar; but the passage holds none of the question's content
    # terms (often, melanie, beach, kid), while the best turn holds three of the four: the coverage bar is 1.5/4
    engine = _beach_engine((GO_CODE, 0.34), ("A beach guide for kids", 0.30), ("Beach safety", 0.30))
    assert _beach(engine) == {"Brain": ["A beach guide for kids"], "History": [BEST_TURN]}
    assert _beach(engine, None)["Brain"] == [GO_CODE, "A beach guide for kids", "Beach safety"]


def test_coverage_counts_only_the_text_a_bullet_shows() -> None:
    far = "Kids and pattern matching. " + "x " * 400 + "The beach, often."
    near = "Kids at the beach, often. " + "x " * 400
    assert _beach(_beach_engine((far, 0.40), (near, 0.40)))["Brain"] == [near]


def test_a_query_without_content_terms_has_no_coverage_bar() -> None:
    engine = _beach_engine((GO_CODE, 0.34), ("Beach safety", 0.30))
    sections = (ScopeSection.fetch("Brain", DOCS, 4),)
    pack = build_pack(engine, HolisticRecall(query="How does it go?", sections=sections, min_relevance=0.5))
    assert [h.text for s in pack.sections for h in s.hits] == [GO_CODE, "Beach safety"]


def test_a_reply_that_answers_in_other_words_clears_the_score_bar_alone_but_a_passage_does_not() -> None:
    # "Yeah, I play clarinet!" covers one of the question's three terms (instrument, melani, play) while the turn
    # before it covers all three: a turn clears the score bar alone (the engine's ranking judged its words);
    # a passage holding as little of the question still needs half the best coverage
    question = "What instruments does Melanie play?"
    ask, reply = "Thanks, Melanie! You play any instruments?", "Yeah, I play clarinet! Started when I was young."
    engine = Scored(
        {
            ItemKind.CONVERSATION: [(_turn(ask, index=1), 0.36), (_turn(reply, index=2), 0.36)],
            ItemKind.DOCUMENT: [(_doc("How to play with the match statement"), 0.36)],
        },
        beliefs=[],
    )
    sections = (ScopeSection.fetch("Brain", DOCS, 4), ScopeSection.fetch("History", CONVS, 4))
    kept = _texts(HolisticRecall(query=question, sections=sections, min_relevance=0.5), engine)
    assert kept == {"History": [ask, reply]}  # the passage is dropped, its section left out


def test_passages_scoring_high_do_not_set_the_bar_of_turns() -> None:
    # "What did Caroline do in May 2023?": passages naming 2023 scored 0.40, the May turns 0.06; a bar drawn from
    # the passages (0.5 × 0.40) emptied History. Turns face the best turn; passages still face the best stored hit.
    engine = Scored(
        {
            ItemKind.DOCUMENT: [(_doc("strong doc"), 0.40), (_doc("weak doc"), 0.10)],
            ItemKind.CONVERSATION: [(_turn("may turn", index=1), 0.06), (_turn("faint turn", index=2), 0.02)],
        },
        beliefs=[],
    )
    assert _texts(_request(0.5), engine) == {"Brain": ["strong doc"], "History": ["may turn"]}

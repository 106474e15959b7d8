"""build_pack: gathering sections concurrently, overfetch, exclusions, beliefs, settle (reference §4.1)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta
from typing import Any, TypeVar

import pytest

from memory_core import (
    Conversation,
    Document,
    EngineError,
    InvalidRequest,
    ItemKind,
    Learning,
    MemoryEngine,
    MemoryMeta,
    MetaFilter,
    Namespace,
    Reach,
    Role,
    Turn,
    TurnRange,
)
from memory_core.consolidation import BeliefsRequest
from memory_core.descriptor import EngineDescriptor
from memory_core.engines.reference import ReferenceEngine
from memory_core.limits import BELIEF_TAG
from memory_core.query import (
    FetchMode,
    FetchPage,
    FetchRequest,
    Hit,
    ListPage,
    ListRequest,
    RecallAnswer,
    RecallRequest,
    TimeHint,
)
from memory_core.recall import (
    ContextPack,
    HolisticRecall,
    ScopeSection,
    Skipped,
    ThreadWindow,
    build_pack,
)
from memory_core.recall import pool as pool_module
from memory_core.recall.render import PACK_LABEL
from memory_core.settings import get_settings

T = TypeVar("T")
DOCS = MetaFilter.of_kinds([ItemKind.DOCUMENT])
CONVS = MetaFilter.of_kinds([ItemKind.CONVERSATION])
LEARNS = MetaFilter.of_kinds([ItemKind.LEARNING])
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Recording(ReferenceEngine):
    """A reference engine that records every request its hooks receive."""

    def __init__(self, modes: tuple[FetchMode, ...] = FetchMode.all()) -> None:
        super().__init__()
        self.modes = modes
        self.fetches: list[FetchRequest] = []
        self.lists: list[ListRequest] = []
        self.recalls: list[RecallRequest] = []
        self.belief_requests: list[BeliefsRequest] = []

    def descriptor(self) -> EngineDescriptor:
        return super().descriptor().model_copy(update={"fetch_modes": self.modes})

    def _fetch(self, request: FetchRequest) -> FetchPage:
        self.fetches.append(request)
        return super()._fetch(request)

    def _list(self, request: ListRequest) -> ListPage:
        self.lists.append(request)
        return super()._list(request)

    def _recall(self, request: RecallRequest) -> RecallAnswer:
        self.recalls.append(request)
        return super()._recall(request)

    def _beliefs(self, request: BeliefsRequest) -> list[Hit]:
        self.belief_requests.append(request)
        return super()._beliefs(request)


def turn(
    text: str, thread: str = "t", index: int | None = None, at: datetime | None = None, agent: str | None = None
) -> Conversation:
    turns = TurnRange(first=index, last=index) if index is not None else None
    meta = MemoryMeta(thread_id=thread, turns=turns, observed_at=at, agent_id=agent)
    return Conversation(turns=(Turn(role=Role.USER, text=text),), meta=meta)


def texts(pack: ContextPack, heading: str) -> list[str]:
    section = next(s for s in pack.sections if s.heading == heading)
    return [h.text for h in section.hits]


def pack_of(engine: MemoryEngine, *sections: ScopeSection, **fields: Any) -> ContextPack:
    return build_pack(engine, HolisticRecall(sections=tuple(sections), **fields))


# validation -------------------------------------------------------------------------------------------------
def section_json(**over: Any) -> dict[str, Any]:
    return {"heading": "S", "limit": 3, **over}


@pytest.mark.parametrize(
    ("request_json", "field"),
    [
        ({"sections": [section_json()], "budget_tokens": 0}, "budget_tokens"),
        ({"sections": [section_json()], "title": "  "}, "title"),
        ({"sections": [section_json(heading=" ")]}, "sections.0.heading"),
        ({"sections": [section_json(limit=0)]}, "sections.0.limit"),
        ({"sections": [section_json(max_scopes=0)]}, "sections.0.max_scopes"),
        ({"sections": [section_json(query={"by": "answer", "question": " "})]}, "sections.0.query"),
        (
            {"sections": [section_json(query={"by": "answer", "question": "q?"}, exclude_agent_id="a")]},
            "sections.0",
        ),
        ({"sections": [section_json()], "refers_to": {"from": "2026-02-02", "to": "2026-01-01"}}, "refers_to"),
    ],
)
def test_an_invalid_request_is_the_only_error(request_json, field):
    with pytest.raises(InvalidRequest) as info:
        build_pack(ReferenceEngine(), request_json)
    assert info.value.field is not None and info.value.field.startswith(field)


def test_a_request_of_the_wrong_shape_is_invalid():
    with pytest.raises(InvalidRequest):
        build_pack(ReferenceEngine(), ["not", "a", "request"])  # type: ignore[arg-type]


def test_a_process_pool_is_refused():
    pool = ProcessPoolExecutor(max_workers=1)
    try:
        with pytest.raises(InvalidRequest) as info:
            build_pack(ReferenceEngine(), {"sections": [section_json()]}, executor=pool)
        assert info.value.field == "executor"
    finally:
        pool.shutdown()


def test_a_json_request_builds_the_same_pack_as_the_model():
    engine = ReferenceEngine()
    engine.store(Document.of("Refunds take five business days."))
    model = HolisticRecall(query="refunds", sections=(ScopeSection.fetch("Docs", DOCS, 3),))
    assert build_pack(engine, model) == build_pack(engine, model.to_dict())


# failures and empties ---------------------------------------------------------------------------------------
class FailingDocs(ReferenceEngine):
    def _fetch(self, request: FetchRequest) -> FetchPage:
        if ItemKind.DOCUMENT in request.filter.kinds:
            raise EngineError("documents are down")
        return super()._fetch(request)


def test_a_failing_section_is_skipped_with_its_error_and_the_pack_returned():
    engine = FailingDocs()
    engine.store(Document.of("refund policy"))
    engine.store(Learning(text="refund requests go to billing"))
    pack = pack_of(
        engine, ScopeSection.fetch("Docs", DOCS, 3), ScopeSection.fetch("Learned", LEARNS, 3), query="refund"
    )
    assert pack.skipped == (Skipped(heading="Docs", reason="engine error: documents are down"),)
    assert pack.markdown == f"# Memory\n\n{PACK_LABEL}\n\n## Learned\n\n- refund requests go to billing\n"
    assert [s.heading for s in pack.sections] == ["Learned"]
    assert pack.engine == "reference"


def test_an_empty_section_is_skipped_as_empty():
    engine = ReferenceEngine()
    engine.store(Learning(text="refunds go to billing"))
    pack = pack_of(engine, ScopeSection.fetch("Docs", DOCS, 3), ScopeSection.latest("Learned", LEARNS, 3), query="x")
    assert pack.skipped == (Skipped(heading="Docs", reason="empty"),)
    assert texts(pack, "Learned") == ["refunds go to billing"]


def test_an_empty_engine_gives_an_empty_pack():
    pack = pack_of(ReferenceEngine(), ScopeSection.fetch("A", DOCS, 3), ScopeSection.latest("B", LEARNS, 3))
    assert pack.is_empty() and pack.tokens == 0 and pack.refs == ()
    assert [s.reason for s in pack.skipped] == ["empty", "empty"]


class NoDescriptor(ReferenceEngine):
    def descriptor(self) -> EngineDescriptor:
        raise EngineError("no descriptor")


def test_a_failing_descriptor_skips_every_section_instead_of_raising():
    pack = pack_of(NoDescriptor(), ScopeSection.fetch("A", DOCS, 3))
    assert pack.skipped == (Skipped(heading="A", reason="engine error: no descriptor"),)
    assert pack.is_empty()


# dedupe and exclusions --------------------------------------------------------------------------------------
def test_an_item_is_listed_once_in_its_first_section():
    engine = ReferenceEngine()
    engine.store(Document.of("alpha refund doc"))
    engine.store(Learning(text="alpha refund learning"))
    pack = pack_of(
        engine,
        ScopeSection.fetch("Docs", DOCS, 5),
        ScopeSection.fetch("Everything", MetaFilter(), 5),
        ScopeSection.fetch("Docs again", DOCS, 5),
        query="alpha refund",
    )
    assert texts(pack, "Docs") == ["alpha refund doc"]
    assert texts(pack, "Everything") == ["alpha refund learning"]
    assert Skipped(heading="Docs again", reason="empty") in pack.skipped
    assert pack.markdown.count("alpha refund doc") == 1


def test_sections_list_what_the_budget_left_in_the_markdown():
    engine = ReferenceEngine()
    for word in ("one", "two", "three"):
        engine.store(Document.of(f"refund policy {word}"))
    section = ScopeSection.fetch("Docs", DOCS, 3)
    full = pack_of(engine, section, query="refund policy")
    assert len(full.sections[0].hits) == 3
    trimmed = pack_of(engine, section, query="refund policy", budget_tokens=full.tokens - 2)
    (docs,) = trimmed.sections
    assert [h.id for h in docs.hits] == list(trimmed.refs) == list(full.refs[:2])
    assert all(f"- {h.text}" in trimmed.markdown for h in docs.hits)


def test_an_answer_section_lists_its_text_as_rendered():
    engine = ReferenceEngine()
    engine.store(Learning(text="refunds take five days " + "and need the receipt " * 6, confidence=0.7))
    engine.store(Document.of("refund policy doc"))
    sections = (
        ScopeSection.answer("Refunds", "how long do refunds take?", LEARNS, 3),
        ScopeSection.fetch("Docs", DOCS, 3),
    )
    full = pack_of(engine, *sections, query="refund policy")
    assert [s.heading for s in full.sections] == ["Refunds", "Docs"]
    pack = pack_of(engine, *sections, query="refund policy", budget_tokens=full.tokens - 12)
    (answer,) = pack.sections  # the Docs bullet went first, then the answer was shortened
    assert answer.answer is not None and answer.answer.endswith("…") and f"{answer.answer}\n" in pack.markdown
    assert [h.id for h in answer.hits] == list(pack.refs)


def test_an_answer_citing_an_item_does_not_hide_it():
    engine = ReferenceEngine()
    engine.store(Document.of("refunds take five days"))
    pack = pack_of(
        engine,
        ScopeSection.answer("Summary", "how long do refunds take?", DOCS, 3),
        ScopeSection.fetch("Docs", DOCS, 3),
    )
    assert pack.sections[0].answer is not None
    assert texts(pack, "Docs") == ["refunds take five days"]


def test_exclude_ids_drops_named_items_in_ranked_and_latest_sections():
    engine = ReferenceEngine()
    keep = engine.store(Document.of("refund doc kept")).id
    drop = engine.store(Document.of("refund doc dropped")).id
    for section in (ScopeSection.fetch("Docs", DOCS, 5), ScopeSection.latest("Docs", DOCS, 5)):
        pack = pack_of(engine, section, query="refund doc", exclude_ids=(drop,))
        assert pack.refs == (keep,)


def test_exclude_thread_drops_the_turns_still_in_the_prompt():
    engine = ReferenceEngine()
    for i in range(4):
        engine.store(turn(f"thread t turn {i}", index=i))
    engine.store(turn("thread t without turns"))
    engine.store(turn("thread u turn 5", thread="u", index=5))
    window = ThreadWindow(thread_id="t", from_turn=2)
    pack = pack_of(engine, ScopeSection.fetch("History", CONVS, 10), query="thread turn", exclude_thread=window)
    assert sorted(texts(pack, "History")) == ["user: thread t turn 0", "user: thread t turn 1", "user: thread u turn 5"]


def test_latest_drops_excluded_hits_before_the_cut():
    engine = ReferenceEngine()
    for i in range(6):  # turns 1..5 are newer and all inside the window; want is only 1 + 1 = 2
        engine.store(turn(f"turn {i}", index=i, at=T0 + timedelta(minutes=i)))
    window = ThreadWindow(thread_id="t", from_turn=1)
    pack = pack_of(engine, ScopeSection.latest("History", CONVS, 1), exclude_thread=window)
    assert texts(pack, "History") == ["user: turn 0"]


def test_exclude_agent_id_drops_that_agents_conversations():
    engine = ReferenceEngine()
    engine.store(turn("mine about refunds", agent="me"))
    engine.store(turn("theirs about refunds", agent="them"))
    section = ScopeSection(heading="Team", filter=CONVS, limit=5, exclude_agent_id="me")
    assert texts(pack_of(engine, section, query="refunds"), "Team") == ["user: theirs about refunds"]
    latest = section.model_copy(update={"query": ScopeSection.latest("x", CONVS, 1).query})
    assert texts(pack_of(engine, latest), "Team") == ["user: theirs about refunds"]


def test_hits_outside_the_section_kinds_are_dropped():
    class AllKinds(ReferenceEngine):
        def _fetch(self, request: FetchRequest) -> FetchPage:
            return super()._fetch(request.model_copy(update={"filter": MetaFilter()}))

    engine = AllKinds()
    engine.store(Document.of("refund doc"))
    engine.store(Learning(text="refund learning"))
    assert texts(pack_of(engine, ScopeSection.fetch("Docs", DOCS, 5), query="refund"), "Docs") == ["refund doc"]


# latest ordering --------------------------------------------------------------------------------------------
def test_latest_orders_newest_then_most_confident_then_latest_turn_undated_last():
    engine = ReferenceEngine()
    engine.store(Learning(text="undated high", confidence=0.9))
    engine.store(Learning(text="old", confidence=0.5, meta=MemoryMeta(observed_at=T0 - timedelta(days=30))))
    engine.store(turn("turn three", index=3, at=T0))
    engine.store(Learning(text="new low", confidence=0.1, meta=MemoryMeta(observed_at=T0)))
    engine.store(turn("turn five", index=5, at=T0))
    engine.store(Learning(text="new high", confidence=0.9, meta=MemoryMeta(observed_at=T0)))
    engine.store(Learning(text="undated low a", confidence=0.2))
    engine.store(Learning(text="undated low b", confidence=0.2))
    pack = pack_of(engine, ScopeSection.latest("Latest", MetaFilter(), 20))
    assert texts(pack, "Latest") == [
        "new high",
        "new low",
        "user: turn five",
        "user: turn three",
        "old",
        "undated high",
        "undated low a",
        "undated low b",
    ]


def test_latest_pages_the_listing_by_100():
    engine = Recording()
    engine.store_many([Learning(text=f"learning {i}") for i in range(100)])
    engine.store_many([Learning(text=f"learning {i}") for i in range(100, 150)])
    pack = pack_of(engine, ScopeSection.latest("L", LEARNS, 5))
    assert [r.limit for r in engine.lists] == [100, 100]
    assert engine.lists[1].cursor == "100"
    assert len(texts(pack, "L")) == 5


def test_fetch_without_any_query_reads_latest():
    engine = Recording()
    engine.store(Document.of("older", meta=MemoryMeta(observed_at=T0)))
    engine.store(Document.of("newer", meta=MemoryMeta(observed_at=T0 + timedelta(hours=1))))
    for query in (None, "   "):
        pack = pack_of(engine, ScopeSection.fetch("Docs", DOCS, 5, query=query), query=query)
        assert texts(pack, "Docs") == ["newer", "older"]
    assert engine.fetches == []


def test_an_engine_without_fetch_modes_reads_latest():
    engine = Recording(modes=())
    engine.store(Document.of("refund doc"))
    assert texts(pack_of(engine, ScopeSection.fetch("Docs", DOCS, 5), query="refund"), "Docs") == ["refund doc"]
    assert engine.fetches == [] and engine.lists


@pytest.mark.parametrize(
    ("modes", "expected"),
    [
        (FetchMode.all(), FetchMode.HYBRID),
        ((FetchMode.VECTOR, FetchMode.KEYWORD), FetchMode.VECTOR),
        ((FetchMode.KEYWORD,), FetchMode.KEYWORD),
    ],
)
def test_fetch_mode_is_hybrid_when_served_else_the_first_declared(modes, expected):
    engine = Recording(modes=modes)
    pack_of(engine, ScopeSection.fetch("Docs", DOCS, 5), query="refund")
    assert [r.mode for r in engine.fetches] == [expected]


def test_the_section_query_wins_over_the_packs():
    engine = Recording()
    pack_of(engine, ScopeSection.fetch("A", DOCS, 2, query="own"), ScopeSection.fetch("B", CONVS, 2), query="pack")
    assert {r.filter.kinds[0]: r.query for r in engine.fetches} == {
        ItemKind.DOCUMENT: "own",
        ItemKind.CONVERSATION: "pack",
    }


def test_fetch_requests_carry_the_overfetch_filter_beliefs_scopes_and_hint():
    engine = Recording()
    hint = TimeHint(from_=date(2026, 3, 1), to=date(2026, 3, 2))
    brain = ScopeSection(heading="Brain", filter=DOCS, limit=2, max_scopes=4)
    pack_of(
        engine,
        brain,
        ScopeSection.fetch("History", CONVS, 3),
        ScopeSection.fetch("Learnings", LEARNS, 4),
        query="q",
        exclude_ids=("x1", "x2"),
        exclude_thread=ThreadWindow(thread_id="t", from_turn=0),
        refers_to=hint,
    )
    by_kind = {r.filter.kinds[0]: r for r in engine.fetches}
    # want = limit + len(exclude_ids) + limit (thread window) + earlier limits
    assert by_kind[ItemKind.DOCUMENT].limit == 2 + 2 + 2 + 0
    assert by_kind[ItemKind.CONVERSATION].limit == 3 + 2 + 3 + 2
    assert by_kind[ItemKind.LEARNING].limit == 4 + 2 + 4 + 5
    assert {r.beliefs for r in engine.fetches} == {15}  # the first learnings section's want
    assert by_kind[ItemKind.DOCUMENT].max_scopes == 4 and by_kind[ItemKind.CONVERSATION].max_scopes is None
    assert all(r.refers_to == hint for r in engine.fetches)
    assert by_kind[ItemKind.DOCUMENT].filter == DOCS


def test_without_a_learnings_section_fetches_ask_for_no_beliefs():
    engine = Recording()
    pack_of(engine, ScopeSection.fetch("Docs", DOCS, 2), ScopeSection.fetch("History", CONVS, 3), query="q")
    assert [r.beliefs for r in engine.fetches] == [0, 0]


# answers ----------------------------------------------------------------------------------------------------
def test_an_answer_becomes_prose_and_its_citations_hits():
    engine = Recording()
    learning_id = engine.store(Learning(text="refunds take five days", confidence=0.7)).id
    section = ScopeSection.answer("Refunds", "how long do refunds take?", LEARNS, 3, instructions="be brief")
    pack = pack_of(engine, section)
    (recall,) = engine.recalls
    assert (recall.question, recall.limit, recall.instructions, recall.filter) == (
        "how long do refunds take?",
        3,
        "be brief",
        LEARNS,
    )
    (shown,) = pack.sections
    assert shown.answer == "From 1 stored items: refunds take five days"
    (hit,) = shown.hits
    assert hit.id == learning_id and hit.confidence is None and hit.score > 0
    assert pack.markdown == f"# Memory\n\n{PACK_LABEL}\n\n## Refunds\n\nFrom 1 stored items: refunds take five days\n"
    assert pack.refs == (learning_id,)


def test_an_answer_citing_nothing_is_empty():
    pack = pack_of(Recording(), ScopeSection.answer("A", "anything?", MetaFilter(), 3))
    assert pack.skipped == (Skipped(heading="A", reason="empty"),)


class BlankAnswer(ReferenceEngine):
    def _recall(self, request: RecallRequest) -> RecallAnswer:
        answer = super()._recall(request)
        return answer.model_copy(update={"answer": "   "})


def test_a_blank_answer_with_citations_is_empty():
    engine = BlankAnswer()
    engine.store(Document.of("refunds take five days"))
    pack = pack_of(engine, ScopeSection.answer("A", "refunds?", MetaFilter(), 3))
    assert pack.skipped == (Skipped(heading="A", reason="empty"),)


class NoRecall(Recording):
    def _recall(self, request: RecallRequest) -> RecallAnswer:
        raise EngineError("no model")


def test_a_failed_answer_falls_back_to_fetching_for_the_question():
    engine = NoRecall()
    engine.store(Learning(text="refunds take five days"))
    section = ScopeSection.answer("A", "refunds days", LEARNS, 3, fallback_to_fetch=True)
    pack = pack_of(engine, section, ScopeSection.fetch("L", LEARNS, 3), query="other")
    question_fetch = next(r for r in engine.fetches if r.query == "refunds days")
    assert question_fetch.beliefs == 0 and question_fetch.limit == 3
    assert pack.markdown.startswith(f"# Memory\n\n{PACK_LABEL}\n\n## A\n\n- refunds take five days\n")
    assert pack.sections[0].answer is None


def test_a_failed_answer_without_fallback_is_skipped_with_the_error():
    engine = NoRecall()
    engine.store(Learning(text="refunds take five days"))
    pack = pack_of(engine, ScopeSection.answer("A", "refunds?", LEARNS, 3))
    assert pack.skipped == (Skipped(heading="A", reason="engine error: no model"),)


# beliefs ----------------------------------------------------------------------------------------------------
def belief(text: str, at: Namespace | str = "root") -> Hit:
    ns = at if isinstance(at, Namespace) else Namespace.parse(at)
    return Hit.of(Learning(text=text, confidence=0.6, meta=MemoryMeta(namespace=ns, tags=(BELIEF_TAG,))))


class Believing(Recording):
    """Beliefs kept apart from stored items: listed by ``beliefs()`` and returned beside fetches."""

    def __init__(
        self,
        listed: Sequence[Hit] = (),
        by_kind: dict[ItemKind | None, list[Hit]] | None = None,
        fail_beliefs: bool = False,
    ) -> None:
        super().__init__()
        self.listed = list(listed)
        self.by_kind = by_kind or {}
        self.fail_beliefs = fail_beliefs

    def _beliefs(self, request: BeliefsRequest) -> list[Hit]:
        super()._beliefs(request)
        if self.fail_beliefs:
            raise EngineError("beliefs offline")
        return [b for b in self.listed if request.reach.admits(b.meta.namespace)][: request.limit]

    def _fetch(self, request: FetchRequest) -> FetchPage:
        page = super()._fetch(request)
        extra = self.by_kind.get(request.filter.kinds[0] if request.filter.kinds else None, [])
        return page.model_copy(update={"beliefs": tuple(extra[: request.beliefs])})


def store_dated_learnings(engine: MemoryEngine, n: int) -> None:
    for i in range(n):
        engine.store(Learning(text=f"stored {i}", meta=MemoryMeta(observed_at=T0 - timedelta(days=i))))


def test_latest_learnings_interleave_stored_and_listed_beliefs_stored_first():
    engine = Believing(listed=[belief("belief a"), belief("belief b")])
    store_dated_learnings(engine, 3)
    pack = pack_of(engine, ScopeSection.latest("Learnings", LEARNS, 10))
    assert texts(pack, "Learnings") == ["stored 0", "belief a", "stored 1", "belief b", "stored 2"]
    (request,) = engine.belief_requests
    assert request.reach == Reach.subtree() and request.limit == 10 and request.query is None


def test_latest_learnings_list_beliefs_within_the_section_reach():
    engine = Believing(listed=[belief("team belief", "team:a"), belief("root belief")])
    engine.store(Learning(text="team stored", meta=MemoryMeta(namespace=Namespace.parse("team:a"))))
    flt = LEARNS.narrowed(reach=Reach.subtree("team:a"))
    pack = pack_of(engine, ScopeSection.latest("Learnings", flt, 5))
    assert texts(pack, "Learnings") == ["team stored", "team belief"]
    assert engine.belief_requests[0].reach == Reach.subtree("team:a")


def test_beliefs_from_every_fetch_merge_rank_by_rank_once_each():
    b1, b2, b3 = belief("b one"), belief("b two"), belief("b three")
    engine = Believing(by_kind={ItemKind.LEARNING: [b1, b2], ItemKind.DOCUMENT: [b3, b1]})
    engine.store(Learning(text="refund stored learning"))
    engine.store(Document.of("refund doc"))
    pack = pack_of(
        engine, ScopeSection.fetch("Learnings", LEARNS, 10), ScopeSection.fetch("Docs", DOCS, 10), query="refund"
    )
    assert texts(pack, "Learnings") == ["refund stored learning", "b one", "b three", "b two"]
    assert texts(pack, "Docs") == ["refund doc"]


def test_a_learnings_section_keeps_only_the_beliefs_its_filter_admits():
    outside = belief("agent belief", "agent:x")
    engine = Believing(by_kind={ItemKind.DOCUMENT: [outside, belief("root belief")]})
    engine.store(Learning(text="refund stored learning"))
    flt = LEARNS.narrowed(reach=Reach.exact("root"))
    pack = pack_of(
        engine, ScopeSection.fetch("Learnings", flt, 10), ScopeSection.fetch("Docs", DOCS, 10), query="refund"
    )
    assert texts(pack, "Learnings") == ["refund stored learning", "root belief"]


def test_a_failed_belief_read_leaves_the_stored_learnings():
    engine = Believing(fail_beliefs=True)
    store_dated_learnings(engine, 2)
    pack = pack_of(engine, ScopeSection.latest("Learnings", LEARNS, 10))
    assert texts(pack, "Learnings") == ["stored 0", "stored 1"]
    assert pack.skipped == ()


def test_beliefs_alone_fill_a_learnings_section():
    engine = Believing(listed=[belief("only belief")])
    pack = pack_of(engine, ScopeSection.latest("Learnings", LEARNS, 10))
    assert pack.markdown == f"# Memory\n\n{PACK_LABEL}\n\n## Learnings\n\n- only belief\n"


def test_non_learnings_and_answer_sections_get_no_beliefs():
    engine = Believing(listed=[belief("a belief")], by_kind={ItemKind.DOCUMENT: [belief("fetched belief")]})
    engine.store(Document.of("refund doc"))
    pack = pack_of(
        engine,
        ScopeSection.latest("Docs", DOCS, 5),
        ScopeSection.answer("Answer", "refund?", MetaFilter(), 5),
    )
    assert engine.belief_requests == []
    assert texts(pack, "Docs") == ["refund doc"]
    assert all(BELIEF_TAG not in h.meta.tags for s in pack.sections for h in s.hits)


def test_beliefs_already_shown_are_not_repeated_in_a_later_learnings_section():
    engine = Believing(listed=[belief("shared belief")])
    pack = pack_of(engine, ScopeSection.latest("First", LEARNS, 5), ScopeSection.latest("Second", LEARNS, 5))
    assert texts(pack, "First") == ["shared belief"]
    assert Skipped(heading="Second", reason="empty") in pack.skipped


# concurrency ------------------------------------------------------------------------------------------------
class Rendezvous(ReferenceEngine):
    """Every fetch (and list/beliefs when asked) waits at a barrier keyed by the query: all must run at once."""

    def __init__(self, parties: int, on_list: bool = False) -> None:
        super().__init__()
        self.parties = parties
        self.on_list = on_list
        self._barriers: dict[str, threading.Barrier] = {}
        self._guard = threading.Lock()

    def meet(self, key: str) -> None:
        with self._guard:
            barrier = self._barriers.setdefault(key, threading.Barrier(self.parties, timeout=30))
        barrier.wait()

    def _fetch(self, request: FetchRequest) -> FetchPage:
        self.meet(request.query)
        return super()._fetch(request)

    def _list(self, request: ListRequest) -> ListPage:
        if self.on_list:
            self.meet("list")
        return super()._list(request)

    def _beliefs(self, request: BeliefsRequest) -> list[Hit]:
        if self.on_list:
            self.meet("list")
        return []


def concurrent_sections(query: str, n: int = 3) -> HolisticRecall:
    flt = [DOCS, CONVS, LEARNS, MetaFilter()]
    return HolisticRecall(query=query, sections=tuple(ScopeSection.fetch(f"S{i}", flt[i], 5) for i in range(n)))


def test_sections_are_read_at_the_same_time():
    engine = Rendezvous(parties=3)
    engine.store(Document.of("refund doc"))
    pack = build_pack(engine, concurrent_sections("refund"))
    assert [(s.heading, s.reason) for s in pack.skipped] == [("S1", "empty"), ("S2", "empty")]
    assert texts(pack, "S0") == ["refund doc"]


def test_a_latest_learnings_listing_and_its_beliefs_run_at_the_same_time():
    engine = Rendezvous(parties=2, on_list=True)
    engine.store(Learning(text="stored learning"))
    pack = pack_of(engine, ScopeSection.latest("Learnings", LEARNS, 5))
    assert texts(pack, "Learnings") == ["stored learning"]


class Together(ReferenceEngine):
    """An engine that ranks several fetches in one read (as SQLite's ``fetch_together``), recording its threads.

    With ``parties`` it and every listing wait at one barrier: they must all run at once.
    """

    def __init__(self, parties: int = 0) -> None:
        super().__init__()
        self.together: list[tuple[str, int]] = []
        self.alone: list[str] = []
        self._barrier = threading.Barrier(parties, timeout=30) if parties else None

    def fetch_together(self, requests: Sequence[FetchRequest]) -> list[FetchPage | Exception]:
        self.together.append((threading.current_thread().name, len(requests)))
        if self._barrier is not None:
            self._barrier.wait()
        return [super(Together, self)._fetch(r) for r in requests]

    def _fetch(self, request: FetchRequest) -> FetchPage:
        self.alone.append(threading.current_thread().name)
        return super()._fetch(request)

    def _list(self, request: ListRequest) -> ListPage:
        if self._barrier is not None:
            self._barrier.wait()
        return super()._list(request)


def test_by_default_an_engines_one_read_of_the_fetch_sections_runs_on_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = Together()
    engine.store(Document.of("refund doc"))
    inline = build_pack(engine, concurrent_sections("refund"))
    assert engine.together == [(threading.current_thread().name, 3)] and engine.alone == []
    engine.together.clear()
    monkeypatch.setenv("MEMORY_CORE_READ_POOL", "1")  # every section on its own, on the shared pool
    get_settings.cache_clear()
    pooled = build_pack(engine, concurrent_sections("refund"))
    assert engine.together == [] and len(engine.alone) == 3
    assert pooled.markdown == inline.markdown and texts(inline, "S0") == ["refund doc"]


def test_the_other_reads_of_a_pack_run_beside_the_one_read_on_the_caller() -> None:
    engine = Together(parties=2)  # the one read and the Latest listing must meet: they run at once
    engine.store(Document.of("refund doc"))
    engine.store(Learning(text="stored learning"))
    sections = (ScopeSection.fetch("S0", DOCS, 5), ScopeSection.fetch("S1", CONVS, 5))
    request = HolisticRecall(query="refund", sections=(*sections, ScopeSection.latest("L", LEARNS, 5)))
    pack = build_pack(engine, request)
    assert engine.together == [(threading.current_thread().name, 2)]
    assert texts(pack, "S0") == ["refund doc"] and texts(pack, "L") == ["stored learning"]


class CountingExecutor(ThreadPoolExecutor):
    def __init__(self) -> None:
        super().__init__(max_workers=4)
        self.futures: list[Future[Any]] = []

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future = super().submit(fn, *args, **kwargs)
        self.futures.append(future)
        return future


def test_a_given_executor_is_used_and_every_read_is_done_on_return():
    engine = Rendezvous(parties=3)
    with CountingExecutor() as pool:
        pack = build_pack(engine, concurrent_sections("q"), executor=pool)
        assert len(pool.futures) == 3
        assert all(f.done() for f in pool.futures)
    assert all(s.reason == "empty" for s in pack.skipped)


def test_a_shut_down_executor_still_gives_a_pack():
    engine = ReferenceEngine()
    engine.store(Document.of("refund doc"))
    pool = ThreadPoolExecutor(max_workers=2)
    pool.shutdown()
    pack = build_pack(engine, concurrent_sections("refund", n=2), executor=pool)
    assert texts(pack, "S0") == ["refund doc"]


def test_a_pack_built_on_a_thread_of_its_own_one_worker_executor_does_not_wait_on_itself():
    engine = ReferenceEngine()
    engine.store(Document.of("refund doc"))
    with ThreadPoolExecutor(max_workers=1) as pool:
        outer = pool.submit(build_pack, engine, concurrent_sections("refund", n=3), executor=pool)
        pack = outer.result(timeout=60)  # a guard against a hang, not a timing assertion
    assert texts(pack, "S0") == ["refund doc"]  # listed once, in the first section; the others read it too


def test_packs_built_inside_the_shared_pool_do_not_starve_it():
    engine = Rendezvous(parties=3)
    engine.store(Document.of("refund doc"))
    requests = [concurrent_sections(f"refund {i}") for i in range(pool_module.RECALL_WORKERS)]
    outer = [pool_module.shared_pool().submit(build_pack, engine, r) for r in requests]
    packs = [f.result(timeout=120) for f in outer]  # a guard against a hang, not a timing assertion
    assert all(texts(p, "S0") == ["refund doc"] for p in packs)
    assert all(s.reason == "empty" for p in packs for s in p.skipped)


class Mute(ReferenceEngine):
    def _list(self, request: ListRequest) -> ListPage:
        raise RuntimeError()


def test_an_error_without_text_is_reported_by_its_class_name():
    pack = pack_of(Mute(), ScopeSection.latest("L", LEARNS, 3))
    assert pack.skipped == (Skipped(heading="L", reason="RuntimeError"),)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_reads_on_a_fresh_pool():
    engine = ReferenceEngine()
    engine.store(Document.of("refund doc"))
    request = concurrent_sections("refund")
    assert texts(build_pack(engine, request), "S0") == ["refund doc"]
    everyone = threading.Barrier(pool_module.RECALL_WORKERS, timeout=30)  # start every thread of the pool
    for future in [pool_module.shared_pool().submit(everyone.wait) for _ in range(pool_module.RECALL_WORKERS)]:
        future.result()
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only when its pack is whole
        signal.alarm(60)  # a guard: a child stuck on the parent's dead pool threads is killed, failing the test
        try:
            pack = build_pack(engine, request)
            os._exit(0 if texts(pack, "S0") == ["refund doc"] else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0

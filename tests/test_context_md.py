"""context.md: the holistic-recall preset with frontmatter (reference §4.2)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from memory_core import (
    Citation,
    Document,
    EngineError,
    InvalidRequest,
    ItemKind,
    Learning,
    MemoryMeta,
    MetaFilter,
    Namespace,
    Reach,
    Role,
)
from memory_core.engines.reference import ReferenceEngine
from memory_core.items import Conversation, Turn
from memory_core.query import ListPage, ListRequest, RecallAnswer, RecallRequest
from memory_core.recall import (
    BRIEF_INSTRUCTIONS,
    AnswerQuery,
    Brief,
    ContextSpec,
    LatestQuery,
    compile_context,
    context_recall,
    estimate_tokens,
)

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
HEADINGS = ["About the user", "Active work", "Preferences and standing instructions", "Recent important events"]


def test_spec_defaults():
    spec = ContextSpec()
    assert spec.budget_tokens == 1500 and spec.learnings_limit == 20 and spec.reach is None
    assert [b.heading for b in spec.briefs] == HEADINGS
    assert spec.briefs == Brief.defaults()
    assert all(b.question.strip() and b.filter == MetaFilter() for b in spec.briefs)


def test_the_preset_is_one_answer_per_brief_then_latest_learnings():
    request = context_recall(ContextSpec())
    assert request.title == "Context" and request.budget_tokens == 1500 and request.query is None
    *briefs, learnings = request.sections
    assert [s.heading for s in briefs] == HEADINGS
    for section, brief in zip(briefs, Brief.defaults(), strict=True):
        assert section.limit == 8 and section.filter == brief.filter
        assert section.query == AnswerQuery(question=brief.question, instructions=BRIEF_INSTRUCTIONS)
    assert learnings.heading == "Learnings" and learnings.limit == 20
    assert isinstance(learnings.query, LatestQuery)
    assert learnings.filter == MetaFilter(kinds=(ItemKind.LEARNING,))


def test_the_spec_reach_overrides_every_brief_filter_and_bounds_the_learnings():
    reach = Reach.of("agent:a")
    brief = Brief(heading="Docs", question="what docs?", filter=MetaFilter(kinds=(ItemKind.DOCUMENT,)))
    request = context_recall(ContextSpec(briefs=(brief,), reach=reach))
    assert [s.filter for s in request.sections] == [
        MetaFilter(kinds=(ItemKind.DOCUMENT,), reach=reach),
        MetaFilter(kinds=(ItemKind.LEARNING,), reach=reach),
    ]


def test_a_zero_learnings_limit_leaves_the_learnings_out():
    request = context_recall(ContextSpec(learnings_limit=0))
    assert [s.heading for s in request.sections] == HEADINGS


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"budget_tokens": 0}, "budget_tokens"),
        ({"briefs": [{"heading": " ", "question": "q?"}]}, "briefs.0.heading"),
        ({"briefs": [{"heading": "H", "question": ""}]}, "briefs.0.question"),
        ({"learnings_limit": -1}, "learnings_limit"),
        ({"learnings_limit": 201}, "learnings_limit"),
    ],
)
def test_an_invalid_spec_is_invalid_request(spec, field):
    engine = ReferenceEngine()
    engine.store(Learning(text="kept"))
    with pytest.raises(InvalidRequest) as info:
        compile_context(engine, spec, at=AT)
    assert info.value.field == field


def test_an_empty_engine_gives_an_empty_document():
    doc = compile_context(ReferenceEngine(), at=AT)
    assert (doc.markdown, doc.tokens, doc.refs) == ("", 0, ())
    assert doc.engine == "reference" and doc.generated_at == AT


class FixedAnswers(ReferenceEngine):
    """Answers only the first default brief, citing every stored learning."""

    def _recall(self, request: RecallRequest) -> RecallAnswer:
        if request.question != Brief.defaults()[0].question:
            return RecallAnswer(answer="Nothing stored answers this question.")
        hits = self.list(ListRequest(filter=MetaFilter(kinds=(ItemKind.LEARNING,)))).items
        citations = tuple(Citation(id=h.id, kind=h.kind, snippet=h.text, meta=h.meta) for h in hits)
        return RecallAnswer(answer="  - Dana: backend engineer\n", citations=citations)


def test_the_document_is_exact():
    engine = FixedAnswers()
    learning_id = engine.store(Learning(text="Dana is a backend engineer")).id
    doc = compile_context(engine, at=AT)
    assert doc.markdown == (
        "---\n"
        "generated_at: 2026-01-02T03:04:05Z\n"
        "engine: reference\n"
        "tokens: 56\n"
        f"refs: [{learning_id}]\n"
        "---\n"
        "\n"
        "# Context\n"
        "\n"
        "## About the user\n"
        "\n"
        "- Dana: backend engineer\n"
        "\n"
        "## Learnings\n"
        "\n"
        "- Dana is a backend engineer\n"
    )
    assert doc.tokens == 56 == estimate_tokens(doc.markdown)
    assert doc.refs == (learning_id,)


def seeded() -> ReferenceEngine:
    engine = ReferenceEngine()
    engine.store(
        Learning(text="The user is Dana, a backend engineer who likes short answers.", meta=MemoryMeta(observed_at=AT))
    )
    engine.store(
        Learning(
            text="Dana works on the billing-service repository.",
            confidence=0.9,
            meta=MemoryMeta(observed_at=AT - timedelta(days=1)),
        )
    )
    engine.store(Learning(text="Always answer Dana in English.", confidence=0.6))
    engine.store(Document.of("The billing service runs on Postgres 16.", title="Billing service"))
    engine.store(Conversation(turns=(Turn(role=Role.USER, text="We shipped the refund feature yesterday."),)))
    return engine


def test_compiling_on_the_reference_engine_is_reproducible():
    engine = seeded()
    doc = compile_context(engine, at=AT)
    assert doc == compile_context(engine, at=AT)
    head, body = doc.markdown.split("\n---\n\n", 1)
    assert head.splitlines() == [
        "---",
        "generated_at: 2026-01-02T03:04:05Z",
        "engine: reference",
        f"tokens: {doc.tokens}",
        f"refs: [{', '.join(doc.refs)}]",
    ]
    assert doc.tokens == estimate_tokens(doc.markdown) <= 1500
    assert body.startswith("# Context\n\n## ")
    headings = [line[3:] for line in body.splitlines() if line.startswith("## ")]
    assert headings[-1] == "Learnings" and headings[:-1] == [h for h in HEADINGS if h in headings]
    learnings = body.split("## Learnings\n\n", 1)[1].splitlines()
    assert learnings == [
        "- The user is Dana, a backend engineer who likes short answers.",
        "- Dana works on the billing-service repository.",
        "- Always answer Dana in English.",
    ]


def test_another_timestamp_changes_only_the_generated_at_line():
    engine = seeded()
    first = compile_context(engine, at=AT)
    later = compile_context(engine, at=AT + timedelta(days=400))
    assert later.markdown == first.markdown.replace("2026-01-02T03:04:05Z", "2027-02-06T03:04:05Z")


def test_at_is_read_in_utc_to_whole_seconds():
    local = datetime(2026, 1, 2, 8, 34, 5, 999_999, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    doc = compile_context(seeded(), at=local)
    assert doc.generated_at == AT
    assert "\ngenerated_at: 2026-01-02T03:04:05Z\n" in doc.markdown


def test_without_at_the_stamp_is_the_current_whole_second():
    doc = compile_context(seeded())
    assert doc.generated_at.microsecond == 0 and doc.generated_at.utcoffset() == timedelta(0)


def test_a_tight_budget_trims_learnings_before_briefs():
    engine = FixedAnswers()
    for i in range(5):
        engine.store(Learning(text=f"learning number {i}", meta=MemoryMeta(observed_at=AT - timedelta(hours=i))))
    full = compile_context(engine, at=AT)
    trimmed = compile_context(engine, {"budget_tokens": full.tokens - 10}, at=AT)
    assert trimmed.tokens <= full.tokens - 10
    assert "## About the user\n\n- Dana: backend engineer\n" in trimmed.markdown
    assert "- learning number 0\n" in trimmed.markdown and "- learning number 4\n" not in trimmed.markdown


class NoRecall(ReferenceEngine):
    def _recall(self, request: RecallRequest) -> RecallAnswer:
        raise EngineError("no model")


def test_failed_briefs_are_left_out_and_the_learnings_remain():
    engine = NoRecall()
    engine.store(Learning(text="kept learning"))
    doc = compile_context(engine, at=AT)
    assert doc.markdown.endswith("---\n\n# Context\n\n## Learnings\n\n- kept learning\n")


class NoListing(FixedAnswers):
    def _list(self, request: ListRequest) -> ListPage:
        if request.filter.reach is None and request.filter.kinds == (ItemKind.LEARNING,) and request.limit == 100:
            raise EngineError("listing down")
        return super()._list(request)


def test_a_failed_learnings_listing_leaves_the_learnings_out():
    engine = NoListing()
    engine.store(Learning(text="Dana is a backend engineer"))
    doc = compile_context(engine, at=AT)
    assert "## About the user" in doc.markdown and "## Learnings" not in doc.markdown


def test_the_reach_keeps_other_agents_learnings_out():
    engine = ReferenceEngine()
    engine.store(Learning(text="agent a learned this", meta=MemoryMeta(namespace=Namespace.parse("agent:a"))))
    engine.store(Learning(text="agent b learned that", meta=MemoryMeta(namespace=Namespace.parse("agent:b"))))
    doc = compile_context(engine, {"reach": {"at": "agent:a"}, "briefs": []}, at=AT)
    assert "- agent a learned this\n" in doc.markdown and "agent b" not in doc.markdown

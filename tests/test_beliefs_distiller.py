"""The pure distiller: dates, third person, extraction rules, merging, supersession and retraction."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from memory_core import Conversation, Document, Learning, MemoryMeta, Namespace, ObservedActor, Role, Turn
from memory_core.beliefs import (
    Belief,
    BeliefStatus,
    SourceItem,
    confidence_for,
    extract,
    lookup,
    merge,
    resolve,
    retract,
    speaker_name,
)
from memory_core.beliefs.text import third_person

MAY_8 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)  # a Monday


def turn(
    text: str, *, at: datetime = MAY_8, name: str = "Caroline", role: Role = Role.USER, **meta: object
) -> Conversation:
    return Conversation(
        turns=(Turn(role=role, text=text),),
        meta=MemoryMeta(
            namespace=Namespace.agent(name.lower()),
            agent_id=name.lower(),
            observed_at=at,
            observed_actor=ObservedActor(id=f"user:{name.lower()}", name=name),
            **meta,
        ),
    )


def sources(*items: Conversation | Document | Learning, start: int = 1) -> list[SourceItem]:
    return [SourceItem(seq=start + i, id=item.id, item=item) for i, item in enumerate(items)]


def texts(*items: Conversation | Document | Learning) -> list[str]:
    return [s.text for s in extract(sources(*items))]


@pytest.mark.parametrize(
    ("phrase", "written", "day"),
    [
        ("yesterday", "on 7 May 2023", date(2023, 5, 7)),
        ("today", "on 8 May 2023", date(2023, 5, 8)),
        ("tomorrow", "on 9 May 2023", date(2023, 5, 9)),
        ("last week", "the week before 8 May 2023", date(2023, 5, 1)),
        ("next month", "in June 2023", date(2023, 6, 1)),
        ("last year", "in 2022", date(2022, 1, 1)),
        ("last Saturday", "on Saturday, 6 May 2023", date(2023, 5, 6)),
        ("two days ago", "two days before 8 May 2023", date(2023, 5, 6)),
        ("last weekend", "the weekend of 6 May 2023", date(2023, 5, 6)),
    ],
)
def test_relative_dates_resolve_against_the_day_said(phrase: str, written: str, day: date) -> None:
    text, found = resolve(f"I went hiking {phrase} with friends", MAY_8.date())
    assert text == f"I went hiking {written} with friends"
    assert found == day


def test_no_reference_day_resolves_nothing() -> None:
    assert resolve("I went yesterday", None) == ("I went yesterday", None)


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("I love painting", "Ann loves painting"),
        ("I'm a teacher and my class is great", "Ann is a teacher and Ann's class is great"),
        ("I went to the park", "Ann went to the park"),
        ("I just finished a marathon", "Ann just finished a marathon"),
        ("My sister visited me", "Ann's sister visited Ann"),
        ("I've been busy", "Ann has been busy"),
    ],
)
def test_first_person_reads_in_the_third_person(sentence: str, expected: str) -> None:
    assert third_person(sentence, "Ann") == expected


def test_speaker_is_the_observed_actor_else_the_agent() -> None:
    assert speaker_name(turn("x").meta) == "Caroline"
    assert speaker_name(MemoryMeta(agent_id="mel")) == "Mel"
    assert speaker_name(MemoryMeta()) == "The user"


def test_conversation_statements_are_first_person_facts_with_dates() -> None:
    got = texts(turn("I went to a LGBTQ support group yesterday and it was so powerful."))
    assert got == ["Caroline went to a LGBTQ support group on 7 May 2023 and it was so powerful."]


def test_undated_statements_keep_the_day_they_were_said() -> None:
    assert texts(turn("My favorite color is teal.")) == ["Caroline's favorite color is teal (said 8 May 2023)."]


@pytest.mark.parametrize(
    "text",
    [
        "Did you go to the park yesterday?",  # a question
        "Thanks so much, I'm so happy for you!",  # a reaction
        "You did a wonderful painting of the lake.",  # about the other person
        "The weather is nice.",  # not first person
    ],
)
def test_questions_reactions_and_other_people_are_not_statements(text: str) -> None:
    assert texts(turn(text)) == []


def test_assistant_turns_learnings_and_derive_false_items_give_nothing() -> None:
    assert texts(turn("I love hiking in the mountains.", role=Role.ASSISTANT)) == []
    assert texts(Learning(text="I love hiking in the mountains.")) == []
    assert texts(turn("I love hiking in the mountains.", derive=False)) == []


def test_documents_give_their_title_and_key_sentences() -> None:
    body = (
        "Title: Refund Policy\n\nIntroduction\n============\n\n"
        "Refunds are paid to the original payment method within five business days. "
        "Store credit is offered when the original payment method has expired.\n\n"
        "Details\n=======\n\n::\n\n    refund(order_id)  # code is skipped\n\n"
        "Refund requests must include the order number and the reason for the return.\n"
    )
    got = texts(Document.of(body, MemoryMeta(file_path="/docs/refunds.rst")))
    assert got[0] == "Document: Refund Policy."
    assert "Refund Policy: Refunds are paid to the original payment method within five business days." in got
    assert not any("refund(order_id)" in t for t in got)


def test_a_repeated_statement_raises_confidence_and_keeps_every_source() -> None:
    a = turn("I adopted a rescue dog named Max last week.")
    b = turn("I adopted a rescue dog named Max last week!", at=MAY_8)
    (belief,) = merge(extract(sources(a, b)), [])
    assert belief.evidence == (a.id, b.id)
    assert belief.confidence == confidence_for(belief.base_confidence, 2) > belief.base_confidence


def test_a_newer_value_supersedes_the_older_which_is_kept() -> None:
    old = turn("My favorite color is blue.")
    new = turn("My favorite color is green now.", at=datetime(2023, 6, 1, tzinfo=UTC))
    beliefs = {b.text: b.status for b in merge(extract(sources(old, new)), [])}
    assert beliefs == {
        "Caroline's favorite color is blue (said 8 May 2023).": BeliefStatus.SUPERSEDED,
        "Caroline's favorite color is green now (said 1 June 2023).": BeliefStatus.ACTIVE,
    }


def test_a_late_arriving_older_value_does_not_supersede_the_newer() -> None:
    new = turn("My favorite color is green.", at=datetime(2023, 6, 1, tzinfo=UTC))
    old = turn("My favorite color is blue.")
    active = [b.text for b in merge(extract(sources(new, old)), []) if b.status is BeliefStatus.ACTIVE]
    assert active == ["Caroline's favorite color is green (said 1 June 2023)."]


def _conversation() -> list[Conversation]:
    lines = [
        "I went to a LGBTQ support group yesterday and it was so powerful.",
        "My favorite color is blue.",
        "I'm planning to visit my grandmother in Sweden next month.",
        "I went to a LGBTQ support group yesterday, it was so powerful!",
        "My favorite color is green.",
        "I love painting landscapes with my kids.",
        "I adopted a rescue dog named Max.",
        "I don't like painting landscapes anymore.",
    ]
    return [turn(t, at=datetime(2023, 5, 8 + i, tzinfo=UTC)) for i, t in enumerate(lines)]


def _snapshot(beliefs: list[Belief]) -> dict[str, tuple[str, tuple[str, ...], float, str]]:
    return {b.key: (b.text, b.evidence, b.confidence, b.status.value) for b in beliefs}


@pytest.mark.parametrize("split", range(1, 8))
def test_building_in_two_increments_equals_building_once(split: int) -> None:
    items = sources(*_conversation())
    once = merge(extract(items), [])
    first = merge(extract(items[:split]), [])
    statements = extract(items[split:])
    want = lookup(statements)
    loaded = [b for b in first if b.key in want.keys or b.subject in want.subjects or set(b.anchors) & want.anchors]
    second = merge(statements, loaded)
    combined = {b.key: b for b in first} | {b.key: b for b in second}
    assert _snapshot(list(combined.values())) == _snapshot(once)


def test_merging_the_same_items_again_changes_nothing() -> None:
    items = sources(*_conversation())
    once = merge(extract(items), [])
    assert merge(extract(items), once) == []


def test_retract_shrinks_deletes_and_reactivates_the_older_value() -> None:
    blue, green, again = (
        turn("My favorite color is blue."),
        turn("My favorite color is green.", at=datetime(2023, 6, 1, tzinfo=UTC)),
        turn("My favorite color is green!", at=datetime(2023, 6, 2, tzinfo=UTC)),
    )
    beliefs = merge(extract(sources(blue, green, again)), [])
    green_belief = next(b for b in beliefs if "green" in b.text)
    changed, deleted = retract([green_belief], {green.id}, [b for b in beliefs if b is not green_belief])
    assert deleted == [] and [b.evidence for b in changed] == [(again.id,)]
    changed, deleted = retract([green_belief], {green.id, again.id}, [b for b in beliefs if b is not green_belief])
    assert deleted == [green_belief.key]
    assert [(b.text, b.status) for b in changed] == [
        ("Caroline's favorite color is blue (said 8 May 2023).", BeliefStatus.ACTIVE)
    ]


def test_state_round_trips() -> None:
    for belief in merge(extract(sources(*_conversation())), []):
        assert Belief.from_state(belief.to_state()) == belief

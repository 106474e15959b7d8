"""The pure distiller: dates, third person, extraction rules, merging, supersession and retraction."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

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
    rebuild,
    resolve,
    retract,
    speaker_name,
)
from memory_core.beliefs.model import Statement, belief_meta, common_meta, shared_meta
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
    assert belief.added == (a.id, b.id) and belief.support == 2
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


def _snapshot(beliefs: list[Belief]) -> dict[str, tuple[str, int, float, str]]:
    return {b.key: (b.text, b.support, b.confidence, b.status.value) for b in beliefs}


def _loaded(beliefs: list[Belief], statements: list[Statement]) -> list[Belief]:
    """What an engine loads for ``statements``: by key, the active belief per subject, by anchor."""
    want = lookup(statements)
    return [
        b
        for b in beliefs
        if b.key in want.keys
        or (b.subject in want.subjects and b.status is BeliefStatus.ACTIVE)
        or set(b.anchors) & want.anchors
    ]


@pytest.mark.parametrize("split", range(1, 8))
def test_building_in_two_increments_equals_building_once(split: int) -> None:
    items = sources(*_conversation())
    once = merge(extract(items), [])
    first = merge(extract(items[:split]), [])
    statements = extract(items[split:])
    second = merge(statements, _loaded(first, statements))
    combined = {b.key: b for b in first} | {b.key: b for b in second}
    assert _snapshot(list(combined.values())) == _snapshot(once)
    evidence = {b.key: b.added for b in first}
    for b in second:
        evidence[b.key] = evidence.get(b.key, ()) + b.added
    assert evidence == {b.key: b.added for b in once}


def test_a_subjects_superseded_history_is_not_needed_to_merge() -> None:
    colors = ["blue", "green", "red", "teal", "gold", "plum"]
    items = sources(
        *[turn(f"My favorite color is {c}.", at=datetime(2023, 5, 1 + i, tzinfo=UTC)) for i, c in enumerate(colors)]
    )
    history = merge(extract(items[:-1]), [])
    active = [b for b in history if b.status is BeliefStatus.ACTIVE]
    assert len(active) == 1 and len(history) == 5
    statements = extract(items[-1:])
    assert _snapshot(merge(statements, active)) == _snapshot(merge(statements, history))
    assert [b.text for b in merge(statements, active) if b.status is BeliefStatus.ACTIVE] == [
        "Caroline's favorite color is plum (said 6 May 2023)."
    ]


def test_merging_the_same_items_again_changes_nothing() -> None:
    items = sources(*_conversation())
    once = merge(extract(items), [])
    held = {(b.key, e) for b in once for e in b.added}
    assert merge(extract(items), once, held) == []


def test_retract_shrinks_deletes_and_reactivates_the_older_value() -> None:
    blue, green, again = sources(
        turn("My favorite color is blue."),
        turn("My favorite color is green.", at=datetime(2023, 6, 1, tzinfo=UTC)),
        turn("My favorite color is green!", at=datetime(2023, 6, 2, tzinfo=UTC)),
    )
    beliefs = merge(extract([blue, green, again]), [])
    green_belief = next(b for b in beliefs if "green" in b.text)
    blue_belief = next(b for b in beliefs if "blue" in b.text)
    changed, deleted = retract([green_belief], {green_belief.key: [again]}, [blue_belief])
    assert deleted == [] and [(b.support, b.source, b.status) for b in changed] == [(1, again.id, BeliefStatus.ACTIVE)]
    assert changed[0].text == "Caroline's favorite color is green (said 2 June 2023)."
    changed, deleted = retract([green_belief], {green_belief.key: []}, [blue_belief])
    assert deleted == [green_belief.key]
    assert [(b.text, b.status) for b in changed] == [
        ("Caroline's favorite color is blue (said 8 May 2023).", BeliefStatus.ACTIVE)
    ]


def test_an_active_belief_that_loses_its_newest_evidence_can_yield_to_an_older_value() -> None:
    green, blue, green_again = sources(
        turn("My favorite color is green."),
        turn("My favorite color is blue.", at=datetime(2023, 5, 20, tzinfo=UTC)),
        turn("My favorite color is green!", at=datetime(2023, 6, 2, tzinfo=UTC)),
    )
    beliefs = {b.text[:30]: b for b in merge(extract([green, blue, green_again]), [])}
    green_belief, blue_belief = beliefs["Caroline's favorite color is g"], beliefs["Caroline's favorite color is b"]
    assert (green_belief.status, blue_belief.status) == (BeliefStatus.ACTIVE, BeliefStatus.SUPERSEDED)
    changed, _ = retract([green_belief], {green_belief.key: [green]}, [blue_belief])
    assert {b.text: b.status for b in changed} == {
        "Caroline's favorite color is green (said 8 May 2023).": BeliefStatus.SUPERSEDED,
        "Caroline's favorite color is blue (said 20 May 2023).": BeliefStatus.ACTIVE,
    }


def test_forgetting_the_statement_that_gave_the_text_rebuilds_from_the_survivors() -> None:
    sweet = turn("I adopted a sweet rescue dog named Max yesterday.", thread_id="t1")
    plain = turn("I adopted a rescue dog named Max yesterday!", at=MAY_8 + timedelta(hours=2), thread_id="t2")
    first, second = sources(sweet, plain)
    (belief,) = merge(extract([first, second]), [])
    assert belief.support == 2 and "sweet" in belief.text and belief.meta.thread_id is None
    rebuilt = rebuild(belief, [second])
    (alone,) = merge(extract([second]), [])
    assert rebuilt is not None and "sweet" not in rebuilt.text and rebuilt.key == belief.key
    assert rebuilt.meta.thread_id == "t2" and rebuilt.observed_at == plain.meta.observed_at
    assert (rebuilt.text, rebuilt.terms, rebuilt.anchors, rebuilt.support, rebuilt.meta, rebuilt.source) == (
        alone.text,
        alone.terms,
        alone.anchors,
        1,
        alone.meta,
        second.id,
    )
    assert rebuild(belief, []) is None


def test_paraphrases_merge_and_a_swapped_content_word_does_not() -> None:
    def merged(*lines: str) -> list[int]:
        return sorted(b.support for b in merge(extract(sources(*[turn(t) for t in lines])), []))

    assert merged(
        "I adopted a rescue dog named Max yesterday.", "I adopted a sweet rescue dog named Max yesterday!"
    ) == [2]
    assert merged(
        "I ran a charity race for the shelter yesterday.", "I ran a charity race for the animal shelter yesterday."
    ) == [2]
    assert merged(
        "I hiked the Elk trail with my sister yesterday.", "I hiked the Fox trail with my sister yesterday."
    ) == [1, 1]
    assert merged("I adopted a rescue dog named Max yesterday.", "I adopted a rescue cat named Max yesterday.") == [
        1,
        1,
    ]
    assert merged("I met Anna yesterday.", "I met Anna's brother yesterday.") == [1, 1]


def test_shared_meta_equals_folding_common_meta() -> None:
    items = [
        turn("I volunteer at the animal shelter every weekend.", thread_id="t1", workspace="home"),
        turn(
            "I volunteer at the animal shelter every weekend!",
            at=datetime(2023, 5, 9, tzinfo=UTC),
            thread_id="t2",
            workspace="home",
        ),
        turn(
            "I volunteer at the animal shelter every weekend.",
            at=datetime(2023, 5, 3, tzinfo=UTC),
            thread_id="t1",
            workspace="home",
        ),
    ]
    evidence = [(i.meta, i.meta.observed_at) for i in items]
    folded = belief_meta(*evidence[0])
    for meta, at in evidence[1:]:
        folded = common_meta(folded, belief_meta(meta, at))
    assert shared_meta(evidence) == folded
    assert (folded.thread_id, folded.workspace, folded.observed_at) == (None, "home", datetime(2023, 5, 9, tzinfo=UTC))


def test_a_state_written_with_its_evidence_list_still_reads() -> None:
    (belief,) = merge(extract(sources(turn("My favorite color is teal."))), [])
    old = belief.to_state()
    del old["source"], old["support"]
    old["evidence"] = ["a" * 40, "b" * 40]
    read = Belief.from_state(old)
    assert (read.source, read.support) == ("a" * 40, 2)


def test_state_round_trips() -> None:
    for belief in merge(extract(sources(*_conversation())), []):
        assert Belief.from_state(belief.to_state()) == belief


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("I left 9999 years ago", date(2024, 1, 10)),  # before year 1
        ("I moved here 99999999999 years ago", date(2024, 1, 10)),  # a number no date can hold
        ("we met yesterday", date(1, 1, 1)),
        ("see you next year", date(9999, 6, 1)),
    ],
)
def test_a_relative_date_outside_the_calendar_leaves_the_sentence_as_said(text: str, ref: date) -> None:
    assert resolve(text, ref) == (text, None)
    assert resolve("I left 3 days ago", date(2024, 1, 10))[1] == date(2024, 1, 7)


def test_a_speakers_name_pattern_is_compiled_once_however_many_sentences_they_say() -> None:
    from memory_core.beliefs.text import adverb_verb_pattern

    adverb_verb_pattern.cache_clear()
    said = [
        turn(f"I just love hiking number {n} in the hills.", name=name) for n in range(40) for name in ("Ann", "Bo")
    ]
    got = texts(*said)
    assert "Ann just loves hiking number 3 in the hills (said 8 May 2023)." in got
    info = adverb_verb_pattern.cache_info()
    assert info.misses == 2 and info.hits >= 78  # one compilation per speaker, not one per sentence

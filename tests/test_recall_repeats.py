"""Repeated content in packs: one utterance logged by two agents, and beliefs whose sources the pack shows."""

from __future__ import annotations

from datetime import UTC, datetime

from memory_core import Conversation, Document, ItemKind, Learning, MemoryMeta, MetaFilter, Role, Turn
from memory_core.engine import AnyItem
from memory_core.engines.reference import ReferenceEngine
from memory_core.query import FetchPage, FetchRequest, Hit
from memory_core.recall import ContextPack, HolisticRecall, ScopeSection, build_pack
from memory_core.recall.repeats import covered_beliefs, utterance_key, utterance_text

CONVS = MetaFilter.of_kinds([ItemKind.CONVERSATION])
DOCS = MetaFilter.of_kinds([ItemKind.DOCUMENT])
LEARNS = MetaFilter.of_kinds([ItemKind.LEARNING])
AT = datetime(2023, 7, 20, 18, 0, tzinfo=UTC)


def said(text: str, role: Role, agent: str, at: datetime | None = AT) -> Conversation:
    return Conversation(turns=(Turn(role=role, text=text),), meta=MemoryMeta(agent_id=agent, observed_at=at))


def belief(text: str, *sources: AnyItem) -> Hit:
    return Hit.of(Learning(text=text), 0.9).model_copy(update={"derived_from": tuple(s.id for s in sources)})


class Fixed(ReferenceEngine):
    """Fetches return the given items in order, per kind (the section filter's first kind), and the beliefs."""

    def __init__(self, items: dict[ItemKind, list[AnyItem]], beliefs: tuple[Hit, ...] = ()) -> None:
        super().__init__()
        self.items = items
        self.belief_hits = beliefs

    def _fetch(self, request: FetchRequest) -> FetchPage:
        hits = tuple(
            Hit.of(item, 0.9 - 0.01 * rank) for rank, item in enumerate(self.items.get(request.filter.kinds[0], []))
        )
        return FetchPage(hits=hits, beliefs=self.belief_hits if request.beliefs else ())


def pack(engine: Fixed, *sections: ScopeSection, budget: int = 1200) -> ContextPack:
    return build_pack(engine, HolisticRecall(query="beach", sections=sections, budget_tokens=budget))


def texts(p: ContextPack) -> dict[str, list[str]]:
    return {s.heading: [h.text for h in s.hits] for s in p.sections}


HISTORY = ScopeSection.fetch("History", CONVS, 3)
TEAM = ScopeSection(heading="Team", filter=CONVS, limit=1, exclude_agent_id="mel")


# pure rules -------------------------------------------------------------------------------------------------
def test_an_utterance_is_its_words_without_the_roles() -> None:
    assert utterance_text("user: Wow,\n  great pic!") == "Wow, great pic!"
    assert utterance_text("user: Hi there\nassistant: Hello, Mel") == "Hi there Hello, Mel"
    assert utterance_text("He said user: hi") == "He said user: hi"  # a role only at the start of a line


def test_the_utterance_key_is_time_and_words_of_a_conversation() -> None:
    mine = Hit.of(said("Wow, great pic!", Role.USER, "mel"))
    theirs = Hit.of(said("Wow,  great pic!", Role.ASSISTANT, "caro"))
    assert mine.id != theirs.id
    assert utterance_key(mine) == utterance_key(theirs) == (AT, "Wow, great pic!")
    assert utterance_key(Hit.of(said("Wow, great pic!", Role.USER, "mel", at=None))) == (None, "Wow, great pic!")
    assert utterance_key(Hit.of(Document.of("Wow, great pic!"))) is None


def test_a_belief_is_covered_when_every_source_is_shown_or_repeated() -> None:
    a, b = said("We went to the beach", Role.USER, "mel"), said("The kids loved it", Role.USER, "mel")
    both = belief("Melanie went to the beach with the kids.", a, b)
    one = belief("Melanie went to the beach.", a)
    stored = Hit.of(Learning(text="Melanie likes beaches"))
    assert covered_beliefs([both, one, stored], {a.id}) == {one.id}
    assert covered_beliefs([both, one, stored], {a.id, b.id}) == {both.id, one.id}
    assert covered_beliefs([both], {"shown copy of b", a.id}, {b.id: "shown copy of b"}) == {both.id}
    assert covered_beliefs([both], {a.id}, {b.id: "not shown"}) == set()


# same utterance ---------------------------------------------------------------------------------------------
def test_an_utterance_logged_by_two_agents_is_listed_once_in_the_higher_section() -> None:
    mine = said("Wow, great pic!", Role.USER, "mel")
    theirs = said("Wow, great pic!", Role.ASSISTANT, "caro")
    other = said("See you at the beach", Role.USER, "caro")
    p = pack(Fixed({ItemKind.CONVERSATION: [mine, theirs, other]}), ScopeSection.fetch("History", CONVS, 1), TEAM)
    assert texts(p) == {"History": ["user: Wow, great pic!"], "Team": ["user: See you at the beach"]}
    assert p.markdown.count("Wow, great pic!") == 1
    assert p.refs == (mine.id, other.id)


def test_the_same_words_at_another_time_are_another_utterance() -> None:
    first = said("Wow, great pic!", Role.USER, "mel")
    later = said("Wow, great pic!", Role.ASSISTANT, "caro", at=datetime(2023, 8, 1, tzinfo=UTC))
    p = pack(Fixed({ItemKind.CONVERSATION: [first, later]}), HISTORY, TEAM)
    assert texts(p) == {"History": ["user: Wow, great pic!", "assistant: Wow, great pic!"]}


# covered beliefs ---------------------------------------------------------------------------------------------
def test_a_belief_whose_source_is_shown_gives_way_to_the_source() -> None:
    turn = said("Seeing my kids so happy at the beach was the best!", Role.USER, "mel")
    covered = belief("Seeing Melanie's kids so happy at the beach was the best (said 20 July 2023).", turn)
    elsewhere = belief("Melanie paints sunsets.", said("I paint sunsets", Role.USER, "mel"))
    engine = Fixed({ItemKind.CONVERSATION: [turn]}, beliefs=(covered, elsewhere))
    p = pack(engine, ScopeSection.fetch("Learnings", LEARNS, 4), HISTORY)
    assert texts(p) == {"Learnings": ["Melanie paints sunsets."], "History": [turn.render_text()]}
    assert "Seeing Melanie's kids" not in p.markdown and covered.id not in p.refs


def test_a_belief_repeating_a_passage_gives_way_to_the_passage() -> None:
    passage = Document.of("# GIL › Container Thread-Safety\n\nWithout the GIL, containers need locks.")
    quoted = belief("GIL › Container Thread-Safety: Without the GIL, containers need locks.", passage)
    engine = Fixed({ItemKind.DOCUMENT: [passage]}, beliefs=(quoted,))
    p = pack(engine, ScopeSection.fetch("Learnings", LEARNS, 4), ScopeSection.fetch("Brain", DOCS, 2))
    assert list(texts(p)) == ["Brain"] and p.markdown.count("containers need locks") == 1


def test_a_belief_repeating_the_other_agents_copy_of_a_shown_utterance_gives_way() -> None:
    mine = said("We went to the beach", Role.USER, "mel")
    theirs = said("We went to the beach", Role.ASSISTANT, "caro")
    from_theirs = belief("Melanie went to the beach (said 20 July 2023).", theirs)
    engine = Fixed({ItemKind.CONVERSATION: [mine, theirs]}, beliefs=(from_theirs,))
    p = pack(engine, ScopeSection.fetch("Learnings", LEARNS, 4), HISTORY, TEAM)
    assert texts(p) == {"History": ["user: We went to the beach"]}


def test_a_belief_stays_when_the_budget_trims_its_source_away() -> None:
    turn = said("We went to the beach. " + "It was a long and lovely day out with everyone. " * 10, Role.USER, "mel")
    kept = belief("Melanie went to the beach.", turn)
    engine = Fixed({ItemKind.CONVERSATION: [turn]}, beliefs=(kept,))
    learnings = ScopeSection.fetch("Learnings", LEARNS, 4)
    assert list(texts(pack(engine, learnings, HISTORY))) == ["History"]  # room for both: the source wins
    p = pack(engine, learnings, HISTORY, budget=40)
    assert texts(p) == {"Learnings": ["Melanie went to the beach."]} and p.tokens <= 40

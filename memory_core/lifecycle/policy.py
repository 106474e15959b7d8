"""``RecallPolicy``, ``CoreScope`` and the standard sections every lifecycle pack reads (seed 000, reference §4.3).

Everything here is pure: values in, ``ScopeSection`` tuples out. ``AgentMemory`` wraps them in a
``HolisticRecall`` and hands that to ``build_pack``.

Standard sections, all ranked (``fetch``) sections, in priority order; a zero limit leaves a section out:

| # | heading | filter | limit |
| --- | --- | --- | --- |
| 1 | Learnings | ``subtree(root)``, ``[learning]`` | ``learnings_limit`` (8) |
| 2 | one per ``CoreScope`` | ``exact(scope.at)``, ``scope.kinds`` | ``scope.limit`` (6) |
| 3 | Brain | ``subtree(root)``, ``[document]``, at most ``BRAIN_SCOPES_PER_TURN`` scopes | ``brain_limit`` (6) |
| 4 | This agent's history | ``subtree(root/agent:<id>)``, ``[conversation]``, ≤ 8 scopes | ``history_limit`` (6) |
| 5 | Team conversations | ``subtree(root)``, ``[conversation]``, not this agent's, ≤ 8 scopes | ``team_limit`` (3) |

History and Team read at most ``CONVERSATION_SCOPES_PER_TURN`` scopes (agents): those the query names, then the
most recently written; with the SQLite engine each over its newest turns (``engines.sqlite.scoped``), so neither
section's cost grows with the store (issue 12).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from pydantic import Field, StrictInt

from memory_core._model import ContractModel
from memory_core.items import Turn
from memory_core.lifecycle.layout import MemoryLayout, check_agent_id
from memory_core.meta import U32, ItemKind, MetaFilter, USize
from memory_core.namespace import Namespace, Reach
from memory_core.query import NonBlank
from memory_core.recall.types import DEFAULT_BUDGET_TOKENS, FetchQuery, ScopeSection
from memory_core.settings import Settings, get_settings

__all__ = [
    "BRAIN_HEADING",
    "BRAIN_SCOPES_PER_TURN",
    "COMPACTION_INSTRUCTIONS",
    "COMPACTION_QUESTION",
    "CONVERSATION_SCOPES_PER_TURN",
    "DEFAULT_MIN_RELEVANCE",
    "GIST_MAX_CHARS",
    "HISTORY_HEADING",
    "LEARNINGS_HEADING",
    "MAX_SECTION_LIMIT",
    "MAX_SUMMARY_LIMIT",
    "PACK_TITLE",
    "SUMMARY_HEADING",
    "TEAM_HEADING",
    "THREAD_HEADING",
    "CoreScope",
    "RecallPolicy",
    "compaction_gist",
    "standard_sections",
    "summary_section",
    "thread_filter",
    "thread_section",
]

LEARNINGS_HEADING: Final = "Learnings"
"""Heading of the learnings section (reference §4.3 ``LEARNINGS_HEADING``)."""
BRAIN_HEADING: Final = "Brain"
"""Heading of the brain section (reference §4.3 ``BRAIN_HEADING``)."""
HISTORY_HEADING: Final = "This agent's history"
"""Heading of the agent's own conversations (reference §4.3 ``HISTORY_HEADING``)."""
TEAM_HEADING: Final = "Team conversations"
"""Heading of every other agent's conversations (reference §4.3 ``TEAM_HEADING``)."""
THREAD_HEADING: Final = "Earlier in this thread"
"""Heading of a resumed thread's latest turns (reference §4.3 ``THREAD_HEADING``)."""
SUMMARY_HEADING: Final = "Earlier in this conversation"
"""Heading of the compaction summary (reference §4.3 ``SUMMARY_HEADING``)."""
PACK_TITLE: Final = "Memory"
"""Title of every lifecycle pack (reference §4.3)."""

BRAIN_SCOPES_PER_TURN: Final = 4
"""Most brain scopes one turn reads: those the query names, then the most recently written (reference §4.3)."""
CONVERSATION_SCOPES_PER_TURN: Final = 8
"""Most conversation scopes (agents' nodes) the History and Team sections read, chosen as Brain's are
(*memory-core*, issue 12: bounded sections)."""
MAX_SECTION_LIMIT: Final = 200
"""Largest section limit ``ScopeSection`` accepts (*memory-core*, ``recall.types``)."""
MAX_SUMMARY_LIMIT: Final = 24
"""Most citations of the compaction summary: ``clamp(max(history_limit, dropped), 1, 24)`` (reference §4.3)."""
GIST_MAX_CHARS: Final = 600
"""Longest compaction gist, in characters (reference §4.3)."""
_GIST_MIN_PER_TURN: Final = 40
"""Fewest characters of each dropped turn the gist keeps (reference §4.3: ``max(600 / n, 40)``)."""

COMPACTION_QUESTION: Final = (
    "What was discussed earlier in this conversation: what was decided, what facts came up, and what is still open?"
)
"""The fixed question of the compaction summary (reference §4.3, paraphrased)."""
COMPACTION_INSTRUCTIONS: Final = (
    "Answer as brief markdown bullets grouped as facts, decisions and open questions. "
    "Use only what the stored conversation supports; leave out anything it does not."
)
"""The fixed instructions of the compaction summary (reference §4.3, paraphrased)."""

DEFAULT_MIN_RELEVANCE: Final = 0.5
"""Default relevance floor of lifecycle packs (*memory-core*; reference §4.3 packs have none, so this is the one
default that deviates from it): a ranked hit or belief is left out unless its score reaches half the best score
the pack read *and* it holds at least half the share of the query's content terms that the best-covering hit
holds (``recall.relevance``). Measured on the SQLite engine (LoCoMo, 383 questions, with and without the ten
PEPs as brain; before → after this rule and the repeat rules of ``recall.repeats``): pack evidence recall 58.0% →
58.2% without a brain and 58.5% → 59.5% with it, unrelated Brain bullets per pack 4.9 → 1.2, pack size 605 → 368
and 1066 → 529 tokens. Other floors, with and without brain: 0.3 keeps 60.2% / 60.9% recall but 2.6 Brain
bullets and 477 / 758 tokens; 0.4 gives 58.8% / 59.7% and 1.3; 0.6 drops recall to 52.4% / 55.0%. The brain
check (``tests/fixtures/brain``) answers 17 of 17 at 0.5. None turns the floor off."""

_DEFAULT_CORE_KINDS: Final = (ItemKind.LEARNING, ItemKind.DOCUMENT)
_WS = re.compile(r"\s+")


class RecallPolicy(ContractModel):
    """How much each lifecycle pack reads, and how often ``post_turn`` asks for a belief build (reference §4.3).

    Counts are strict integers: ``True``, ``8.0`` or ``"8"`` is refused naming the field, never read as a number.

    Attributes:
        budget_tokens: Pack budget in tokens of 4 characters (1200, ``DEFAULT_TURN_BUDGET_TOKENS``).
        learnings_limit: Learnings section bullets (8); 0 leaves the section out.
        brain_limit: Brain section bullets (6); 0 leaves the section out.
        history_limit: This agent's history bullets (6); 0 leaves the section out.
        team_limit: Team conversation bullets (3); 0 leaves the section out.
        build_beliefs_every: ``post_turn`` returns a ``BuildBeliefs`` job every N turns, counted as
            ``turn_index + 1`` (10); None or 0 means never. A ``u32``, as in the reference.
        min_relevance: The packs' relevance floor (``HolisticRecall.min_relevance``, a *memory-core*
            extension and the one deviation from the reference §4.3 defaults, which have no floor): a ranked
            hit is left out when its score, or its coverage of the query's content terms, is below this share
            of the pack's best (0.5, ``DEFAULT_MIN_RELEVANCE``, measured there); None turns the floor off, as in
            reference §4.3 packs.
    """

    budget_tokens: USize = Field(default=DEFAULT_BUDGET_TOKENS, gt=0)
    learnings_limit: StrictInt = Field(default=8, ge=0, le=MAX_SECTION_LIMIT)
    brain_limit: StrictInt = Field(default=6, ge=0, le=MAX_SECTION_LIMIT)
    history_limit: StrictInt = Field(default=6, ge=0, le=MAX_SECTION_LIMIT)
    team_limit: StrictInt = Field(default=3, ge=0, le=MAX_SECTION_LIMIT)
    build_beliefs_every: U32 | None = 10
    min_relevance: float | None = Field(default=DEFAULT_MIN_RELEVANCE, ge=0.0, le=1.0)

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> RecallPolicy:
        """The defaults, with the budget and build cadence from the settings.

        ``MEMORY_CORE_BUDGET_TOKENS`` and ``MEMORY_CORE_BUILD_BELIEFS_EVERY`` (0 = never).
        """
        s = settings or get_settings()
        return cls(budget_tokens=s.budget_tokens, build_beliefs_every=s.build_beliefs_every or None)

    def builds_after(self, turn_index: int) -> bool:
        """True when turn ``turn_index`` completes a build period: ``n > 0`` and ``(turn_index + 1) % n == 0``."""
        n = self.build_beliefs_every
        return n is not None and n > 0 and (turn_index + 1) % n == 0


class CoreScope(ContractModel):
    """``{at, heading, kinds, limit}``: a node above the layout root every pack also reads (reference §4.4).

    A core scope is read exactly (``Reach.exact(at)``), so it never admits a sibling tenant, and with no core
    scopes a pack is byte-identical to one without this feature.

    Attributes:
        at: The node; ``AgentMemory.with_core`` requires a strict ancestor of the layout root.
        heading: The section heading (non-blank).
        kinds: The kinds the section reads and ``promote`` accepts (learning and document; empty = all).
        limit: Section bullets (6); 0 leaves the section out.
    """

    at: Namespace
    heading: NonBlank
    kinds: tuple[ItemKind, ...] = _DEFAULT_CORE_KINDS
    limit: StrictInt = Field(default=6, ge=0, le=MAX_SECTION_LIMIT)

    @classmethod
    def new(cls, at: Namespace | str, heading: str) -> CoreScope:
        """A core scope at ``at`` with the default kinds and limit.

        Raises:
            InvalidRequest: a malformed namespace or a blank heading.
        """
        return cls.model_validate({"at": at, "heading": heading})

    def with_kinds(self, *kinds: ItemKind | str) -> CoreScope:
        """A copy reading only ``kinds``."""
        return CoreScope.model_validate({**self.__dict__, "kinds": kinds})

    def with_limit(self, limit: int) -> CoreScope:
        """A copy with section limit ``limit``."""
        return CoreScope.model_validate({**self.__dict__, "limit": limit})

    def filter(self) -> MetaFilter:
        """``reach = exact(at)`` plus the kinds."""
        return MetaFilter(reach=Reach.exact(self.at), kinds=self.kinds)

    def admits_kind(self, kind: ItemKind) -> bool:
        """True when this scope reads items of ``kind``."""
        return not self.kinds or kind in self.kinds


def standard_sections(
    layout: MemoryLayout,
    agent_id: str,
    policy: RecallPolicy | None = None,
    core: Sequence[CoreScope] = (),
) -> tuple[ScopeSection, ...]:
    """The standard sections of every lifecycle pack, in priority order (see the module table).

    Args:
        layout: The layout the agent lives in.
        agent_id: The agent; its history is ``subtree(layout.conversations(agent_id))`` and its own turns are
            left out of the team section.
        policy: Section limits (``RecallPolicy()`` when None); a zero limit leaves a section out.
        core: Core scopes, one section each between Learnings and Brain.

    Returns:
        The fetch sections; each reads the pack's query, or Latest when the pack has none.

    Raises:
        InvalidRequest: ``field="agent_id"``: not a string, or blank.
    """
    check_agent_id(agent_id)  # a blank one: the team section would exclude nobody
    p = policy or RecallPolicy()
    sections: list[ScopeSection] = []
    if p.learnings_limit:
        sections.append(ScopeSection.fetch(LEARNINGS_HEADING, layout.learnings_filter(), p.learnings_limit))
    for scope in core:
        if scope.limit:
            sections.append(ScopeSection.fetch(scope.heading, scope.filter(), scope.limit))
    if p.brain_limit:
        sections.append(
            ScopeSection(
                heading=BRAIN_HEADING,
                filter=layout.brain_filter(None),
                limit=p.brain_limit,
                query=FetchQuery(),
                max_scopes=BRAIN_SCOPES_PER_TURN,
            )
        )
    if p.history_limit:
        sections.append(
            ScopeSection(
                heading=HISTORY_HEADING,
                filter=layout.conversations_filter(agent_id),
                limit=p.history_limit,
                query=FetchQuery(),
                max_scopes=CONVERSATION_SCOPES_PER_TURN,
            )
        )
    if p.team_limit:
        sections.append(
            ScopeSection(
                heading=TEAM_HEADING,
                filter=layout.conversations_filter(None),
                limit=p.team_limit,
                query=FetchQuery(),
                exclude_agent_id=agent_id.strip(),
                max_scopes=CONVERSATION_SCOPES_PER_TURN,
            )
        )
    return tuple(sections)


def thread_filter(layout: MemoryLayout, agent_id: str, thread_id: str) -> MetaFilter:
    """One thread's conversations under the agent's node."""
    return layout.conversations_filter(agent_id).narrowed(thread_id=thread_id)


def thread_section(layout: MemoryLayout, agent_id: str, thread_id: str, policy: RecallPolicy) -> ScopeSection:
    """The "Earlier in this thread" section: the thread's latest turns.

    Its limit is ``max(history_limit, 1)`` (reference §4.3).
    """
    return ScopeSection.latest(THREAD_HEADING, thread_filter(layout, agent_id, thread_id), max(policy.history_limit, 1))


def summary_section(
    layout: MemoryLayout, agent_id: str, thread_id: str, policy: RecallPolicy, dropped: int
) -> ScopeSection:
    """The "Earlier in this conversation" section: an answered summary of the thread that falls back to fetch.

    The limit is ``clamp(max(history_limit, dropped), 1, 24)`` (reference §4.3).
    """
    limit = min(max(policy.history_limit, dropped, 1), MAX_SUMMARY_LIMIT)
    return ScopeSection.answer(
        SUMMARY_HEADING,
        COMPACTION_QUESTION,
        thread_filter(layout, agent_id, thread_id),
        limit,
        instructions=COMPACTION_INSTRUCTIONS,
        fallback_to_fetch=True,
    )


def compaction_gist(dropped: Sequence[Turn]) -> str | None:
    """The query compaction reads for when the host names no focus (reference §4.3).

    Each dropped turn's text, whitespace collapsed, is cut to ``max(600 // n, 40)`` characters; the pieces are
    joined with spaces and the result cut to 600 characters.

    Returns:
        The gist, or None when nothing non-blank was dropped.
    """
    texts = [_WS.sub(" ", turn.text).strip() for turn in dropped]
    texts = [t for t in texts if t]
    if not texts:
        return None
    per_turn = max(GIST_MAX_CHARS // len(dropped), _GIST_MIN_PER_TURN)
    gist = " ".join(t[:per_turn] for t in texts)[:GIST_MAX_CHARS].strip()
    return gist or None

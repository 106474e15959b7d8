"""Holistic recall types: ``HolisticRecall`` in, ``ContextPack`` out (seed 000, reference §4.1)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Self

from pydantic import Field, model_validator

from memory_core._model import ContractModel
from memory_core.errors import InvalidRequest
from memory_core.meta import MetaFilter
from memory_core.query import Hit, NonBlank, TimeHint

__all__ = [
    "AnswerQuery",
    "ContextPack",
    "DEFAULT_BUDGET_TOKENS",
    "DEFAULT_TITLE",
    "FetchQuery",
    "HolisticRecall",
    "LatestQuery",
    "ScopeSection",
    "SectionHits",
    "SectionQuery",
    "Skipped",
    "ThreadWindow",
]

DEFAULT_BUDGET_TOKENS = 1200
"""Default pack budget, in tokens of 4 characters (reference §4.1, ``DEFAULT_TURN_BUDGET_TOKENS``)."""
DEFAULT_TITLE = "Memory"
"""Default pack title (reference §4.1)."""


class FetchQuery(ContractModel):
    """``{"by": "fetch", "query"?}``: ranked retrieval for the section's query, else the pack's."""

    by: Literal["fetch"] = "fetch"
    query: str | None = None


class AnswerQuery(ContractModel):
    """``{"by": "answer", "question", "instructions"?, "fallback_to_fetch"}``: a synthesised answer."""

    by: Literal["answer"] = "answer"
    question: NonBlank
    instructions: str | None = None
    fallback_to_fetch: bool = False


class LatestQuery(ContractModel):
    """``{"by": "latest"}``: newest first, then most confident, then latest turn."""

    by: Literal["latest"] = "latest"


SectionQuery = Annotated[FetchQuery | AnswerQuery | LatestQuery, Field(discriminator="by")]
"""How a section is filled, tagged ``"by"``."""


class ScopeSection(ContractModel):
    """``{heading, filter, limit, query, max_scopes?, exclude_agent_id?}``: one section of a pack."""

    heading: NonBlank
    filter: MetaFilter = Field(default_factory=MetaFilter)
    limit: int = Field(gt=0, le=200)
    query: SectionQuery = Field(default_factory=FetchQuery)
    max_scopes: int | None = Field(default=None, gt=0)
    exclude_agent_id: str | None = None

    @model_validator(mode="after")
    def _answer_rules(self) -> Self:
        if isinstance(self.query, AnswerQuery) and self.exclude_agent_id is not None:
            raise InvalidRequest("an answer section cannot exclude an agent", field="exclude_agent_id")
        return self

    @classmethod
    def fetch(cls, heading: str, filter: MetaFilter, limit: int, query: str | None = None) -> ScopeSection:
        """A ranked section (the pack's query unless ``query`` is given)."""
        return cls(heading=heading, filter=filter, limit=limit, query=FetchQuery(query=query))

    @classmethod
    def answer(
        cls,
        heading: str,
        question: str,
        filter: MetaFilter,
        limit: int,
        *,
        instructions: str | None = None,
        fallback_to_fetch: bool = False,
    ) -> ScopeSection:
        """An answered section."""
        q = AnswerQuery(question=question, instructions=instructions, fallback_to_fetch=fallback_to_fetch)
        return cls(heading=heading, filter=filter, limit=limit, query=q)

    @classmethod
    def latest(cls, heading: str, filter: MetaFilter, limit: int) -> ScopeSection:
        """A newest-first section."""
        return cls(heading=heading, filter=filter, limit=limit, query=LatestQuery())


class ThreadWindow(ContractModel):
    """``{thread_id, from_turn}``: the turns of a thread still in the prompt, left out of packs."""

    thread_id: NonBlank
    from_turn: int = Field(ge=0)

    def covers(self, hit: Hit) -> bool:
        """True when the hit is this thread's and either has no turns or ends at or after ``from_turn``."""
        if hit.meta.thread_id != self.thread_id:
            return False
        turns = hit.meta.turns
        return turns is None or turns.last >= self.from_turn


class HolisticRecall(ContractModel):
    """One read across several scopes, rendered as one token-budgeted block.

    JSON: ``{query?, sections, budget_tokens, title, exclude_ids, exclude_thread?, refers_to?, min_relevance?}``.

    ``min_relevance`` (a *memory-core* extension, left out of JSON when unset) is a relevance floor for the
    ranked sections: a hit or belief a fetch returned is dropped when its score is below ``min_relevance`` times
    the best score among the hits and beliefs the pack's fetches returned (those the pack does not exclude), or
    when its coverage of the query's content terms is below ``min_relevance`` times the best coverage
    (``recall.relevance``). Why: a ranked section otherwise fills its limit with whatever matched at all (in
    hybrid mode any text with a cosine ≥ 0.2, which every long document has; in keyword mode any text holding
    "go" or "what"), and those bullets take budget from better hits in lower-priority sections. The score bar
    needs an engine whose fetch scores compare across fetches of one query (the SQLite engine's BM25-based
    scores do, see ``engines.sqlite.search``); the coverage bar assumes a lexical match (an engine with real
    embeddings can return a hit sharing no word with the query, which this bar would drop). Unset (the
    contract's behaviour, reference §4.1), nothing is dropped; answer and latest sections are never filtered.
    """

    __omit_defaults__: ClassVar[frozenset[str]] = frozenset({"exclude_ids"})

    query: str | None = None
    sections: tuple[ScopeSection, ...]
    budget_tokens: int = Field(default=DEFAULT_BUDGET_TOKENS, gt=0)
    title: NonBlank = DEFAULT_TITLE
    exclude_ids: tuple[str, ...] = ()
    exclude_thread: ThreadWindow | None = None
    refers_to: TimeHint | None = None
    min_relevance: float | None = Field(default=None, ge=0.0, le=1.0)


class SectionHits(ContractModel):
    """``{heading, answer?, hits}``: what one section showed in the rendered markdown.

    ``hits`` are the section's bullets that survived the budget, in order (for an answer, every citation), and
    ``answer`` the answer's text as rendered (ending in ``…`` when the budget shortened it).
    """

    heading: str
    answer: str | None = None
    hits: tuple[Hit, ...] = ()


class Skipped(ContractModel):
    """``{heading, reason}``: a section left out of the pack (``"empty"`` or the error text)."""

    heading: str
    reason: str


class ContextPack(ContractModel):
    """``{markdown, tokens, refs, sections, skipped, engine}``: the rendered block and what it cites.

    ``sections`` matches the markdown (*memory-core*: trimmed as the markdown was): a section the budget removed
    is not listed, and every listed hit's id is in ``refs``. A section the budget removed is not in ``skipped``
    either (that lists sections that found nothing or failed).
    """

    markdown: str = ""
    tokens: int = 0
    refs: tuple[str, ...] = ()
    sections: tuple[SectionHits, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    engine: str = ""

    def is_empty(self) -> bool:
        """True when the markdown is ``""``."""
        return self.markdown == ""

"""``context.md``: a fixed preset of holistic recall with frontmatter (seed 000, reference §4.2).

A ``ContextSpec`` compiles to one ``HolisticRecall`` titled ``Context``: one answered section per brief (8
citations, fixed instructions asking for short markdown bullets backed by the stored items), then a ``Latest``
section of learnings, so learnings trim first. The rendered document carries frontmatter::

    ---
    generated_at: 2026-01-02T03:04:05Z
    engine: reference
    tokens: 123
    refs: [id1, id2]
    ---

    # Context
    …

``tokens`` counts the whole document, frontmatter included (solved by fixed point). A brief that fails, answers
blank or cites nothing is left out, as is a failed learnings listing; an engine holding nothing gives the empty
document. Passing ``at`` makes the output reproducible.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Executor
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import Field

from memory_core._model import ContractModel, Timestamp, utc
from memory_core.engine import MemoryEngine
from memory_core.meta import ItemKind, MetaFilter
from memory_core.namespace import Reach
from memory_core.query import NonBlank
from memory_core.recall.pack import assemble
from memory_core.recall.types import HolisticRecall, ScopeSection

__all__ = [
    "BRIEF_CITATIONS",
    "BRIEF_INSTRUCTIONS",
    "CONTEXT_TITLE",
    "DEFAULT_CONTEXT_BUDGET_TOKENS",
    "DEFAULT_LEARNINGS_LIMIT",
    "LEARNINGS_HEADING",
    "Brief",
    "ContextDoc",
    "ContextSpec",
    "compile_context",
    "context_recall",
]

DEFAULT_CONTEXT_BUDGET_TOKENS: Final = 1_500
"""Default budget of the whole document, frontmatter included, in tokens of 4 characters (reference §4.2)."""
DEFAULT_LEARNINGS_LIMIT: Final = 20
"""Default number of learnings listed after the briefs (reference §4.2)."""
BRIEF_CITATIONS: Final = 8
"""Citations one brief's recall gathers (reference §4.2)."""
CONTEXT_TITLE: Final = "Context"
"""The document's ``#`` title (reference §4.2)."""
LEARNINGS_HEADING: Final = "Learnings"
"""Heading of the final learnings section (reference §4.2)."""
BRIEF_INSTRUCTIONS: Final = (
    "Reply with a few short markdown bullet points suitable for a context brief. "
    "Include only what the stored items support."
)
"""Instructions sent with every brief's recall (reference §4.2: short bullets, only what stored items support)."""


class Brief(ContractModel):
    """``{heading, question, filter}``: one answered section of ``context.md``.

    Raises:
        InvalidRequest: a blank heading or question.
    """

    heading: NonBlank
    question: NonBlank
    filter: MetaFilter = Field(default_factory=MetaFilter)

    @classmethod
    def defaults(cls) -> tuple[Brief, ...]:
        """The four default briefs, in order (headings exact, questions paraphrased from reference §4.2)."""
        return _DEFAULT_BRIEFS


_DEFAULT_BRIEFS: Final = (
    Brief(heading="About the user", question="Who is the user: what is their identity, role and working style?"),
    Brief(heading="Active work", question="Which projects, workspaces and repositories is the user working on now?"),
    Brief(
        heading="Preferences and standing instructions",
        question="Which preferences and standing instructions has the user given?",
    ),
    Brief(heading="Recent important events", question="Which important events have happened recently?"),
)


class ContextSpec(ContractModel):
    """``{budget_tokens, briefs, learnings_limit, reach?}``: what ``context.md`` holds.

    Attributes:
        budget_tokens: The most tokens the whole document may take, frontmatter included (default 1500).
        briefs: The answered sections, in order (default ``Brief.defaults()``).
        learnings_limit: Learnings listed after the briefs, 0..=200 (default 20; 0 leaves the section out).
        reach: Whose memory the document is about; when set it replaces every brief filter's reach and bounds
            the learnings. None reads every namespace.

    Raises:
        InvalidRequest: a zero budget, a brief with a blank heading or question, or a learnings limit out of
            range; the error names the field.
    """

    budget_tokens: int = Field(default=DEFAULT_CONTEXT_BUDGET_TOKENS, gt=0)
    briefs: tuple[Brief, ...] = _DEFAULT_BRIEFS
    learnings_limit: int = Field(default=DEFAULT_LEARNINGS_LIMIT, ge=0, le=200)
    reach: Reach | None = None


class ContextDoc(ContractModel):
    """``{markdown, tokens, generated_at, engine, refs}``: a compiled ``context.md``.

    ``markdown`` is ``""`` (and ``tokens`` 0) when the engine had nothing to say; ``refs`` lists every cited
    item in order of first citation.
    """

    markdown: str = ""
    tokens: int = 0
    generated_at: Timestamp
    engine: str
    refs: tuple[str, ...] = ()


def context_recall(spec: ContextSpec) -> HolisticRecall:
    """The holistic recall ``spec`` compiles to (pure).

    Returns:
        ``HolisticRecall`` titled ``Context`` with ``spec.budget_tokens``: one answer section per brief (limit
        8, ``BRIEF_INSTRUCTIONS``, the brief's filter with ``spec.reach`` when set), then a Latest ``Learnings``
        section of ``learnings_limit`` learnings under ``spec.reach`` (left out when the limit is 0).
    """
    sections: list[ScopeSection] = []
    for brief in spec.briefs:
        flt = brief.filter if spec.reach is None else brief.filter.model_copy(update={"reach": spec.reach})
        sections.append(
            ScopeSection.answer(brief.heading, brief.question, flt, BRIEF_CITATIONS, instructions=BRIEF_INSTRUCTIONS)
        )
    if spec.learnings_limit > 0:
        learnings = MetaFilter(kinds=(ItemKind.LEARNING,), reach=spec.reach)
        sections.append(ScopeSection.latest(LEARNINGS_HEADING, learnings, spec.learnings_limit))
    return HolisticRecall(sections=tuple(sections), budget_tokens=spec.budget_tokens, title=CONTEXT_TITLE)


def compile_context(
    engine: MemoryEngine,
    spec: ContextSpec | Mapping[str, Any] | None = None,
    *,
    at: datetime | None = None,
    executor: Executor | None = None,
) -> ContextDoc:
    """Compile ``context.md`` from ``engine``.

    Args:
        engine: The engine to read.
        spec: The spec, its JSON object, or None for ``ContextSpec()``.
        at: The ``generated_at`` stamp (truncated to whole seconds, UTC); None uses the current time. A fixed
            value makes the output reproducible.
        executor: A thread-based executor for the reads, or None for the shared pool.

    Returns:
        The document; empty when no brief was answered and no learning listed.

    Raises:
        InvalidRequest: an invalid spec (the only error; engine failures leave sections out).
    """
    checked = ContextSpec() if spec is None else ContextSpec.coerce(spec, "spec")
    generated_at = utc(at if at is not None else datetime.now(UTC)).replace(microsecond=0)
    pack = assemble(engine, context_recall(checked), executor=executor, generated_at=generated_at)
    return ContextDoc(
        markdown=pack.markdown, tokens=pack.tokens, generated_at=generated_at, engine=pack.engine, refs=pack.refs
    )

"""What reading one section of a pack produced, and which hits the pack leaves out (pure; reference §4.1).

``gather`` produces one ``Gathered`` per section; ``relevance.floor`` and ``gather.fold_beliefs`` refine them and
``pack.settle`` turns them into rendered sections.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory_core.query import Hit
from memory_core.recall.types import HolisticRecall, ScopeSection

__all__ = ["Answered", "Failed", "Gathered", "Read", "error_text", "excluded"]


@dataclass(frozen=True, slots=True)
class Answered:
    """An answered section: the trimmed answer and its citations as hits (score or 0, no confidence)."""

    text: str
    hits: tuple[Hit, ...]


@dataclass(slots=True)
class Read:
    """A ranked or latest read: the section's hits before settling, and the beliefs the read returned.

    ``query`` is the text a ranked read fetched for (the section's query, the pack's, or an answer's question
    when it fell back to fetching), None for a latest listing.
    """

    hits: list[Hit]
    beliefs: list[Hit]
    query: str | None = None

    @property
    def ranked(self) -> bool:
        """True when the hits came from ``engine.fetch`` (relevance scores, subject to ``min_relevance``)."""
        return self.query is not None


@dataclass(frozen=True, slots=True)
class Failed:
    """A read that failed, and the error's text."""

    reason: str


Gathered = Answered | Read | Failed
"""What one section's read produced."""


def error_text(exc: BaseException) -> str:
    """The reason a skipped section reports: the error's text, or its class name when it has none."""
    return str(exc) or type(exc).__name__


def excluded(request: HolisticRecall, section: ScopeSection, hit: Hit) -> bool:
    """True when the pack or the section leaves ``hit`` out.

    That is an id in ``exclude_ids``, a turn inside ``exclude_thread``, or (when the section sets it) a hit of
    ``exclude_agent_id``.
    """
    if hit.id in request.exclude_ids:
        return True
    if request.exclude_thread is not None and request.exclude_thread.covers(hit):
        return True
    return section.exclude_agent_id is not None and hit.meta.agent_id == section.exclude_agent_id

"""``build_pack``: a ``HolisticRecall`` in, a ``ContextPack`` out (seed 000 "Holistic recall", reference §4.1).

The sections are read concurrently (``gather``), then settled in section order and rendered:

* answers pass through untouched, and an answer citing an item does not hide that item elsewhere;
* hits are filtered by the section's kinds, ``exclude_ids``, the thread window, the ids shown by earlier
  sections, and the section's ``exclude_agent_id``; then (*memory-core*, ``repeats``) a conversation hit that
  repeats an utterance already listed is left out; then the hits are cut to the section's limit;
* a section left with nothing is skipped with reason ``"empty"``, a failed one with the error's text;
* the sections are rendered within the budget; when a belief's sources are all in the rendered pack
  (*memory-core*, ``repeats.covered_beliefs``) the belief is taken out and the pack rendered again. Taking
  lines out never trims more, so every source stays rendered.

``ContextPack.sections`` lists what the markdown shows: each section that survived the budget, with the
bullets that survived (and an answer's text as rendered, shortened or not), so a host reading the hits reads
what the model read; ``refs`` are the same ids in order of first citation.

Only an invalid request raises (``InvalidRequest``); nothing an engine does fails a pack.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memory_core.engine import MemoryEngine
from memory_core.errors import InvalidRequest
from memory_core.query import Hit
from memory_core.recall.bullets import bullet
from memory_core.recall.gather import gather
from memory_core.recall.outcomes import Answered, Failed, Gathered, error_text
from memory_core.recall.render import PACK_LABEL, Frontmatter, Line, Lines, Prose, Rendered, Section, render
from memory_core.recall.repeats import UtteranceKey, covered_beliefs, utterance_key
from memory_core.recall.types import ContextPack, HolisticRecall, SectionHits, Skipped

__all__ = ["EMPTY_REASON", "Settled", "assemble", "build_pack", "settle", "skip_wording"]

_log = logging.getLogger(__name__)

EMPTY_REASON = "empty"
"""The ``Skipped.reason`` of a section that found nothing to show (reference §4.1)."""

EMPTY_WORDING = "nothing new matched"
"""How a person reads ``EMPTY_REASON``: the section's read found no match, or only matches the pack already
shows or leaves out (the current turn, turns still in the prompt). Whether the section's memory holds nothing
at all is not known without another read, so the wording holds for both: "empty" read as "nothing stored"."""


def skip_wording(skipped: Skipped) -> str:
    """``"Brain (nothing new matched)"``, ``"Learnings (unavailable: …)"``: a skipped section for people; pure.

    ``EMPTY_REASON`` stays the contract's value in JSON (reference §4.1); only what is printed says it in words.
    """
    reason = EMPTY_WORDING if skipped.reason == EMPTY_REASON else skipped.reason
    return f"{skipped.heading} ({reason})"


def build_pack(
    engine: MemoryEngine,
    request: HolisticRecall | Mapping[str, Any],
    *,
    executor: Executor | None = None,
) -> ContextPack:
    """Read every section of ``request`` and render one token-budgeted pack.

    Args:
        engine: The engine to read (it must be safe to call from several threads).
        request: A ``HolisticRecall``, or its JSON object.
        executor: A thread-based executor to read on; None uses the shared pool of ``RECALL_WORKERS`` (8)
            threads, but an engine that ranks the fetch sections in one read makes it on the calling thread
            unless ``MEMORY_CORE_READ_POOL`` is set (``recall.gather``). The call waits for every read it
            started, so none outlives it.

    Returns:
        The pack: ``markdown`` within ``budget_tokens`` (4 characters per token), ``refs`` in order of first
        citation, the ``sections`` as rendered (a section trimmed away by the budget is not listed, a trimmed
        one lists the bullets left), the ``skipped`` sections with their reason (``"empty"`` or the engine
        error's text), and the engine's id.

    Raises:
        InvalidRequest: a zero budget, a blank title, a section with a blank heading, a zero limit or
            ``max_scopes == 0``, an answer section with a blank question or with ``exclude_agent_id``, an invalid
            time hint, or a process-based executor.
    """
    return assemble(engine, HolisticRecall.coerce(request, "request"), executor=executor)


def assemble(
    engine: MemoryEngine,
    request: HolisticRecall,
    *,
    executor: Executor | None = None,
    generated_at: datetime | None = None,
) -> ContextPack:
    """``build_pack`` for a validated request, with ``context.md`` frontmatter when ``generated_at`` is given.

    Raises:
        InvalidRequest: a process-based executor (reads share the engine object, which must not be pickled).
    """
    if isinstance(executor, ProcessPoolExecutor):
        raise InvalidRequest("reads run on threads; a process pool cannot share the engine", field="executor")
    try:
        descriptor = engine.descriptor()
    except Exception as exc:  # an engine error never fails the pack
        _log.warning("recall: engine descriptor unavailable, every section skipped error=%s", exc)
        reason = error_text(exc)
        return ContextPack(skipped=tuple(Skipped(heading=s.heading, reason=reason) for s in request.sections))
    settled = settle(request, gather(engine, request, descriptor.preferred_mode(), executor))
    frontmatter = None if generated_at is None else Frontmatter(engine=descriptor.id, generated_at=generated_at)
    label = PACK_LABEL if frontmatter is None else None  # packs say memory is fallible; context.md keeps its shape
    rendered = render(settled.sections, request.budget_tokens, request.title, frontmatter, label)
    covered = covered_beliefs(settled.line_hits(), rendered.refs, settled.same_as)
    if covered:
        rendered = render(settled.without(covered), request.budget_tokens, request.title, frontmatter, label)
    return ContextPack(
        markdown=rendered.markdown,
        tokens=rendered.tokens,
        refs=rendered.refs,
        sections=settled.shown(rendered),
        skipped=tuple(settled.skipped),
        engine=descriptor.id,
    )


@dataclass
class Settled:
    """The settled pack before rendering.

    Attributes:
        sections: The renderable sections, in section order.
        filled: What each of ``sections`` holds (same order): its heading, answer and hits.
        skipped: The sections left out, in section order.
        same_as: Conversation hit id → the id of the listed hit whose utterance it repeats.
    """

    sections: list[Section] = field(default_factory=list)
    filled: list[SectionHits] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    same_as: dict[str, str] = field(default_factory=dict)

    def line_hits(self) -> list[Hit]:
        """The hits of the lines-sections (answers' citations excluded), in order."""
        return [hit for s in self.filled if s.answer is None for hit in s.hits]

    def without(self, ids: Collection[str]) -> list[Section]:
        """``sections`` with the bullets of ``ids`` taken out (a section left with none renders as empty)."""
        out: list[Section] = []
        for section in self.sections:
            body = section.body
            if isinstance(body, Lines):
                section = Section(section.heading, Lines(tuple(ln for ln in body.lines if ln.id not in ids)))
            out.append(section)
        return out

    def shown(self, rendered: Rendered) -> tuple[SectionHits, ...]:
        """What each section shows in ``rendered`` (whose ``shown`` is aligned with ``sections``)."""
        out: list[SectionHits] = []
        for filled, kept in zip(self.filled, rendered.shown, strict=True):
            if kept is None:
                continue
            if isinstance(kept.body, Prose):
                out.append(filled.model_copy(update={"answer": kept.body.text}))
                continue
            by_id = {hit.id: hit for hit in filled.hits}
            out.append(SectionHits(heading=filled.heading, hits=tuple(by_id[ln.id] for ln in kept.body.lines)))
        return tuple(out)


def settle(request: HolisticRecall, gathered: Sequence[Gathered]) -> Settled:
    """Settle each section in order: filter, dedupe against earlier sections, cut to the limit.

    Args:
        request: The pack request.
        gathered: One outcome per section, in section order (beliefs already folded in).

    Returns:
        The renderable sections with what each holds, the skipped sections, and the repeated utterances.
    """
    out = Settled()
    shown: set[str] = set()
    said: dict[UtteranceKey, str] = {}
    for section, outcome in zip(request.sections, gathered, strict=True):
        heading = section.heading
        if isinstance(outcome, Failed):
            out.skipped.append(Skipped(heading=heading, reason=outcome.reason))
            continue
        if isinstance(outcome, Answered):
            out.sections.append(Section(heading, Prose(outcome.text, tuple(h.id for h in outcome.hits))))
            out.filled.append(SectionHits(heading=heading, answer=outcome.text, hits=outcome.hits))
            continue
        admitted = _admitted(request, section.filter.kinds, section.exclude_agent_id, outcome.hits, shown)
        kept = _first_utterances(admitted, said, out.same_as, section.limit)
        if not kept:
            out.skipped.append(Skipped(heading=heading, reason=EMPTY_REASON))
            continue
        shown.update(hit.id for hit in kept)
        out.sections.append(Section(heading, Lines(tuple(Line(hit.id, bullet(hit)) for hit in kept))))
        out.filled.append(SectionHits(heading=heading, hits=tuple(kept)))
    return out


def _admitted(
    request: HolisticRecall,
    kinds: Sequence[object],
    exclude_agent_id: str | None,
    hits: Sequence[Hit],
    shown: set[str],
) -> list[Hit]:
    """The hits a section may show, in order: the reference §4.1 filters (not yet cut to ``limit``)."""
    window = request.exclude_thread
    kept: list[Hit] = []
    here: set[str] = set()
    for hit in hits:
        if kinds and hit.kind not in kinds:
            continue
        if hit.id in request.exclude_ids:
            continue
        if window is not None and window.covers(hit):
            continue
        if hit.id in shown or hit.id in here:
            continue
        if exclude_agent_id is not None and hit.meta.agent_id == exclude_agent_id:
            continue
        kept.append(hit)
        here.add(hit.id)
    return kept


def _first_utterances(
    hits: Sequence[Hit], said: dict[UtteranceKey, str], same_as: dict[str, str], limit: int
) -> list[Hit]:
    """``hits`` without the utterances already listed, cut to ``limit``; records what is listed and repeated."""
    kept: list[Hit] = []
    for hit in hits:
        key = utterance_key(hit)
        if key is not None:
            if key in said:
                same_as[hit.id] = said[key]
                continue
            said[key] = hit.id
        kept.append(hit)
        if len(kept) == limit:
            break
    return kept

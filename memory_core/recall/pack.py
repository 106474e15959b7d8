"""``build_pack``: a ``HolisticRecall`` in, a ``ContextPack`` out (seed 000 "Holistic recall", reference §4.1).

The sections are read concurrently (``gather``), then settled in section order and rendered:

* answers pass through untouched, and an answer citing an item does not hide that item elsewhere;
* hits are filtered by the section's kinds, ``exclude_ids``, the thread window, the ids shown by earlier
  sections, and the section's ``exclude_agent_id``, then cut to the section's limit;
* a section left with nothing is skipped with reason ``"empty"``, a failed one with the error's text.

Only an invalid request raises (``InvalidRequest``); nothing an engine does fails a pack.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from datetime import datetime
from typing import Any

from memory_core.engine import MemoryEngine
from memory_core.errors import InvalidRequest
from memory_core.query import Hit
from memory_core.recall.bullets import bullet
from memory_core.recall.gather import Answered, Failed, Gathered, error_text, gather
from memory_core.recall.render import Frontmatter, Line, Lines, Prose, Section, render
from memory_core.recall.types import ContextPack, HolisticRecall, SectionHits, Skipped

__all__ = ["EMPTY_REASON", "assemble", "build_pack", "settle"]

EMPTY_REASON = "empty"
"""The ``Skipped.reason`` of a section that found nothing to show (reference §4.1)."""


def build_pack(
    engine: MemoryEngine,
    request: HolisticRecall | Mapping[str, Any],
    *,
    executor: Executor | None = None,
) -> ContextPack:
    """Read every section of ``request`` concurrently and render one token-budgeted pack.

    Args:
        engine: The engine to read (it must be safe to call from several threads).
        request: A ``HolisticRecall``, or its JSON object.
        executor: A thread-based executor to read on; None uses the shared pool of ``RECALL_WORKERS`` (8)
            threads. The call waits for every read it started, so none outlives it.

    Returns:
        The pack: ``markdown`` within ``budget_tokens`` (4 characters per token), ``refs`` in order of first
        citation, the settled ``sections`` (before budget trimming), the ``skipped`` sections with their reason
        (``"empty"`` or the engine error's text), and the engine's id.

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
        reason = error_text(exc)
        return ContextPack(skipped=tuple(Skipped(heading=s.heading, reason=reason) for s in request.sections))
    gathered = gather(engine, request, descriptor.preferred_mode(), executor)
    sections, shown, skipped = settle(request, gathered)
    frontmatter = None if generated_at is None else Frontmatter(engine=descriptor.id, generated_at=generated_at)
    rendered = render(sections, request.budget_tokens, request.title, frontmatter)
    return ContextPack(
        markdown=rendered.markdown,
        tokens=rendered.tokens,
        refs=rendered.refs,
        sections=tuple(shown),
        skipped=tuple(skipped),
        engine=descriptor.id,
    )


def settle(
    request: HolisticRecall, gathered: Sequence[Gathered]
) -> tuple[list[Section], list[SectionHits], list[Skipped]]:
    """Settle each section in order: filter, dedupe against earlier sections, cut to the limit.

    Args:
        request: The pack request.
        gathered: One outcome per section, in section order (beliefs already folded in).

    Returns:
        The renderable sections, what each filled section showed, and the skipped sections, each in section
        order.
    """
    shown: set[str] = set()
    sections: list[Section] = []
    filled: list[SectionHits] = []
    skipped: list[Skipped] = []
    for section, outcome in zip(request.sections, gathered, strict=True):
        heading = section.heading
        if isinstance(outcome, Failed):
            skipped.append(Skipped(heading=heading, reason=outcome.reason))
            continue
        if isinstance(outcome, Answered):
            sections.append(Section(heading, Prose(outcome.text, tuple(h.id for h in outcome.hits))))
            filled.append(SectionHits(heading=heading, answer=outcome.text, hits=outcome.hits))
            continue
        kept = _kept(request, section.filter.kinds, section.exclude_agent_id, section.limit, outcome.hits, shown)
        if not kept:
            skipped.append(Skipped(heading=heading, reason=EMPTY_REASON))
            continue
        shown.update(hit.id for hit in kept)
        sections.append(Section(heading, Lines(tuple(Line(hit.id, bullet(hit)) for hit in kept))))
        filled.append(SectionHits(heading=heading, hits=tuple(kept)))
    return sections, filled, skipped


def _kept(
    request: HolisticRecall,
    kinds: Sequence[object],
    exclude_agent_id: str | None,
    limit: int,
    hits: Sequence[Hit],
    shown: set[str],
) -> list[Hit]:
    """The hits a section shows, in order: the reference §4.1 filters, then the cut to ``limit``."""
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
        if len(kept) == limit:
            break
    return kept

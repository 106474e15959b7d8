"""Reading a pack's sections from the engine, concurrently (reference §4.1 "Gather", seed 000).

Every section is read on its own (see "Where the reads run" below), and none can fail the pack: an engine error
becomes ``Failed`` with the error's text. How each section is filled:

* **Fetch**: the section's query, else the pack's; with neither non-blank, or an engine declaring no fetch mode,
  the section reads as Latest. The mode is ``hybrid`` when served, else the first declared. The request carries
  the section's filter, ``max_scopes`` and ``exclude_agent_id`` (the engine leaves that agent out before
  ranking; the pack still drops any of its hits an engine returns), the pack's ``refers_to``, ``limit = want``
  and ``beliefs`` = the pack's belief budget.
* **Answer**: ``recall(question, filter, limit = section.limit, instructions)``; no citations or a blank answer
  leaves the section empty; an error falls back to fetching for the question when ``fallback_to_fetch``.
* **Latest**: ``list`` in pages of 100 (at most 50 pages), excluded hits dropped before the cut, sorted newest
  first (undated last), then most confident, then latest turn, keeping ``want``.

``want`` overfetches so ``limit`` hits survive the exclusions and earlier sections: ``limit + len(exclude_ids)
+ (limit if exclude_thread) + the limits of every earlier section``.

Beliefs (seed 000 "Beliefs are learnings"): a *learnings section* is a non-answer section whose filter admits
``learning``. Ranked reads ask for the first learnings section's ``want`` in beliefs; a learnings section read
as Latest also lists ``beliefs(reach, want)`` as its own concurrent read (a failure there means no beliefs).
``fold_beliefs`` then merges every section's beliefs rank by rank, each once, and interleaves them with each
learnings section's stored hits, stored first at each rank, keeping only the beliefs its filter admits. A
learnings section's keyed facts then lead it, one value per key, ahead of beliefs about their keys
(``facts.pack.facts_first``, issue 20).

Relevance floor (*memory-core* extension, ``HolisticRecall.min_relevance``; unset by default, so reference
§4.1 holds): after the reads and before the beliefs are folded, ``relevance.floor`` drops the ranked reads' hits
and beliefs that fall below the pack's score or query-coverage bar (see ``relevance``).

Where the reads run (``recall.pool``). An engine that ranks several fetches in one read (``FetchTogether``: the
SQLite engine's ``fetch_together``) gets a pack's fetch sections as one read, so what they share (the snapshot,
the query words' counts, the pending fold) is read once (issue 12 "bounded sections"); by default that read runs
on the calling thread (the query's encoding runs on the engine's encoder thread meanwhile), a host's executor
(``executor`` given) runs it on its threads, and the pack's other reads (answers, listings) run concurrently
beside it. Any other engine's sections (a remote engine's, say) read concurrently, each on its own, on the
shared pool or the executor; so do every engine's with ``MEMORY_CORE_READ_POOL`` set: more CPU per pack, and no
sooner on a quiet machine (``docs/live-turn.md``, "the read pool"). The reads are submitted from the calling
thread, never from inside a pool task, and the call waits for every future it started, so no read outlives it;
each section's hits are those ``fetch`` returns, and an error still skips only its own section.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from functools import partial
from typing import Final

from memory_core.consolidation import BeliefsRequest
from memory_core.engine import MemoryEngine
from memory_core.facts.pack import facts_first
from memory_core.limits import MAX_PAGE_LIMIT
from memory_core.meta import ItemKind
from memory_core.namespace import ROOT, Reach
from memory_core.query import FetchMode, FetchPage, FetchRequest, Hit, ListRequest, RecallRequest
from memory_core.recall.outcomes import Answered, Failed, Gathered, Read, error_text, excluded
from memory_core.recall.pool import reads_on_pool, run_all, run_here_first
from memory_core.recall.relevance import floor
from memory_core.recall.types import AnswerQuery, FetchQuery, HolisticRecall, ScopeSection

__all__ = [
    "LATEST_MAX_PAGES",
    "LATEST_PAGE",
    "Answered",
    "Failed",
    "FetchTogether",
    "Gathered",
    "Read",
    "belief_budget",
    "error_text",
    "excluded",
    "floor",
    "fold_beliefs",
    "gather",
    "is_learnings_section",
    "newest_first",
    "wants",
]

_log = logging.getLogger(__name__)

LATEST_PAGE: Final = 100
"""Page size of a Latest listing (reference §4.1)."""
LATEST_MAX_PAGES: Final = 50
"""Most listing pages a Latest section reads before sorting; a ceiling, not a target (reference §4.1)."""
_MIN_TIME: Final = datetime.min.replace(tzinfo=UTC)


# outcomes ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Listed:
    """A learnings section's ``beliefs()`` listing (empty when it failed)."""

    beliefs: list[Hit]


class _Step(StrEnum):
    ANSWER = "answer"
    FETCH = "fetch"
    LATEST = "latest"


@dataclass(frozen=True, slots=True)
class _Plan:
    step: _Step
    want: int
    query: str = ""
    beliefs: int = 0
    lists_beliefs: bool = False


# rules ------------------------------------------------------------------------------------------------------
def wants(request: HolisticRecall) -> list[int]:
    """Each section's overfetch, in section order (reference §4.1 "Overfetch").

    Returns:
        ``limit + len(exclude_ids) + (limit if exclude_thread) + sum of the earlier sections' limits`` per
        section, in hits.
    """
    out: list[int] = []
    earlier = 0
    for section in request.sections:
        window = section.limit if request.exclude_thread is not None else 0
        out.append(section.limit + len(request.exclude_ids) + window + earlier)
        earlier += section.limit
    return out


def is_learnings_section(section: ScopeSection) -> bool:
    """True for a fetched or latest section whose filter admits learnings: where the pack's beliefs go."""
    return not isinstance(section.query, AnswerQuery) and section.filter.admits_kind(ItemKind.LEARNING)


def belief_budget(request: HolisticRecall) -> int:
    """Beliefs each ranked read asks for: the first learnings section's ``want``, or 0 when there is none."""
    for section, want in zip(request.sections, wants(request), strict=True):
        if is_learnings_section(section):
            return want
    return 0


def newest_first(hits: Iterable[Hit]) -> list[Hit]:
    """Sort stably: ``observed_at`` descending (undated last), then confidence (None = 0), then ``turns.last``.

    Ties keep the engine's order (reference §4.1 "Latest").
    """

    def key(hit: Hit) -> tuple[bool, datetime, float, bool, int]:
        at = hit.meta.observed_at
        turns = hit.meta.turns
        return (
            at is not None,
            at if at is not None else _MIN_TIME,
            hit.confidence if hit.confidence is not None else 0.0,
            turns is not None,
            turns.last if turns is not None else 0,
        )

    return sorted(hits, key=key, reverse=True)


def _effective_query(request: HolisticRecall, section: ScopeSection) -> str | None:
    if not isinstance(section.query, FetchQuery):
        return None
    for query in (section.query.query, request.query):
        if query is not None and query.strip():
            return query
    return None


def _plans(request: HolisticRecall, mode: FetchMode | None) -> list[_Plan]:
    budget = min(belief_budget(request), MAX_PAGE_LIMIT)
    out: list[_Plan] = []
    for section, want in zip(request.sections, wants(request), strict=True):
        if isinstance(section.query, AnswerQuery):
            out.append(_Plan(_Step.ANSWER, want))
            continue
        query = _effective_query(request, section)
        if query is not None and mode is not None:
            out.append(_Plan(_Step.FETCH, want, query=query, beliefs=budget))
        else:
            out.append(_Plan(_Step.LATEST, want, lists_beliefs=is_learnings_section(section)))
    return out


# reads ------------------------------------------------------------------------------------------------------
def _latest(engine: MemoryEngine, request: HolisticRecall, section: ScopeSection, want: int) -> list[Hit]:
    hits: list[Hit] = []
    cursor: str | None = None
    for _ in range(LATEST_MAX_PAGES):
        page = engine.list(ListRequest(filter=section.filter, limit=LATEST_PAGE, cursor=cursor))
        hits.extend(hit for hit in page.items if not excluded(request, section, hit))
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    return newest_first(hits)[:want]


def _fetch(
    engine: MemoryEngine,
    request: HolisticRecall,
    section: ScopeSection,
    query: str,
    want: int,
    beliefs: int,
    mode: FetchMode | None,
) -> Read:
    if mode is None:
        return Read(_latest(engine, request, section, want), [])
    page = engine.fetch(_fetch_request(request, section, query, want, beliefs, mode))
    return Read(list(page.hits), list(page.beliefs), query=query)


def _fetch_request(
    request: HolisticRecall, section: ScopeSection, query: str, want: int, beliefs: int, mode: FetchMode
) -> FetchRequest:
    return FetchRequest(
        query=query,
        mode=mode,
        filter=section.filter,
        limit=min(want, MAX_PAGE_LIMIT),
        beliefs=beliefs,
        refers_to=request.refers_to,
        max_scopes=section.max_scopes,
        exclude_agent_id=section.exclude_agent_id,
    )


FetchTogether = Callable[[Sequence[FetchRequest]], list[FetchPage | Exception]]
"""An engine's ``fetch_together``: several fetches ranked in one read (``SQLiteEngine.fetch_together``); one page,
or the error ``fetch`` would have raised for that request alone, per request, in order."""


def _fetch_all(
    fetch_together: FetchTogether,
    request: HolisticRecall,
    fetched: Sequence[tuple[ScopeSection, _Plan]],
    mode: FetchMode,
) -> list[Gathered]:
    """The fetch sections' reads in one engine call; an error fails only its own section (or every one)."""
    try:
        pages = fetch_together(
            [_fetch_request(request, s, plan.query, plan.want, plan.beliefs, mode) for s, plan in fetched]
        )
    except Exception as exc:  # an engine error never fails the pack (reference §4.1)
        pages = [exc] * len(fetched)
    out: list[Gathered] = []
    for (section, plan), page in zip(fetched, pages, strict=True):
        if isinstance(page, Exception):
            _log.warning("recall: section skipped heading=%r error=%s", section.heading, page)
            out.append(Failed(error_text(page)))
        else:
            out.append(Read(list(page.hits), list(page.beliefs), query=plan.query))
    return out


def _answer(
    engine: MemoryEngine, request: HolisticRecall, section: ScopeSection, want: int, mode: FetchMode | None
) -> Gathered:
    query = section.query
    assert isinstance(query, AnswerQuery)
    try:
        answer = engine.recall(
            RecallRequest(
                question=query.question,
                filter=section.filter,
                limit=section.limit,
                instructions=query.instructions,
                refers_to=request.refers_to,
            )
        )
    except Exception as exc:
        if not query.fallback_to_fetch:
            raise
        _log.debug("recall: answer failed, fetching instead heading=%r error=%s", section.heading, exc)
        return _fetch(engine, request, section, query.question, want, 0, mode)
    text = answer.answer.strip()
    if not answer.citations or not text:
        return Read([], [])
    hits = tuple(Hit(id=c.id, kind=c.kind, text=c.snippet, meta=c.meta, score=c.score or 0.0) for c in answer.citations)
    return Answered(text=text, hits=hits)


def _read(
    engine: MemoryEngine, request: HolisticRecall, section: ScopeSection, plan: _Plan, mode: FetchMode | None
) -> Gathered:
    try:
        if plan.step is _Step.ANSWER:
            return _answer(engine, request, section, plan.want, mode)
        if plan.step is _Step.FETCH:
            return _fetch(engine, request, section, plan.query, plan.want, plan.beliefs, mode)
        return Read(_latest(engine, request, section, plan.want), [])
    except Exception as exc:  # an engine error never fails the pack (reference §4.1)
        _log.warning("recall: section skipped heading=%r error=%s", section.heading, exc)
        return Failed(error_text(exc))


def _list_beliefs(engine: MemoryEngine, section: ScopeSection, want: int) -> _Listed:
    reach = section.filter.reach if section.filter.reach is not None else Reach.subtree(ROOT)
    try:
        return _Listed(list(engine.beliefs(BeliefsRequest(reach=reach, limit=min(want, MAX_PAGE_LIMIT)))))
    except Exception as exc:  # a failed belief read leaves the section to its stored learnings
        _log.warning("recall: beliefs unavailable heading=%r error=%s", section.heading, exc)
        return _Listed([])


# beliefs ----------------------------------------------------------------------------------------------------
def _interleave(first: Sequence[Hit], second: Sequence[Hit]) -> list[Hit]:
    out: list[Hit] = []
    for rank in range(max(len(first), len(second))):
        if rank < len(first):
            out.append(first[rank])
        if rank < len(second):
            out.append(second[rank])
    return out


def fold_beliefs(request: HolisticRecall, gathered: Sequence[Gathered]) -> list[Gathered]:
    """Merge every read's beliefs rank by rank (each id once) into each learnings section, stored hits first.

    Args:
        request: The pack request.
        gathered: One outcome per section, in section order.

    Returns:
        The outcomes with each learnings section's hits interleaved with the beliefs its filter admits; the
        ``beliefs`` of every ``Read`` are consumed (left empty).
    """
    lists = [g.beliefs for g in gathered if isinstance(g, Read)]
    merged: dict[str, Hit] = {}
    for rank in range(max((len(b) for b in lists), default=0)):
        for beliefs in lists:
            if rank < len(beliefs):
                merged.setdefault(beliefs[rank].id, beliefs[rank])
    out: list[Gathered] = []
    for section, outcome in zip(request.sections, gathered, strict=True):
        if not isinstance(outcome, Read):
            out.append(outcome)
            continue
        hits = outcome.hits
        if merged and is_learnings_section(section):
            admitted = [b for b in merged.values() if section.filter.matches(ItemKind.LEARNING, b.meta)]
            hits = _interleave(hits, admitted)
        if is_learnings_section(section):
            hits = facts_first(hits)  # a keyed fact's current value leads (issue 20; ``facts.pack``)
        out.append(Read(hits, [], outcome.query))
    return out


def gather(
    engine: MemoryEngine, request: HolisticRecall, mode: FetchMode | None, executor: Executor | None = None
) -> list[Gathered]:
    """Read every section of ``request`` and fold the beliefs in (on the caller, an executor or the shared pool).

    Args:
        engine: The engine to read.
        request: A validated request.
        mode: The fetch mode ranked sections use (``EngineDescriptor.preferred_mode()``); None reads Latest.
        executor: A thread-based executor, or None for the shared pool (an engine's one read of the fetch
            sections then runs on the calling thread, unless ``MEMORY_CORE_READ_POOL`` is set).

    Returns:
        One outcome per section, in section order. Never raises for an engine error.
    """
    plans = _plans(request, mode)
    fetched = [(s, p) for s, p in zip(request.sections, plans, strict=True) if p.step is _Step.FETCH]
    fetch_together: FetchTogether | None = getattr(engine, "fetch_together", None)
    # one read for the fetch sections, on the caller's thread (the default) or a host's executor, the other reads
    # beside it; every section on the shared pool with ``MEMORY_CORE_READ_POOL`` ("the read pool", live-turn.md)
    combined = mode is not None and len(fetched) > 1 and fetch_together is not None
    here = combined and executor is None and not reads_on_pool()
    together = combined and (executor is not None or here)
    calls: list[Callable[[], Gathered | _Listed | list[Gathered]]] = []
    if together:
        assert mode is not None and fetch_together is not None
        calls.append(partial(_fetch_all, fetch_together, request, fetched, mode))
    for section, plan in zip(request.sections, plans, strict=True):
        if not (together and plan.step is _Step.FETCH):
            calls.append(partial(_read, engine, request, section, plan, mode))
        if plan.lists_beliefs:
            calls.append(partial(_list_beliefs, engine, section, plan.want))
    results = run_here_first(calls) if here else run_all(calls, executor)
    batch: list[Gathered] = []
    if together:
        first = results[0]
        assert isinstance(first, list)
        batch = first
    fetched_outcomes = iter(batch)
    gathered: list[Gathered] = []
    position = 1 if together else 0
    for plan in plans:
        if together and plan.step is _Step.FETCH:
            gathered.append(next(fetched_outcomes))
            continue
        outcome = results[position]
        position += 1
        assert not isinstance(outcome, (_Listed, list))
        if plan.lists_beliefs:
            listed = results[position]
            position += 1
            assert isinstance(listed, _Listed)
            if isinstance(outcome, Read):
                outcome = Read(outcome.hits, listed.beliefs, outcome.query)
        gathered.append(outcome)
    return fold_beliefs(request, floor(request, gathered))

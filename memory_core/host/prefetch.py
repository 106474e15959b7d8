"""``PrefetchMemory``: the prefetch cache of packs (reference §6.3, seed 001 ``lifecycle::prefetch``).

Live turns never wait on engine reads. ``pre_turn`` logs the user turn as ``AgentMemory.pre_turn`` does
(synchronously, ``accepted``; a failure is ``log_error``, never raised), then returns at once the **last
completed** pack for (agent, thread), re-filtered by this call's exclusions (``refilter``: never the turn just
logged, never a turn of the thread at or after ``in_prompt_from``) and marked as coming from an earlier lookup
(``PrefetchedTurn.earlier_lookup``, and a notice leading the markdown); a cold cache gives an empty pack. It
then queues a refresh for this turn's text on the wrapper's own pool. ``recall_for_compaction`` does the same
with the thread's compaction pack (cached apart from its turn packs): the summariser uses completed context only.

Limits (``PrefetchLimits``, the reference's values):

| limit | value | when reached |
| --- | --- | --- |
| entry TTL | 60 s | an older pack is not served (``expired``) |
| per-work timeout | 120 s | a refresh finishing later is dropped (``timed_out``) |
| entries per wrapper | 64 | the least recently touched idle entry is evicted; none idle: the refresh is skipped |
| pending refreshes per entry | 16 | the refresh is skipped (``skipped_busy``) |
| pack size, citations included | 64 KiB of JSON | the new pack is dropped (``oversize``) |
| workers | 8 | the pool's size; queued refreshes wait their turn, never the caller |

Saturation skips work rather than waiting. A queued refresh that finds a newer one queued for its entry skips
itself (``superseded``), and a result older than the entry's pack is dropped.

Writes through the wrapper that change content (``store``, ``forget``) clear every pack on success and advance
a revision, so a refresh started before the write is dropped when it completes (``stale``); queued refreshes
stay queued. Conversation logs (``pre_turn``'s, ``post_turn``'s) do not invalidate: a pack already leaves out
the thread's turns still in the prompt.

The wrapper owns its pool (``ThreadPoolExecutor`` of ``workers`` threads) and shuts it down in ``close``; a host
may pass its own executor instead (it then closes it). ``clock`` (monotonic seconds) is injectable, so tests
drive TTLs and timeouts without sleeping.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, fields
from functools import partial
from typing import Any

from memory_core._model import ContractModel
from memory_core.consolidation import WriteOptions
from memory_core.engine import AnyItem, MemoryEngine, check_engine
from memory_core.errors import MemoryCoreError
from memory_core.items import Role, Turn
from memory_core.lifecycle.agent import (
    AgentMemory,
    Compaction,
    PostTurn,
    PostTurnReport,
    PreTurn,
    TurnContext,
    turn_item,
)
from memory_core.lifecycle.layout import MemoryLayout, check_agent_id, check_layout
from memory_core.lifecycle.policy import PACK_TITLE, CoreScope, RecallPolicy, standard_sections
from memory_core.query import ForgetReport, StoreReceipt
from memory_core.recall import EMPTY_REASON, build_pack
from memory_core.recall.bullets import bullet
from memory_core.recall.render import Line, Lines, Prose, Section, estimate_tokens, render
from memory_core.recall.types import ContextPack, HolisticRecall, SectionHits, ThreadWindow

__all__ = [
    "NOTICE",
    "PrefetchLimits",
    "PrefetchMemory",
    "PrefetchStats",
    "PrefetchedPack",
    "PrefetchedTurn",
    "refilter",
]

log = logging.getLogger(__name__)

NOTICE = "_From an earlier memory lookup: it may be stale or unrelated to this message._"
"""The line leading a reused pack (reference §6.3: packs identify themselves as results of an earlier lookup)."""


@dataclass(frozen=True)
class PrefetchLimits:
    """The cache's bounds (reference §6.3 "Cache limits"; seconds, counts, bytes)."""

    ttl_s: float = 60.0
    work_timeout_s: float = 120.0
    entries: int = 64
    pack_bytes: int = 64 * 1024
    workers: int = 8
    pending_per_entry: int = 16


@dataclass
class PrefetchStats:
    """What the cache did, counted (a snapshot from ``PrefetchMemory.stats``)."""

    hits: int = 0
    cold: int = 0
    expired: int = 0
    queued: int = 0
    refreshed: int = 0
    superseded: int = 0
    skipped_busy: int = 0
    skipped_full: int = 0
    evicted: int = 0
    stale: int = 0
    oversize: int = 0
    timed_out: int = 0
    failed: int = 0


class PrefetchedTurn(TurnContext):
    """``TurnContext`` plus where its pack came from.

    Attributes:
        earlier_lookup: True when ``pack`` is a cached pack from an earlier turn (False: a cold cache, an empty
            pack).
        age_s: Seconds since that pack was completed (None when cold).
    """

    earlier_lookup: bool = False
    age_s: float | None = None


_Key = tuple[str, str, bool]
"""(agent, thread, compaction): turn packs and compaction packs of one thread are cached apart."""


class PrefetchedPack(ContractModel):
    """``{pack, earlier_lookup, age_s?}``: a compaction pack from the cache (``earlier_lookup``), or an empty one."""

    pack: ContextPack
    earlier_lookup: bool = False
    age_s: float | None = None


@dataclass
class _Entry:
    touched: float
    pack: ContextPack | None = None
    completed_at: float = 0.0
    completed_ticket: int = 0
    pending: int = 0
    latest_ticket: int = 0


def refilter(
    pack: ContextPack,
    exclude_ids: Sequence[str],
    window: ThreadWindow | None,
    budget_tokens: int,
    title: str = PACK_TITLE,
) -> ContextPack:
    """``pack`` without the hits of ``exclude_ids`` or inside ``window``, re-rendered under ``NOTICE``; pure.

    Answers (prose sections) are kept as they are. The result fits ``budget_tokens`` with the notice line; a
    pack left with nothing is empty (no notice).
    """
    excluded = set(exclude_ids)
    sections: list[Section] = []
    filled: list[SectionHits] = []
    for s in pack.sections:
        if s.answer is not None:
            sections.append(Section(s.heading, Prose(s.answer, tuple(h.id for h in s.hits))))
            filled.append(s)
            continue
        hits = tuple(h for h in s.hits if h.id not in excluded and not (window is not None and window.covers(h)))
        sections.append(Section(s.heading, Lines(tuple(Line(h.id, bullet(h)) for h in hits))))
        filled.append(SectionHits(heading=s.heading, hits=hits))
    notice_tokens = estimate_tokens(NOTICE + "\n\n")
    rendered = render(sections, max(1, budget_tokens - notice_tokens), title)
    if not rendered.markdown:
        return ContextPack(skipped=pack.skipped, engine=pack.engine)
    shown: list[SectionHits] = []
    for section, kept in zip(filled, rendered.shown, strict=True):
        if kept is None:
            continue
        if isinstance(kept.body, Prose):
            shown.append(section.model_copy(update={"answer": kept.body.text}))
            continue
        by_id = {h.id: h for h in section.hits}
        shown.append(SectionHits(heading=section.heading, hits=tuple(by_id[ln.id] for ln in kept.body.lines)))
    markdown = f"{NOTICE}\n\n{rendered.markdown}"
    return ContextPack(
        markdown=markdown,
        tokens=estimate_tokens(markdown),
        refs=rendered.refs,
        sections=tuple(shown),
        skipped=pack.skipped,
        engine=pack.engine,
    )


def _unreadable(pack: ContextPack) -> bool:
    return not pack.markdown and any(s.reason != EMPTY_REASON for s in pack.skipped)


class PrefetchMemory:
    """The prefetch cache around one engine and layout (see the module docstring).

    Args:
        engine: The engine (shared by the caller and the pool's threads).
        layout: The layout; each agent's turns go to ``layout.conversations(agent_id)``.
        policy: The recall policy (default ``RecallPolicy.from_settings()``).
        core: Core scopes read as in ``AgentMemory.with_core``.
        limits: The bounds.
        clock: Monotonic seconds (injectable for tests).
        executor: A host-owned thread executor for refreshes; None: the wrapper's own pool of
            ``limits.workers`` threads, shut down by ``close``.

    Raises:
        InvalidRequest: a non-engine, a non-layout, a malformed policy or core scope.
    """

    def __init__(
        self,
        engine: MemoryEngine,
        layout: MemoryLayout,
        *,
        policy: RecallPolicy | Mapping[str, Any] | None = None,
        core: Sequence[CoreScope | Mapping[str, Any]] = (),
        limits: PrefetchLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        executor: Executor | None = None,
    ) -> None:
        self.engine = check_engine(engine)
        self.layout = check_layout(layout)
        self.limits = limits or PrefetchLimits()
        base = AgentMemory(self.engine, self.layout, "assistant")
        if policy is not None:
            base = base.with_policy(policy)
        base = base.with_core(core)
        self.policy = base.policy
        self.caps = base.caps
        self.core = base.core
        self._clock = clock
        self._owned = executor is None
        self._pool: Executor = executor or ThreadPoolExecutor(self.limits.workers, thread_name_prefix="prefetch")
        self._lock = threading.Lock()
        self._entries: dict[_Key, _Entry] = {}
        self._revision = 0
        self._tickets = 0
        self._stats = PrefetchStats()
        self._closed = False

    # the live turn ---------------------------------------------------------------------------------------
    def pre_turn(self, agent_id: str, turn: PreTurn | Mapping[str, Any] | str) -> PrefetchedTurn:
        """Log the user turn, return the last completed pack for (agent, thread) re-filtered, queue a refresh.

        Returns:
            ``PrefetchedTurn``: the cached pack (``earlier_lookup``) or an empty one, with the log's receipt or
            error.

        Raises:
            InvalidRequest: a blank agent id, thread id or text, or another malformed field (nothing is logged).
        """
        agent = check_agent_id(agent_id)
        req = PreTurn.coerce(turn, "turn")
        item = turn_item(
            self.layout.conversations(agent),
            agent,
            req.thread_id,
            req.turn_index,
            Turn(role=Role.USER, text=self.caps.user(req.user_text)),  # as AgentMemory logs it (lifecycle.caps)
            at=req.at,
            observed_actor=req.observed_actor,
        )
        logged, log_error = self._log(item)
        window = ThreadWindow(thread_id=req.thread_id, from_turn=req.in_prompt_from)
        request = HolisticRecall(
            query=req.user_text[: self.caps.user_text],  # ranked for what memory keeps, as AgentMemory
            sections=standard_sections(self.layout, agent, self.policy, self.core),
            budget_tokens=self.policy.budget_tokens,
            title=PACK_TITLE,
            exclude_ids=(item.id,),
            exclude_thread=window,
            min_relevance=self.policy.min_relevance,
        )
        cached, age = self._take((agent, req.thread_id, False), partial(build_pack, self.engine, request))
        if cached is None:
            return PrefetchedTurn(pack=ContextPack(), logged=logged, log_error=log_error)
        pack = refilter(cached, (item.id,), window, self.policy.budget_tokens)
        return PrefetchedTurn(pack=pack, logged=logged, log_error=log_error, earlier_lookup=True, age_s=age)

    def recall_for_compaction(self, agent_id: str, compaction: Compaction | Mapping[str, Any] | str) -> PrefetchedPack:
        """The last completed compaction pack for (agent, thread) at once, and a refresh queued for this span.

        Compaction uses completed context only (reference §6.3): the summariser never waits on the engine; the
        pack is marked as an earlier lookup, and a cold cache gives an empty one.

        Raises:
            InvalidRequest: a blank agent id or thread id, or a malformed turn.
        """
        agent = check_agent_id(agent_id)
        req = Compaction.coerce(compaction, "compaction")
        memory = AgentMemory(self.engine, self.layout, agent).with_policy(self.policy).with_core(self.core)
        cached, age = self._take((agent, req.thread_id, True), partial(memory.recall_for_compaction, req))
        if cached is None:
            return PrefetchedPack(pack=ContextPack())
        return PrefetchedPack(
            pack=refilter(cached, (), None, self.policy.budget_tokens), earlier_lookup=True, age_s=age
        )

    def post_turn(self, agent_id: str, turn: PostTurn | Mapping[str, Any] | str) -> PostTurnReport:
        """``AgentMemory.post_turn`` (synchronous; engine errors propagate; packs are kept).

        Raises:
            InvalidRequest: a malformed turn.
            MemoryCoreError: the engine's error.
        """
        return AgentMemory(self.engine, self.layout, agent_id).with_policy(self.policy).post_turn(turn)

    # writes that change content --------------------------------------------------------------------------
    def store(self, item: AnyItem | Mapping[str, Any]) -> StoreReceipt:
        """``engine.store``; on success every pack is cleared (``invalidate``)."""
        receipt = self.engine.store(item)
        self.invalidate()
        return receipt

    def forget(self, target: Any) -> ForgetReport:
        """``engine.forget``; on success every pack is cleared (``invalidate``)."""
        report = self.engine.forget(target)
        self.invalidate()
        return report

    def invalidate(self) -> None:
        """Clear every cached pack and advance the revision (refreshes in flight are dropped when they finish)."""
        with self._lock:
            self._revision += 1
            for entry in self._entries.values():
                entry.pack = None

    # state -----------------------------------------------------------------------------------------------
    @property
    def stats(self) -> PrefetchStats:
        """A snapshot of the counters."""
        with self._lock:
            return PrefetchStats(**{f.name: getattr(self._stats, f.name) for f in fields(PrefetchStats)})

    def entries(self) -> int:
        """Entries held (each an (agent, thread) with a pack or refreshes pending)."""
        with self._lock:
            return len(self._entries)

    def pending(self, agent_id: str, thread_id: str, *, compaction: bool = False) -> int:
        """Refreshes queued or running for (agent, thread), or for its compaction pack."""
        with self._lock:
            entry = self._entries.get((agent_id, thread_id, compaction))
            return 0 if entry is None else entry.pending

    def close(self) -> None:
        """Stop taking refreshes; shut the owned pool down, dropping queued refreshes (running ones finish)."""
        with self._lock:
            self._closed = True
        if self._owned:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> PrefetchMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # internals -------------------------------------------------------------------------------------------
    def _log(self, item: Any) -> tuple[StoreReceipt | None, str | None]:
        try:
            return self.engine.store_with(item, WriteOptions.accepted()), None
        except Exception as exc:  # as AgentMemory.pre_turn: a failed log is reported, never raised
            return None, str(exc) if isinstance(exc, MemoryCoreError) else f"{type(exc).__name__}: {exc}"

    def _take(self, key: _Key, compute: Callable[[], ContextPack]) -> tuple[ContextPack | None, float | None]:
        """The entry's pack if fresh (counted), and a refresh queued unless a bound says skip."""
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            cached: ContextPack | None = None
            age: float | None = None
            if entry is not None and entry.pack is not None:
                age = now - entry.completed_at
                if age <= self.limits.ttl_s:
                    cached = entry.pack
                    self._stats.hits += 1
                else:
                    entry.pack = None
                    age = None
                    self._stats.expired += 1
            else:
                self._stats.cold += 1
            if entry is None:
                entry = self._admit(key, now)
            if entry is not None:
                entry.touched = now
                self._queue(entry, compute)
        return cached, age

    def _admit(self, key: _Key, now: float) -> _Entry | None:
        """A new entry for ``key``, evicting the least recently touched idle one at the limit (None: all busy)."""
        if self._closed:
            return None
        if len(self._entries) >= self.limits.entries:
            idle = [(e.touched, k) for k, e in self._entries.items() if e.pending == 0]
            if not idle:
                self._stats.skipped_full += 1
                log.warning("prefetch: %d entries, none idle: refresh skipped", len(self._entries))
                return None
            del self._entries[min(idle)[1]]
            self._stats.evicted += 1
        entry = _Entry(touched=now)
        self._entries[key] = entry
        return entry

    def _queue(self, entry: _Entry, compute: Callable[[], ContextPack]) -> None:
        if self._closed:
            return
        if entry.pending >= self.limits.pending_per_entry:
            self._stats.skipped_busy += 1
            log.warning("prefetch: %d refreshes pending for one thread: refresh skipped", entry.pending)
            return
        self._tickets += 1
        ticket = self._tickets
        entry.latest_ticket = ticket
        entry.pending += 1
        try:
            self._pool.submit(self._refresh, entry, ticket, self._revision, compute)
        except RuntimeError:  # the pool was shut down
            entry.pending -= 1
            self._stats.skipped_busy += 1
            return
        self._stats.queued += 1

    def _refresh(self, entry: _Entry, ticket: int, revision: int, compute: Callable[[], ContextPack]) -> None:
        with self._lock:
            if ticket != entry.latest_ticket:  # a newer refresh is queued behind this one
                entry.pending -= 1
                self._stats.superseded += 1
                return
        started = self._clock()
        pack: ContextPack | None = None
        try:
            pack = compute()
        except Exception:
            log.exception("prefetch: refresh failed")
        finished = self._clock()
        size = len(pack.to_json().encode("utf-8")) if pack is not None else 0
        with self._lock:
            entry.pending -= 1
            if pack is None or _unreadable(pack):
                self._stats.failed += 1
            elif finished - started > self.limits.work_timeout_s:
                self._stats.timed_out += 1
            elif revision != self._revision:
                self._stats.stale += 1
            elif size > self.limits.pack_bytes:
                self._stats.oversize += 1
                log.warning("prefetch: a %d-byte pack is over %d bytes: dropped", size, self.limits.pack_bytes)
            elif ticket < entry.completed_ticket:
                self._stats.superseded += 1
            else:
                entry.pack = pack
                entry.completed_at = finished
                entry.completed_ticket = ticket
                self._stats.refreshed += 1

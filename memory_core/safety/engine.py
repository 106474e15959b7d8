"""``ScrubbingEngine``: any ``MemoryEngine`` behind the scrub pass (reference §6.2, seed 001's ``guard``).

Every write method (``store``, ``store_with``, ``store_many``, ``store_many_with``) stores the item as
``scrub_item`` leaves it, so no credential or personal identifier reaches the engine, and no belief an engine or
worker builds from stored items can carry one; an item whose ids hold a credential is refused. The reason a
``retract``, ``rollback`` or ``move`` writes into the log is scrubbed the same way. Reads, forgets and builds pass
through untouched. Anything else
the wrapped engine offers (an engine's own extras) is reached through the wrapper as well.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from memory_core.consolidation import BeliefsRequest, ConsolidateReceipt, ConsolidateRequest, WriteOptions
from memory_core.descriptor import EngineDescriptor, EngineHealth
from memory_core.engine import AnyItem, Hits, MemoryEngine, Receipts, Scopes, check_engine
from memory_core.explore import ExplorePage, ExploreRequest
from memory_core.memory_log import LogChange, Tier
from memory_core.namespace import Reach
from memory_core.query import (
    EraseReport,
    EraseRequest,
    ExportPage,
    FetchPage,
    FetchRequest,
    ForgetReport,
    ForgetTarget,
    GetRequest,
    ListPage,
    ListRequest,
    RecallAnswer,
    RecallRequest,
    StoreReceipt,
)
from memory_core.safety.detector import Policy
from memory_core.safety.items import scrub_item
from memory_core.safety.scrub import scrub

__all__ = ["ScrubbingEngine", "stored_ids", "unwrap"]

log = logging.getLogger("memory_core.safety")

_T = TypeVar("_T")


class ScrubbingEngine(MemoryEngine):
    """Wrap ``engine`` so every item it stores is scrubbed first.

    Logs one ``[memory:timing]`` debug line per write (op, engine id, elapsed ms, outcome, item count); never
    content.

    Args:
        engine: The engine to wrap (a ``ScrubbingEngine`` is not wrapped twice: its inner engine is taken).
        policy: The scrub policy; None: ``Policy.default()`` (corroborated, emails kept).

    Raises:
        InvalidRequest: ``engine`` is not a ``MemoryEngine``.
    """

    def __init__(self, engine: MemoryEngine, policy: Policy | None = None) -> None:
        self.inner: MemoryEngine = unwrap(check_engine(engine))
        self.policy = policy or Policy.default()

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (a half-built wrapper): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"ScrubbingEngine({self.inner!r})"

    def _write(self, op: str, items: Sequence[AnyItem], write: Callable[[list[AnyItem]], _T]) -> _T:
        """Scrub ``items``, hand them to ``write``, and log one timing line (op, engine, ms, outcome, count)."""
        started = time.perf_counter()
        outcome = "ok"
        try:
            return write([scrub_item(item, self.policy) for item in items])
        except Exception as exc:
            outcome = type(exc).__name__
            raise
        finally:
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "[memory:timing] op=%s engine=%s elapsed_ms=%.2f outcome=%s count=%d",
                    op,
                    self.inner.descriptor().id,
                    (time.perf_counter() - started) * 1000,
                    outcome,
                    len(items),
                )

    # identity ------------------------------------------------------------------------------------------
    def descriptor(self) -> EngineDescriptor:
        """The wrapped engine's descriptor."""
        return self.inner.descriptor()

    def health(self) -> EngineHealth:
        """The wrapped engine's health."""
        return self.inner.health()

    def close(self) -> None:
        """Close the wrapped engine."""
        self.inner.close()

    # writes: scrubbed ----------------------------------------------------------------------------------
    def _store(self, item: AnyItem) -> StoreReceipt:
        return self._write("store", [item], lambda scrubbed: self.inner.store(scrubbed[0]))

    def _store_with(self, item: AnyItem, options: WriteOptions) -> StoreReceipt:
        return self._write("store_with", [item], lambda scrubbed: self.inner.store_with(scrubbed[0], options))

    def _store_many(self, items: Sequence[AnyItem]) -> Receipts:
        return self._write("store_many", items, self.inner.store_many)

    def _store_many_with(self, items: Sequence[AnyItem], options: WriteOptions) -> Receipts:
        return self._write("store_many_with", items, lambda scrubbed: self.inner.store_many_with(scrubbed, options))

    # log writes: the reason scrubbed (it is stored in the log and printed by ``memory-core log``) ------------
    def _retract(self, ids: Sequence[str], reason: str) -> LogChange:
        return self.inner.retract(ids, scrub(reason, self.policy))

    def _rollback(self, to_lsn: int, reason: str) -> LogChange:
        return self.inner.rollback(to_lsn, scrub(reason, self.policy))

    def _move(self, ids: Sequence[str], tier: Tier, reason: str) -> LogChange:
        return self.inner.move(ids, tier, scrub(reason, self.policy))

    # everything else: passed through -------------------------------------------------------------------
    def _recall(self, request: RecallRequest) -> RecallAnswer:
        return self.inner.recall(request)

    def _fetch(self, request: FetchRequest) -> FetchPage:
        return self.inner.fetch(request)

    def _forget(self, target: ForgetTarget) -> ForgetReport:
        return self.inner.forget(target)

    def _forget_within(self, ids: Sequence[str], reach: Reach) -> ForgetReport:
        return self.inner.forget_within(ids, reach)

    def _list(self, request: ListRequest) -> ListPage:
        return self.inner.list(request)

    def _list_preview(self, request: ListRequest) -> ListPage:
        return self.inner.list_preview(request)

    def _export(self, request: ListRequest) -> ExportPage:
        return self.inner.export(request)

    def _erase(self, request: EraseRequest) -> EraseReport:
        return self.inner.erase(request)

    def _explore(self, request: ExploreRequest) -> ExplorePage:
        return self.inner.explore(request)

    def _get(self, request: GetRequest) -> Hits:
        return self.inner.get(request)

    def _consolidate(self, request: ConsolidateRequest) -> ConsolidateReceipt:
        return self.inner.consolidate(request)

    def _beliefs(self, request: BeliefsRequest) -> Hits:
        return self.inner.beliefs(request)

    def _scopes(self, request: ConsolidateRequest) -> Scopes:
        return self.inner.scopes(request)


def unwrap(engine: MemoryEngine) -> MemoryEngine:
    """The engine inside any ``ScrubbingEngine`` layers (``engine`` itself when it is not wrapped)."""
    while isinstance(engine, ScrubbingEngine):
        engine = engine.inner
    return engine


def stored_ids(engine: MemoryEngine, item: AnyItem) -> tuple[str, ...]:
    """The ids ``item`` may be stored under by ``engine``: its own, and the scrubbed item's when ``engine`` scrubs.

    A caller that must leave out the item it is storing (``AgentMemory.pre_turn``'s pack) names both.
    """
    if not isinstance(engine, ScrubbingEngine):
        return (item.id,)
    return tuple(dict.fromkeys((item.id, scrub_item(item, engine.policy).id)))

"""Test doubles for the lifecycle tests: an engine wrapper that records every hook call and can fail on demand."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memory_core.consolidation import (
    BeliefsRequest,
    ConsolidateReceipt,
    ConsolidateRequest,
    ConsolidateStatus,
    WriteOptions,
)
from memory_core.descriptor import EngineDescriptor, EngineHealth
from memory_core.engine import AnyItem, MemoryEngine
from memory_core.engines.reference import ReferenceEngine
from memory_core.explore import ExplorePage, ExploreRequest
from memory_core.namespace import Reach
from memory_core.query import (
    EraseReport,
    EraseRequest,
    ExportPage,
    FetchMode,
    FetchPage,
    FetchRequest,
    ForgetReport,
    ForgetTarget,
    GetRequest,
    Hit,
    ListPage,
    ListRequest,
    RecallAnswer,
    RecallRequest,
    StoreReceipt,
)


@dataclass(frozen=True)
class Call:
    """One hook call: the operation, its argument(s) and the thread that made it."""

    op: str
    arg: Any
    options: WriteOptions | None = None
    thread: str = field(default_factory=lambda: threading.current_thread().name)


Rule = Callable[[str, Any], BaseException | None]


class Recording(MemoryEngine):
    """Delegates every hook to ``inner`` (a ``ReferenceEngine`` by default) and records the call first.

    ``fail_when(op, predicate, error)`` makes calls of ``op`` whose argument passes ``predicate`` raise ``error``.
    ``modes`` overrides the fetch modes the descriptor declares.
    """

    def __init__(
        self,
        inner: MemoryEngine | None = None,
        *,
        modes: Sequence[FetchMode] | None = None,
    ) -> None:
        self.inner = inner if inner is not None else ReferenceEngine()
        self.calls: list[Call] = []
        self._rules: list[tuple[str, Rule]] = []
        self._lock = threading.Lock()
        self._modes = tuple(modes) if modes is not None else None

    # control -------------------------------------------------------------------------------------------
    def fail_when(self, op: str, error: BaseException, predicate: Callable[[Any], bool] = lambda _: True) -> None:
        self._rules.append((op, lambda name, arg: error if name == op and predicate(arg) else None))

    def ops(self) -> list[str]:
        with self._lock:
            return [c.op for c in self.calls]

    def of(self, op: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.op == op]

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()

    def _enter(self, op: str, arg: Any, options: WriteOptions | None = None) -> None:
        with self._lock:
            self.calls.append(Call(op, arg, options))
        for _, rule in self._rules:
            error = rule(op, arg)
            if error is not None:
                raise error

    # identity ------------------------------------------------------------------------------------------
    def descriptor(self) -> EngineDescriptor:
        base = self.inner.descriptor()
        changes: dict[str, Any] = {}
        if self._modes is not None:
            changes["fetch_modes"] = self._modes
        return base.model_copy(update=changes) if changes else base

    def health(self) -> EngineHealth:
        return self.inner.health()

    # hooks ---------------------------------------------------------------------------------------------
    def _recall(self, request: RecallRequest) -> RecallAnswer:
        self._enter("recall", request)
        return self.inner._recall(request)

    def _fetch(self, request: FetchRequest) -> FetchPage:
        self._enter("fetch", request)
        return self.inner._fetch(request)

    def _store(self, item: AnyItem) -> StoreReceipt:
        self._enter("store", item)
        return self.inner._store(item)

    def _store_with(self, item: AnyItem, options: WriteOptions) -> StoreReceipt:
        self._enter("store_with", item, options)
        return self.inner._store_with(item, options)

    def _store_many(self, items: Sequence[AnyItem]) -> list[StoreReceipt]:
        self._enter("store_many", list(items))
        return self.inner._store_many(items)

    def _store_many_with(self, items: Sequence[AnyItem], options: WriteOptions) -> list[StoreReceipt]:
        self._enter("store_many_with", list(items), options)
        return self.inner._store_many_with(items, options)

    def _forget(self, target: ForgetTarget) -> ForgetReport:
        self._enter("forget", target)
        return self.inner._forget(target)

    def _forget_within(self, ids: Sequence[str], reach: Reach) -> ForgetReport:
        self._enter("forget_within", (ids, reach))
        return self.inner._forget_within(ids, reach)

    def _list(self, request: ListRequest) -> ListPage:
        self._enter("list", request)
        return self.inner._list(request)

    def _list_preview(self, request: ListRequest) -> ListPage:
        self._enter("list_preview", request)
        return self.inner._list_preview(request)

    def _export(self, request: ListRequest) -> ExportPage:
        self._enter("export", request)
        return self.inner._export(request)

    def _erase(self, request: EraseRequest) -> EraseReport:
        self._enter("erase", request)
        return self.inner._erase(request)

    def _explore(self, request: ExploreRequest) -> ExplorePage:
        self._enter("explore", request)
        return self.inner._explore(request)

    def _get(self, request: GetRequest) -> list[Hit]:
        self._enter("get", request)
        return self.inner._get(request)

    def _consolidate(self, request: ConsolidateRequest) -> ConsolidateReceipt:
        self._enter("consolidate", request)
        return self.inner._consolidate(request)

    def _beliefs(self, request: BeliefsRequest) -> list[Hit]:
        self._enter("beliefs", request)
        return self.inner._beliefs(request)


class StartedEngine(ReferenceEngine):
    """A reference engine whose builds are taken by a job system: ``consolidate`` answers ``started``."""

    def _consolidate(self, request: ConsolidateRequest) -> ConsolidateReceipt:
        return ConsolidateReceipt(status=ConsolidateStatus.STARTED, jobs=("job-1",), scopes=1)


def stored(engine: MemoryEngine) -> list[AnyItem]:
    """Every item the engine holds, via ``export`` (whole items, not hits)."""
    out: list[AnyItem] = []
    cursor: str | None = None
    while True:
        page = engine.export(ListRequest(limit=1000, cursor=cursor))
        out.extend(row.item for row in page.items)
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor

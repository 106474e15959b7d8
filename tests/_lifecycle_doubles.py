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
    ``modes`` overrides the fetch modes the descriptor declares. ``in_flight()`` counts hook calls that have
    started and not yet returned (work a lifecycle call left running).
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
        self._active = 0

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

    def in_flight(self) -> int:
        with self._lock:
            return self._active

    def _enter(self, op: str, arg: Any, options: WriteOptions | None = None) -> None:
        with self._lock:
            self.calls.append(Call(op, arg, options))
        for _, rule in self._rules:
            error = rule(op, arg)
            if error is not None:
                raise error

    def _run(self, op: str, arg: Any, call: Callable[[], Any], options: WriteOptions | None = None) -> Any:
        with self._lock:
            self._active += 1
        try:
            self._enter(op, arg, options)
            return call()
        finally:
            with self._lock:
                self._active -= 1

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
        return self._run("recall", request, lambda: self.inner._recall(request))

    def _fetch(self, request: FetchRequest) -> FetchPage:
        return self._run("fetch", request, lambda: self.inner._fetch(request))

    def _store(self, item: AnyItem) -> StoreReceipt:
        return self._run("store", item, lambda: self.inner._store(item))

    def _store_with(self, item: AnyItem, options: WriteOptions) -> StoreReceipt:
        return self._run("store_with", item, lambda: self.inner._store_with(item, options), options)

    def _store_many(self, items: Sequence[AnyItem]) -> list[StoreReceipt]:
        return self._run("store_many", list(items), lambda: self.inner._store_many(items))

    def _store_many_with(self, items: Sequence[AnyItem], options: WriteOptions) -> list[StoreReceipt]:
        call = lambda: self.inner._store_many_with(items, options)  # noqa: E731
        return self._run("store_many_with", list(items), call, options)

    def _forget(self, target: ForgetTarget) -> ForgetReport:
        return self._run("forget", target, lambda: self.inner._forget(target))

    def _forget_within(self, ids: Sequence[str], reach: Reach) -> ForgetReport:
        return self._run("forget_within", (ids, reach), lambda: self.inner._forget_within(ids, reach))

    def _list(self, request: ListRequest) -> ListPage:
        return self._run("list", request, lambda: self.inner._list(request))

    def _list_preview(self, request: ListRequest) -> ListPage:
        return self._run("list_preview", request, lambda: self.inner._list_preview(request))

    def _export(self, request: ListRequest) -> ExportPage:
        return self._run("export", request, lambda: self.inner._export(request))

    def _erase(self, request: EraseRequest) -> EraseReport:
        return self._run("erase", request, lambda: self.inner._erase(request))

    def _explore(self, request: ExploreRequest) -> ExplorePage:
        return self._run("explore", request, lambda: self.inner._explore(request))

    def _get(self, request: GetRequest) -> list[Hit]:
        return self._run("get", request, lambda: self.inner._get(request))

    def _consolidate(self, request: ConsolidateRequest) -> ConsolidateReceipt:
        return self._run("consolidate", request, lambda: self.inner._consolidate(request))

    def _beliefs(self, request: BeliefsRequest) -> list[Hit]:
        return self._run("beliefs", request, lambda: self.inner._beliefs(request))


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


class Rendezvous(Recording):
    """A recording engine whose turn log and reads wait for each other, to prove they overlap.

    ``store_with`` announces itself and waits for a ``fetch`` to start; each ``fetch`` announces itself and waits
    for ``store_with`` to start. Each records whether the other arrived while it was still running. The waits end
    after ``patience`` seconds so a sequential caller cannot hang the test; it then sees ``False``.
    """

    def __init__(self, inner: MemoryEngine | None = None, *, patience: float = 10.0) -> None:
        super().__init__(inner)
        self.patience = patience
        self.log_started = threading.Event()
        self.read_started = threading.Event()
        self.log_saw_read: list[bool] = []
        self.read_saw_log: list[bool] = []

    def _store_with(self, item: AnyItem, options: WriteOptions) -> StoreReceipt:
        self.log_started.set()
        self.log_saw_read.append(self.read_started.wait(self.patience))
        return super()._store_with(item, options)

    def _fetch(self, request: FetchRequest) -> FetchPage:
        self.read_started.set()
        self.read_saw_log.append(self.log_started.wait(self.patience))
        return super()._fetch(request)

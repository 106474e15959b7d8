"""What each route does, as plain synchronous calls over one engine and one job queue (run on worker threads).

Every call takes a ``Scope`` (the layout and agent a token resolved to) and a parsed body, so nothing here reads
HTTP, and nothing reaches outside the scope's root: the lifecycle calls go through ``AgentMemory`` at the
scope's layout, ``learn`` and ``forget`` go through ``MemoryTools`` confined to the root (``host.tools``: stored at
the root's learnings node, scrubbed; only ids read back under ``Reach.subtree(root)`` are forgotten), and
``ingest`` places its job at the root.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from memory_core.engine import MemoryEngine
from memory_core.errors import InvalidRequest
from memory_core.host.prefetch import PrefetchLimits, PrefetchMemory
from memory_core.host.tools import scoped_tools
from memory_core.http.errors import OutOfScope
from memory_core.http.metrics import Metrics
from memory_core.http.models import ForgetBody, ForgetResult, Health, JobAccepted, JobStatus, LearnBody, PostTurnResult
from memory_core.lifecycle.agent import AgentMemory, Compaction, PostTurn, PreTurn, StartSession, TurnContext
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.namespace import Namespace
from memory_core.query import StoreReceipt
from memory_core.recall.types import ContextPack

__all__ = ["JobSink", "JobStates", "MemoryService", "Scope"]


class JobSink(Protocol):
    """What the service needs of ``workers.queue.JobQueue``."""

    def send(self, job: BuildBeliefs | IngestBrain) -> Any:
        """Queue ``job``; a value with ``.id`` and ``.state``."""

    def close(self) -> None:
        """Release connections."""


class JobStates(Protocol):
    """What the service needs of ``workers.monitor.JobMonitor``."""

    def state(self, job_id: str) -> Any:
        """The job's state: ``.id``, ``.state``, ``.follow_ups``, ``.error``."""

    def close(self) -> None:
        """Release connections."""


@dataclass(frozen=True)
class Scope:
    """Where one request acts: the token's layout and the agent it resolved to."""

    layout: MemoryLayout
    agent: str


def _open_queue() -> JobSink:
    from workers.queue import JobQueue  # workers (Celery) is imported only when a job is first queued

    return JobQueue()


def _open_monitor() -> JobStates:
    from workers.monitor import JobMonitor

    return JobMonitor()


class _Lazy:
    """One object made on first use, from any thread, and closed once."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._value: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        with self._lock:
            if self._value is None:
                self._value = self._make()
            return self._value

    def close(self) -> None:
        with self._lock:
            value, self._value = self._value, None
        if value is not None:
            value.close()


class MemoryService:
    """The operations behind the routes.

    Args:
        engine: The engine (shared by every request's thread; the caller owns and closes it).
        metrics: Where job and log-failure counts go.
        queue: Makes the job queue on first use (default ``workers.queue.JobQueue()``).
        monitor: Makes the job monitor on first use (default ``workers.monitor.JobMonitor()``).
        prefetch: Serve ``pre_turn`` from a prefetch cache (``host.PrefetchMemory``), one per layout root, all
            refreshing on one pool of ``PrefetchLimits.workers`` threads that the service owns; ``learn`` and
            ``forget`` clear the root's packs.
        prefetch_executor: The pool for those refreshes instead (tests pass a manual one; the caller closes it).
    """

    def __init__(
        self,
        engine: MemoryEngine,
        metrics: Metrics,
        *,
        queue: Callable[[], JobSink] = _open_queue,
        monitor: Callable[[], JobStates] = _open_monitor,
        prefetch: bool = False,
        prefetch_executor: Executor | None = None,
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        self._queue = _Lazy(queue)
        self._monitor = _Lazy(monitor)
        self.prefetch = prefetch
        self._owned_pool = prefetch and prefetch_executor is None
        self._pool: Executor | None = (
            ThreadPoolExecutor(PrefetchLimits().workers, thread_name_prefix="prefetch")
            if self._owned_pool
            else prefetch_executor
        )
        self._caches: dict[Namespace, PrefetchMemory] = {}
        self._caches_lock = threading.Lock()

    def _cache(self, layout: MemoryLayout) -> PrefetchMemory:
        with self._caches_lock:
            cache = self._caches.get(layout.root)
            if cache is None:
                cache = PrefetchMemory(self.engine, layout, executor=self._pool)
                self._caches[layout.root] = cache
            return cache

    def _invalidate(self, layout: MemoryLayout) -> None:
        with self._caches_lock:
            cache = self._caches.get(layout.root)
        if cache is not None:
            cache.invalidate()

    def close(self) -> None:
        """Close the queue, monitor and prefetch caches (and their pool when the service owns it), not the engine."""
        self._queue.close()
        self._monitor.close()
        with self._caches_lock:
            caches, self._caches = list(self._caches.values()), {}
        for cache in caches:
            cache.close()
        if self._owned_pool and self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def _agent(self, scope: Scope) -> AgentMemory:
        return AgentMemory(self.engine, scope.layout, scope.agent)

    def _submit(self, job: BuildBeliefs | IngestBrain) -> JobAccepted:
        sent = self._queue.get().send(job)
        self.metrics.jobs.labels(job.job, sent.state).inc()
        return JobAccepted(job_id=str(sent.id), state=str(sent.state))

    # the lifecycle ------------------------------------------------------------------------------------
    def start_session(self, scope: Scope, body: StartSession) -> ContextPack:
        """``AgentMemory.start_session``."""
        return self._agent(scope).start_session(body)

    def pre_turn(self, scope: Scope, body: PreTurn) -> TurnContext:
        """``AgentMemory.pre_turn``, or with ``prefetch`` ``PrefetchMemory.pre_turn`` (the last completed pack).

        A failed log is reported in ``log_error`` and counted, never raised.
        """
        if self.prefetch:
            cached = self._cache(scope.layout).pre_turn(scope.agent, body)
            self.metrics.prefetch.labels("hit" if cached.earlier_lookup else "miss").inc()
            context: TurnContext = cached
        else:
            context = self._agent(scope).pre_turn(body)
        if context.log_error is not None:
            self.metrics.log_errors.inc()
        return context

    def post_turn(self, scope: Scope, body: PostTurn) -> PostTurnResult:
        """``AgentMemory.post_turn``, then its jobs queued; a retried call is a replay and queues them again."""
        report = self._agent(scope).post_turn(body)
        ids = tuple(self._submit(job).job_id for job in report.jobs)
        return PostTurnResult(receipt=report.receipt, jobs=report.jobs, job_ids=ids)

    def recall_for_compaction(self, scope: Scope, body: Compaction) -> ContextPack:
        """``AgentMemory.recall_for_compaction``."""
        return self._agent(scope).recall_for_compaction(body)

    def recall(self, scope: Scope, query: str | None) -> ContextPack:
        """``AgentMemory.recall(query)``."""
        return self._agent(scope).recall(query)

    # learn / forget ------------------------------------------------------------------------------------
    def learn(self, scope: Scope, body: LearnBody) -> StoreReceipt:
        """Store a learning at the root's learnings node, through ``MemoryTools`` (``memory_store``, scrubbed)."""
        learning = {"text": body.text, "learning_kind": body.kind.value, "confidence": body.confidence}
        out = scoped_tools(self.engine, scope.layout).call("memory_store", {"learning": learning})
        self._invalidate(scope.layout)
        return StoreReceipt(id=out["id"], replayed=out["replayed"])

    def forget(self, scope: Scope, body: ForgetBody) -> ForgetResult:
        """Forget the ids ``MemoryTools`` reads back under the root; the rest are skipped (``memory_forget``)."""
        out = scoped_tools(self.engine, scope.layout).call("memory_forget", {"ids": list(body.ids)})
        self._invalidate(scope.layout)
        return ForgetResult(forgotten=out["forgotten"], skipped=out["skipped"])

    # jobs ------------------------------------------------------------------------------------------------
    def ingest(self, scope: Scope, body: IngestBrain) -> JobAccepted:
        """Queue an ``IngestBrain`` at the token's root (a body naming another root is ``OutOfScope``)."""
        if body.root is not None and body.root != scope.layout.root:
            raise OutOfScope("this token is not bound to that root")
        return self._submit(body.placed_at(scope.layout.root))

    def job(self, job_id: str) -> JobStatus:
        """A job's state by id.

        Raises:
            InvalidRequest: ``field="job_id"``: an id no job can have.
        """
        from workers.kinds import check_job_id

        try:
            checked = check_job_id(job_id)
        except InvalidRequest as exc:
            raise InvalidRequest(exc.reason, field="job_id") from None
        state = self._monitor.get().state(checked)
        return JobStatus(id=state.id, state=state.state, follow_ups=tuple(state.follow_ups), error=state.error)

    def health(self) -> Health:
        """The engine's id and health."""
        return Health(engine=self.engine.descriptor().id, health=self.engine.health())

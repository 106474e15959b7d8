"""What each route does, as plain synchronous calls over one engine and one job queue (run on worker threads).

Every call takes a ``Scope`` (the layout and agent a token resolved to) and a parsed body, so nothing here reads
HTTP, and nothing reaches outside the scope's root: the lifecycle calls go through ``AgentMemory`` at the
scope's layout, ``learn`` and ``forget`` go through ``ToolWrites`` confined to the root (``host.tools.tool_scope``:
stored at the root's learnings node with the token's agent as ``meta.agent_id``, scrubbed; only ids under
``Reach.subtree(root)`` are forgotten; when the engine does not answer, the request becomes a ``tool_write`` job
on the service's queue and is acknowledged "queued; not yet saved/removed", reference §6.4), and ``ingest``
places its job at the root.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from memory_core.engine import MemoryEngine
from memory_core.errors import InvalidRequest
from memory_core.host.prefetch import PrefetchLimits, PrefetchMemory
from memory_core.host.tools import tool_scope
from memory_core.http.errors import OutOfScope, public_job_error, public_log_error, public_pack
from memory_core.http.jobs import JobHandles
from memory_core.http.metrics import Metrics
from memory_core.http.models import (
    ForgetBody,
    ForgetResult,
    Health,
    JobAccepted,
    JobStatus,
    LearnBody,
    LearnResult,
    PostTurnResult,
)
from memory_core.lifecycle.agent import AgentMemory, Compaction, PostTurn, PreTurn, StartSession, TurnContext
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.namespace import Namespace
from memory_core.recall.types import ContextPack
from memory_core.tools import ToolWrite, ToolWrites
from memory_core.tools.writes import Ack

__all__ = ["MAX_HANDLE_CHARS", "JobSink", "JobStates", "MemoryService", "Scope"]

log = logging.getLogger(__name__)

MAX_HANDLE_CHARS = 300
"""The longest job handle ``GET /v1/jobs/{job_id}`` looks at (a task id of at most 255 characters, ``.``, a tag)."""


class JobSink(Protocol):
    """What the service needs of ``workers.queue.JobQueue``."""

    def send(self, job: BuildBeliefs | IngestBrain | ToolWrite) -> Any:
        """Queue ``job``; a value with ``.id`` and ``.state``.

        ``JobQueue`` also has ``coordination.is_done(job_id)``, which ``learn``/``forget`` ask to keep a root's
        requests in order; a queue without it cannot say, so later requests are queued behind a queued one.
        """

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


class _ToolWriteSink:
    """``ToolWrites``' job sink over the service's queue: a ``tool_write`` job, counted like any other."""

    def __init__(self, service: MemoryService) -> None:
        self._service = service

    def submit(self, job: ToolWrite) -> str:
        sent = self._service._queue.get().send(job)
        self._service.metrics.jobs.labels(job.job, sent.state).inc()
        return str(sent.id)

    def finished(self, job_id: str) -> bool:
        coordination = self._service._queue.get().coordination  # AttributeError: cannot say (ToolWrites waits)
        return bool(coordination.is_done(job_id))


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
        handles: Mints and checks the job ids handed out (``http.jobs``; default: a random key for the service's
            life).
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
        handles: JobHandles | None = None,
    ) -> None:
        self.engine = engine
        self.handles = handles or JobHandles()
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
        self._writes: dict[Namespace, ToolWrites] = {}  # one per root: its requests stay in order

    def _cache(self, layout: MemoryLayout) -> PrefetchMemory:
        with self._caches_lock:
            cache = self._caches.get(layout.root)
            if cache is None:
                cache = PrefetchMemory(self.engine, layout, executor=self._pool)
                self._caches[layout.root] = cache
            return cache

    def _tool_writes(self, scope: Scope) -> ToolWrites:
        """The root's ``ToolWrites`` (at its learnings node, reads under its subtree) recording ``scope.agent``."""
        with self._caches_lock:
            writes = self._writes.get(scope.layout.root)
            if writes is None:
                confined = tool_scope(scope.layout, place=scope.layout.learnings())  # not the agent's node
                writes = ToolWrites(self.engine, _ToolWriteSink(self), confined)
                self._writes[scope.layout.root] = writes
        return writes.as_agent(scope.agent)

    def _handle(self, scope: Scope, ack: Ack) -> str | None:
        return None if ack.job_id is None else self.handles.issue(scope.layout.root, ack.job_id)

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

    def _submit(self, scope: Scope, job: BuildBeliefs | IngestBrain) -> JobAccepted:
        """Queue ``job`` (placed under ``scope``'s root by the caller); its id handed out as a handle of that root.

        A coalesced build answers the id of the identical build still queued: identical, so at the same root.
        """
        sent = self._queue.get().send(job)
        self.metrics.jobs.labels(job.job, sent.state).inc()
        return JobAccepted(job_id=self.handles.issue(scope.layout.root, str(sent.id)), state=str(sent.state))

    # the lifecycle ------------------------------------------------------------------------------------
    def start_session(self, scope: Scope, body: StartSession) -> ContextPack:
        """``AgentMemory.start_session`` (skip reasons made public: ``errors.public_pack``)."""
        return public_pack(self._agent(scope).start_session(body))

    def pre_turn(self, scope: Scope, body: PreTurn) -> TurnContext:
        """``AgentMemory.pre_turn``, or with ``prefetch`` ``PrefetchMemory.pre_turn`` (the last completed pack).

        A failed log is reported in ``log_error`` and counted, never raised. Neither it nor a skip reason carries
        the engine's error text (``errors.public_log_error``, ``errors.public_pack``: logged, not sent).
        """
        if self.prefetch:
            cached = self._cache(scope.layout).pre_turn(scope.agent, body)
            self.metrics.prefetch.labels("hit" if cached.earlier_lookup else "miss").inc()
            context: TurnContext = cached
        else:
            context = self._agent(scope).pre_turn(body)
        if context.log_error is not None:
            self.metrics.log_errors.inc()
        return context.model_copy(
            update={"pack": public_pack(context.pack), "log_error": public_log_error(context.log_error)}
        )

    def post_turn(self, scope: Scope, body: PostTurn) -> PostTurnResult:
        """``AgentMemory.post_turn``, then its jobs queued; a retried call is a replay and queues them again."""
        report = self._agent(scope).post_turn(body)
        ids = tuple(self._submit(scope, job).job_id for job in report.jobs)
        return PostTurnResult(receipt=report.receipt, jobs=report.jobs, job_ids=ids)

    def recall_for_compaction(self, scope: Scope, body: Compaction) -> ContextPack:
        """``AgentMemory.recall_for_compaction`` (skip reasons made public)."""
        return public_pack(self._agent(scope).recall_for_compaction(body))

    def recall(self, scope: Scope, query: str | None) -> ContextPack:
        """``AgentMemory.recall(query)`` (skip reasons made public)."""
        return public_pack(self._agent(scope).recall(query))

    # learn / forget ------------------------------------------------------------------------------------
    def learn(self, scope: Scope, body: LearnBody) -> LearnResult:
        """Store a learning at the root's learnings node as the token's agent, or queue it (``ToolWrites``).

        Raises:
            InvalidRequest: a fact field ``ToolWrites`` refuses, named ``learning.<field>``; nothing is queued.
            EngineUnavailable: the engine did not answer AND the job could not be kept (broker and outbox down).
        """
        ack = self._tool_writes(scope).learn(
            body.text,
            kind=body.kind,
            confidence=body.confidence,
            key=body.key,
            importance=body.importance,
            field="learning.",
        )
        self._invalidate(scope.layout)
        if ack.state != "queued":
            return LearnResult(id=str(ack.id), replayed=ack.replayed)
        return LearnResult(id=str(ack.id), state="queued", message=ack.message, job_id=self._handle(scope, ack))

    def forget(self, scope: Scope, body: ForgetBody) -> ForgetResult:
        """Forget the ids under the root, the rest skipped; or queue the forget (``ToolWrites``).

        Raises:
            EngineUnavailable: the engine did not answer AND the job could not be kept.
        """
        ack = self._tool_writes(scope).forget(body.ids)
        self._invalidate(scope.layout)
        if ack.state != "queued":
            return ForgetResult(forgotten=ack.forgotten, skipped=max(len(set(body.ids)) - ack.forgotten, 0))
        return ForgetResult(state="queued", message=ack.message, job_id=self._handle(scope, ack))

    # jobs ------------------------------------------------------------------------------------------------
    def ingest(self, scope: Scope, body: IngestBrain) -> JobAccepted:
        """Queue an ``IngestBrain`` at the token's root.

        Raises:
            OutOfScope: the body names another root: as ``root``, or as a document's ``meta.namespace`` outside
                the token's root (a document is stored at its source's node whatever its meta says, so such a
                namespace could only mislead).
        """
        root = scope.layout.root
        if body.root is not None and body.root != root:
            raise OutOfScope("this token is not bound to that root")
        for doc in body.documents:
            if not doc.meta.namespace.is_root and not doc.meta.namespace.is_within(root):
                raise OutOfScope("this token is not bound to that root")
        return self._submit(scope, body.placed_at(scope.layout.root))

    def job(self, scope: Scope, job_id: str) -> JobStatus:
        """The state of a job this API issued to ``scope``'s root (``job_id`` is its handle, ``http.jobs``).

        The handle is checked before anything is read, so another root's job and an unknown one get one answer.
        ``PENDING`` means queued (or parked, or its result expired); follow-ups come back as handles of the root.
        A failed job's error is its category and a fixed message (``errors.public_job_error``); the worker's text
        is logged here, never sent.

        Raises:
            InvalidRequest: ``field="job_id"``: longer than ``MAX_HANDLE_CHARS`` or holding control characters.
            NotFound: a handle not issued to this root (``JobHandles.task_id``).
        """
        if len(job_id) > MAX_HANDLE_CHARS or any(ord(c) < 32 or ord(c) == 127 for c in job_id):
            raise InvalidRequest(f"at most {MAX_HANDLE_CHARS} characters, no control ones", field="job_id")
        root = scope.layout.root
        task_id = self.handles.task_id(root, job_id)
        state = self._monitor.get().state(task_id)
        follow_ups = tuple(self.handles.issue(root, str(f)) for f in state.follow_ups)
        failure = public_job_error(state.error)
        if failure is None:
            return JobStatus(id=job_id, state=state.state, follow_ups=follow_ups)
        log.warning("job %s (%s): %s", task_id, state.state, state.error)  # the detail stays here
        error, message = failure
        return JobStatus(id=job_id, state=state.state, follow_ups=follow_ups, error=error, message=message)

    def health(self) -> Health:
        """The engine's id and health."""
        return Health(engine=self.engine.descriptor().id, health=self.engine.health())

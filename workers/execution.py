"""One delivery of one job, start to finish: the flow every task goes through (the tasks are thin shells).

```
clear the pending mark ─► twin of a finished job? drop ─► count the attempt ─► over the cap? dead letter
    ─► parse (malformed → dead letter at once) ─► another engine's job? dead letter, unrun
    ─► run ─► done (mark it) | a scope too soon after its last build → defer: come back when the interval ends
                             | transient → retry with backoff
                             | anything else → dead letter
```

``execute`` never raises: even opening the coordination store is inside the flow (a SQLite store locked by
another process is transient, so the delivery is retried on Celery's own count).

* Attempts are counted in the coordination store across retries AND redeliveries (Redis has no delivery
  count, reference §1.2); a job started more than ``max_retries + 1`` times is dead-lettered without running,
  which caps poison loops through ``task_reject_on_worker_lost``.
* Transient: ``EngineUnavailable``, broker/Redis errors, and the soft time limit (a build's finished scopes are
  kept, so the retry resumes). Backoff is exponential with full jitter: uniform(0, min(max, base·2^(n-1)))
  seconds (https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/).
* ``build_beliefs`` runs one ``consolidate`` per scope the job's reach admits (``engine.scopes``), each under
  its own single-flight lock, each recorded when done, so a failing scope never redoes the others.
* A scope whose last build started less than ``Settings.build_min_interval_s`` ago is deferred
  (``workers.locks``): the delivery ends as ``defer`` and the task is sent again with that countdown (well below
  the visibility timeout: ``workers.config.check_timeouts``). Its attempt is given back, since nothing ran.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import kombu.exceptions
import redis
from celery.exceptions import SoftTimeLimitExceeded

from memory_core.consolidation import BuildScope, ConsolidateRequest
from memory_core.engine import MemoryEngine
from memory_core.engines.sqlite.engine import EMBED_PER_JOB
from memory_core.errors import EngineUnavailable, InvalidRequest
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain, JobReport, parse_job
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.lifecycle.runner import BackgroundRunner
from memory_core.namespace import Reach
from memory_core.settings import Settings
from workers.config import TASK_BUILD_BELIEFS, TASK_BUILD_DUE, TASK_DRAIN_OUTBOX, TASK_INGEST_BRAIN
from workers.coordination import Coordination
from workers.dead_letters import DeadLetter, DeadLetterStore
from workers.locks import Flight, engine_key, scope_key, single_flight
from workers.queue import JobQueue

__all__ = [
    "TRANSIENT",
    "DeadLettered",
    "Deferred",
    "Delivery",
    "Outcome",
    "Runtime",
    "Verdict",
    "WrongEngine",
    "backoff_s",
    "check_engine",
    "execute",
]

log = logging.getLogger(__name__)

TRANSIENT: tuple[type[BaseException], ...] = (
    EngineUnavailable,
    SoftTimeLimitExceeded,
    kombu.exceptions.OperationalError,
    redis.ConnectionError,
    redis.TimeoutError,
    ConnectionError,
    TimeoutError,
)
"""Errors retried with backoff (up to ``max_retries``); everything else is dead-lettered at once."""


class WrongEngine(Exception):
    """A job stamped for another engine (``engine`` kwarg ≠ this worker's ``engine_key``): dead-lettered unrun.

    Two deployments that share a Redis and its default queue names take each other's jobs; running one would
    apply it to the wrong store.
    """


class Deferred(Exception):
    """Raised by ``run_build`` when a scope must wait for its minimum interval; ``wait_s`` until it may build.

    The scopes built before it are recorded as progress, so the next delivery builds only the deferred ones.
    """

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"a scope may build again in {wait_s:.3f}s")
        self.wait_s = wait_s


class DeadLettered(Exception):
    """Raised by a task after its job was dead-lettered, so Flower and the result show a failure.

    ``workers.signals`` ignores it (the letter is kept already).
    """


@dataclass(frozen=True)
class Delivery:
    """One message as the task saw it.

    Attributes:
        task: The task name.
        job_id: The Celery task id (the job id ``submit`` returned).
        args: Positional arguments (the job's JSON for the job tasks).
        kwargs: Keyword arguments (``engine`` for jobs: the submitting host's ``engine_key``; ``triggered_us``
            and ``pending`` for builds).
        queue: The queue it came from, when known.
        retries: Celery's retry count (a fallback when the coordination store cannot count).
    """

    task: str
    job_id: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    queue: str | None = None
    retries: int = 0


class Verdict(StrEnum):
    """How a delivery ended."""

    DONE = "done"
    DUPLICATE = "duplicate"
    RETRY = "retry"
    DEFER = "defer"
    DEAD = "dead"


@dataclass(frozen=True)
class Outcome:
    """A delivery's end: the result to store, or the retry delay, or the dead letter."""

    verdict: Verdict
    result: dict[str, Any] | None = None
    countdown: float | None = None
    letter: DeadLetter | None = None
    error: BaseException | None = None


def backoff_s(attempt: int, base_s: float, max_s: float, rng: random.Random | None = None) -> float:
    """Full-jitter exponential backoff before retry ``attempt`` (1-based): uniform(0, min(max, base·2^(n-1)))."""
    cap = min(max_s, base_s * (2 ** max(0, attempt - 1)))
    return (rng or random).uniform(0.0, cap)


class Runtime:
    """What one worker process holds, opened on first use: engine, runner, coordination, dead letters, queue.

    Args:
        settings: The settings.
        engine / coordination / letters / queue: Injected parts (tests); default opened from settings.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        engine: MemoryEngine | None = None,
        coordination: Coordination | None = None,
        letters: DeadLetterStore | None = None,
        queue: JobQueue | None = None,
    ) -> None:
        self.settings = settings
        self._engine = engine
        self._coordination = coordination
        self._letters = letters
        self._queue = queue
        self.layout = MemoryLayout(settings.layout_root)
        self.engine_key = engine_key(settings.engine)

    @property
    def engine(self) -> MemoryEngine:
        """The engine (``Settings.engine``, plugins registered)."""
        if self._engine is None:
            from workers.stores import open_worker_engine

            self._engine = open_worker_engine(self.settings)
        return self._engine

    @property
    def runner(self) -> BackgroundRunner:
        """A ``BackgroundRunner`` over the engine and layout."""
        return BackgroundRunner(self.engine, self.layout)

    @property
    def coordination(self) -> Coordination:
        """The coordination store."""
        if self._coordination is None:
            from workers.stores import open_coordination

            self._coordination = open_coordination(self.settings)
        return self._coordination

    @property
    def letters(self) -> DeadLetterStore:
        """The dead-letter store."""
        if self._letters is None:
            from workers.stores import open_dead_letters

            self._letters = open_dead_letters(self.settings)
        return self._letters

    @property
    def queue(self) -> JobQueue:
        """A ``JobQueue`` for follow-up jobs (sharing the coordination store)."""
        if self._queue is None:
            self._queue = JobQueue(self.settings, coordination=self.coordination)
        return self._queue

    def close(self) -> None:
        """Close whatever was opened."""
        for part in (self._queue, self._engine, self._coordination):
            if part is not None:
                try:
                    part.close()
                except Exception as exc:  # closing must not mask the shutdown
                    log.warning("closing %s failed: %s", type(part).__name__, exc)


# parsing ---------------------------------------------------------------------------------------------------
_JOB_KWARGS = {TASK_BUILD_BELIEFS: {"triggered_us", "pending", "engine"}, TASK_INGEST_BRAIN: {"engine"}}
_PLAIN_KWARGS = {TASK_BUILD_DUE: {"reach"}, TASK_DRAIN_OUTBOX: {"limit"}}


def _check_kwargs(d: Delivery, allowed: set[str]) -> None:
    unknown = sorted(set(d.kwargs) - allowed)
    if unknown:
        raise InvalidRequest(f"unexpected keyword argument(s) {unknown}", field="kwargs")


def parse_job_delivery(d: Delivery) -> BuildBeliefs | IngestBrain:
    """The job a ``build_beliefs``/``ingest_brain`` delivery carries.

    Raises:
        InvalidRequest: not exactly one argument, unknown keyword arguments, a malformed job, a job of the
            other kind, a non-integer ``triggered_us`` or a non-string ``engine``.
    """
    _check_kwargs(d, _JOB_KWARGS[d.task])
    if len(d.args) != 1:
        raise InvalidRequest(f"expected one argument (the job's JSON), got {len(d.args)}", field="args")
    job = parse_job(d.args[0])
    expected = BuildBeliefs if d.task == TASK_BUILD_BELIEFS else IngestBrain
    if not isinstance(job, expected):
        raise InvalidRequest(f"task {d.task} cannot run a {job.name()} job", field="job")
    stamp = d.kwargs.get("triggered_us")
    if stamp is not None and (isinstance(stamp, bool) or not isinstance(stamp, int)):
        raise InvalidRequest("must be an integer", field="triggered_us")
    engine = d.kwargs.get("engine")
    if engine is not None and not isinstance(engine, str):
        raise InvalidRequest("must be a string (an engine key)", field="engine")
    return job


def check_engine(rt: Runtime, d: Delivery) -> None:
    """Refuse a job submitted for another engine (its ``engine`` kwarg, the host's ``engine_key``).

    A job without the kwarg (published before it existed, or by hand) runs: nothing says it is foreign.

    Raises:
        WrongEngine: ``job for engine X reached a worker of engine Y``.
    """
    theirs = d.kwargs.get("engine")
    if isinstance(theirs, str) and theirs != rt.engine_key:
        raise WrongEngine(
            f"job for engine {theirs} reached a worker of engine {rt.engine_key}; nothing was run "
            "(deployments sharing one Redis need their own queue names and MEMORY_CORE_REDIS_PREFIX)"
        )


# handlers --------------------------------------------------------------------------------------------------
def _scope_report(scope: BuildScope, flight: Flight[JobReport]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "namespace": str(scope.namespace),
        "kinds": [k.value for k in scope.kinds],
        "enter": flight.enter.value,
        "passes": len(flight.results),
    }
    if flight.results:
        last = flight.results[-1]
        out["outcome"] = last.outcome.outcome.value
        if last.consolidation is not None and last.consolidation.built is not None:
            out["built"] = sum((r.consolidation.built or 0) for r in flight.results if r.consolidation)
    if flight.lost:
        out["lease_lost"] = True
    return out


def run_build(rt: Runtime, d: Delivery, job: BuildBeliefs) -> dict[str, Any]:
    """One ``consolidate`` per scope under ``job.request``, each single flight, resuming after a retry.

    Raises:
        Deferred: a scope must wait for ``build_min_interval_s`` (the others are done and recorded).
    """
    stamp = d.kwargs.get("triggered_us")
    done_before = rt.coordination.progress(d.job_id)
    scopes: list[dict[str, Any]] = []
    waits: list[float] = []
    runner = rt.runner
    for scope in rt.engine.scopes(job.request):
        unit = scope_key(rt.engine_key, scope)
        if unit in done_before:
            scopes.append({"namespace": str(scope.namespace), "enter": "done_before"})
            continue

        def one_pass(s: BuildScope = scope) -> JobReport:
            return runner.run(BuildBeliefs(request=s.request()))

        flight = single_flight(
            rt.coordination, unit, d.job_id, stamp, rt.settings.lock_ttl_s, one_pass, rt.settings.build_min_interval_s
        )
        if flight.deferred:
            waits.append(flight.wait_s)
            continue
        rt.coordination.add_progress(d.job_id, unit)
        scopes.append(_scope_report(scope, flight))
    embed = getattr(rt.engine, "embed_backlog", None)
    embedded = embed(limit=EMBED_PER_JOB) if callable(embed) else 0  # the model, outside the scope locks
    if waits:
        raise Deferred(max(waits))
    return {"job": job.name(), "scopes": scopes, "embedded": embedded}


def run_ingest(rt: Runtime, d: Delivery, job: IngestBrain) -> dict[str, Any]:
    """``Brain.ingest_many`` through the runner; the batch's build jobs are submitted as follow-ups."""
    report = rt.runner.run(job)
    follow_ups = [rt.queue.submit(j) for j in report.follow_ups]
    return {"job": job.name(), "stored": len(report.stored), "follow_ups": follow_ups}


def run_build_due(rt: Runtime, d: Delivery) -> dict[str, Any]:
    """Submit a ``BuildBeliefs`` for every scope under the reach (default: the layout) written since its build."""
    _check_kwargs(d, _PLAIN_KWARGS[TASK_BUILD_DUE])
    if d.args:
        raise InvalidRequest("takes no positional arguments", field="args")
    raw = d.kwargs.get("reach")
    reach = Reach.subtree(rt.layout.root) if raw is None else Reach.coerce(raw, "reach")
    scopes = rt.engine.scopes(ConsolidateRequest(reach=reach))
    due = [s for s in scopes if s.due]
    jobs = [rt.queue.submit(BuildBeliefs(request=s.request())) for s in due]
    return {"scopes": len(scopes), "due": len(due), "jobs": jobs}


def run_drain(rt: Runtime, d: Delivery) -> dict[str, Any]:
    """Publish jobs parked in this machine's outbox; prune rows delivered more than a day ago."""
    _check_kwargs(d, _PLAIN_KWARGS[TASK_DRAIN_OUTBOX])
    if d.args:
        raise InvalidRequest("takes no positional arguments", field="args")
    limit = d.kwargs.get("limit", 1000)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise InvalidRequest("must be a positive integer", field="limit")
    report = rt.queue.drain(limit)
    rt.queue.outbox.prune()
    return {"delivered": report.delivered, "left": report.left, "error": report.error}


def _dispatch(rt: Runtime, d: Delivery) -> dict[str, Any]:
    if d.task in _JOB_KWARGS:
        job = parse_job_delivery(d)
        check_engine(rt, d)
        if isinstance(job, BuildBeliefs):
            return run_build(rt, d, job)
        return run_ingest(rt, d, job)
    handlers: dict[str, Callable[[Runtime, Delivery], dict[str, Any]]] = {
        TASK_BUILD_DUE: run_build_due,
        TASK_DRAIN_OUTBOX: run_drain,
    }
    if d.task not in handlers:
        raise InvalidRequest(f"unknown task {d.task!r}", field="task")
    return handlers[d.task](rt, d)


# the flow --------------------------------------------------------------------------------------------------
def _dead(rt: Runtime, d: Delivery, error: BaseException | str, attempts: int, message: str | None = None) -> Outcome:
    payload: Any = d.args[0] if len(d.args) == 1 else {"args": list(d.args), "kwargs": dict(d.kwargs)}
    engine = d.kwargs.get("engine")
    letter = DeadLetter.of(
        d.job_id,
        error,
        payload=payload,
        task=d.task,
        queue=d.queue,
        attempts=attempts,
        message=message,
        engine=engine if isinstance(engine, str) else None,
    )
    try:
        rt.letters.put(letter)
        log.error("job %s dead-lettered after %d attempt(s): %s: %s", d.job_id, attempts, letter.error, letter.message)
    except Exception as exc:  # no store answers: the log keeps the letter whole, so it is not lost silently
        log.critical("dead-letter store unreachable (%s); letter: %s", exc, letter.to_json())
    try:
        rt.coordination.mark_done(d.job_id)
    except Exception as exc:  # a twin would be dead-lettered again under the same id, replacing this letter
        log.warning("job %s: could not mark done: %s", d.job_id, exc)
    return Outcome(Verdict.DEAD, letter=letter, error=error if isinstance(error, BaseException) else None)


def execute(rt: Runtime, d: Delivery, rng: random.Random | None = None) -> Outcome:
    """Run one delivery through the flow in the module docstring and say how it ended.

    Never raises (except ``BaseException``s such as a hard time limit, which Celery handles).
    """
    settings = rt.settings
    max_attempts = settings.max_retries + 1
    try:
        coordination = rt.coordination  # opening it can fail too (a SQLite store locked by another process)
        pending = d.kwargs.get("pending")
        if isinstance(pending, str):
            coordination.clear_pending(pending, d.job_id)
        if coordination.is_done(d.job_id):
            log.info("job %s: a twin of a finished job, dropped", d.job_id)
            return Outcome(Verdict.DUPLICATE, result={"duplicate": True})
        attempts = coordination.count_attempt(d.job_id)
    except TRANSIENT as exc:  # the store cannot count: fall back on Celery's own retry count
        if d.retries + 1 >= max_attempts:
            return _dead(rt, d, exc, d.retries + 1)
        return Outcome(
            Verdict.RETRY,
            countdown=backoff_s(d.retries + 1, settings.retry_backoff_s, settings.retry_backoff_max_s, rng),
            error=exc,
        )
    except Exception as exc:  # the store answered something unreadable: keep the job as a letter
        log.exception("job %s: the coordination store failed", d.job_id)
        return _dead(rt, d, exc, d.retries + 1)
    if attempts > max_attempts:
        message = f"started {attempts} times, more than {max_attempts}: earlier runs were lost (killed or timed out)"
        return _dead(rt, d, "GaveUp", attempts, message)
    try:
        result = _dispatch(rt, d)
    except Deferred as exc:
        try:
            coordination.forgive_attempt(d.job_id)  # nothing ran: a deferral is not an attempt
        except Exception as forgive_exc:  # the count stays one high; the cap still leaves room for retries
            log.warning("job %s: could not take back the deferred attempt: %s", d.job_id, forgive_exc)
        log.info("job %s: deferred %.3fs (build_min_interval_s)", d.job_id, exc.wait_s)
        return Outcome(Verdict.DEFER, countdown=exc.wait_s)
    except (InvalidRequest, WrongEngine) as exc:
        return _dead(rt, d, exc, attempts)
    except TRANSIENT as exc:
        if attempts >= max_attempts:
            return _dead(rt, d, exc, attempts)
        delay = backoff_s(attempts, settings.retry_backoff_s, settings.retry_backoff_max_s, rng)
        log.warning("job %s attempt %d: %s: %s; retry in %.1fs", d.job_id, attempts, type(exc).__name__, exc, delay)
        return Outcome(Verdict.RETRY, countdown=delay, error=exc)
    except Exception as exc:
        log.exception("job %s failed", d.job_id)
        return _dead(rt, d, exc, attempts)
    try:
        coordination.mark_done(d.job_id)
    except EngineUnavailable as exc:  # the job ran; a twin would only repeat an idempotent job
        log.warning("job %s: could not mark done: %s", d.job_id, exc)
    return Outcome(Verdict.DONE, result=result)

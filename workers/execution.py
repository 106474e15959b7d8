"""A worker process's ``Runtime`` (engine and stores, opened once per process) and one delivery's flow.

``execute`` runs the flow of docs/jobs.md ("One delivery"). Attempts are counted in the coordination store across
retries and redeliveries (Redis has no delivery count, reference ``celery-reliability.md`` §1.2).
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from typing import Any, Generic, TypeVar

from memory_core._model import ContractModel
from memory_core.engine import MemoryEngine
from memory_core.engines import open_host_engine
from memory_core.errors import InvalidRequest
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.lifecycle.runner import BackgroundRunner
from memory_core.settings import Settings, get_settings
from workers.config import max_countdown_s
from workers.coordination import Coordination, engine_key
from workers.dead_letters import TRANSIENT, DeadLetter, DeadLetterStore, keep
from workers.handlers import Deferred
from workers.kinds import JOB_KINDS, JobKind, JobKinds
from workers.queue import JobQueue, open_coordination, open_dead_letters

__all__ = [
    "DeadLettered",
    "Delivery",
    "Outcome",
    "PerProcess",
    "Runtime",
    "Verdict",
    "WrongEngine",
    "backoff_s",
    "close_runtime",
    "execute",
    "open_worker_engine",
    "runtime",
]

log = logging.getLogger(__name__)
T = TypeVar("T")


def open_worker_engine(settings: Settings) -> MemoryEngine:
    """Open ``Settings.engine`` with its plugins, scrubbed unless ``scrub`` is off (``ConfigError``: misconfigured)."""
    return open_host_engine(settings.engine, plugins=settings.engine_plugins, scrub=settings.scrub)


class Runtime:
    """What one worker process holds, each opened on first use unless given: engine, stores, queue."""

    def __init__(
        self,
        settings: Settings,
        *,
        engine: MemoryEngine | None = None,
        coordination: Coordination | None = None,
        letters: DeadLetterStore | None = None,
        queue: JobQueue | None = None,
        kinds: JobKinds = JOB_KINDS,
    ) -> None:
        self.settings = settings
        self.kinds = kinds
        self.layout = MemoryLayout(settings.layout_root)
        self.engine_key = engine_key(settings.engine)
        given = {"engine": engine, "coordination": coordination, "letters": letters, "queue": queue}
        vars(self).update((name, part) for name, part in given.items() if part is not None)  # as if opened

    @cached_property
    def engine(self) -> MemoryEngine:
        """The engine."""
        return open_worker_engine(self.settings)

    @property
    def runner(self) -> BackgroundRunner:
        """A ``BackgroundRunner`` over the engine and layout."""
        return BackgroundRunner(self.engine, self.layout)

    @cached_property
    def coordination(self) -> Coordination:
        """The coordination store."""
        return open_coordination(self.settings)

    @cached_property
    def letters(self) -> DeadLetterStore:
        """The dead-letter store."""
        return open_dead_letters(self.settings)

    @cached_property
    def queue(self) -> JobQueue:
        """A ``JobQueue`` for follow-up jobs (sharing the coordination store)."""
        return JobQueue(self.settings, coordination=self.coordination, kinds=self.kinds)

    def close(self) -> None:
        """Close whatever was opened."""
        for name in ("queue", "engine", "coordination", "letters"):
            part = vars(self).get(name)
            if part is not None:
                try:
                    part.close()
                except Exception as exc:  # closing must not mask the shutdown
                    log.warning("closing %s failed: %s", type(part).__name__, exc)


class PerProcess(Generic[T]):
    """A value opened on first use in each process (a forked child must not share its parent's connections)."""

    def __init__(self, opener: Callable[[], T]) -> None:
        self._opener = opener
        self._lock = threading.Lock()
        self._held: tuple[int, T] | None = None
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # a thread of the parent may have held it at the fork

    def get(self) -> T:
        """This process's value, opened now if this process has none yet."""
        with self._lock:
            pid = os.getpid()
            if self._held is None or self._held[0] != pid:
                self._held = (pid, self._opener())
            return self._held[1]

    def reset(self, close: Callable[[T], None] | None = None) -> None:
        """Forget the value; ``close`` it first when this process opened it (a parent's copy is left alone)."""
        with self._lock:
            held, self._held = self._held, None
        if held is not None and close is not None and held[0] == os.getpid():
            close(held[1])


_runtime: PerProcess[Runtime] = PerProcess(lambda: Runtime(get_settings()))


def runtime() -> Runtime:
    """This process's ``Runtime`` (opened on first use, and again in a forked child)."""
    return _runtime.get()


def close_runtime(**_: Any) -> None:
    """Close this process's ``Runtime`` (at worker process shutdown: a Celery signal handler)."""
    _runtime.reset(Runtime.close)


class WrongEngine(Exception):
    """A job submitted for another engine than this worker's: dead-lettered unrun."""


class DeadLettered(Exception):
    """Raised by a task after its job was dead-lettered, so Flower shows a failure."""


@dataclass(frozen=True)
class Delivery:
    """One message as the task saw it; ``progress``: the scopes earlier deliveries finished (None: not read).

    ``stamp_us`` is the trigger's store-clock stamp, set by ``execute``: the newer of the message's ``triggered_us``
    (queued before the stamp moved to the store) and the job's ``stamp`` mark; None: always new.
    """

    task: str
    job_id: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    queue: str | None = None
    retries: int = 0
    progress: frozenset[str] | None = None
    stamp_us: int | None = None


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


def _check_kwargs(d: Delivery, allowed: frozenset[str]) -> None:
    unknown = sorted(set(d.kwargs) - allowed)
    if unknown:
        raise InvalidRequest(f"unexpected keyword argument(s) {unknown}", field="kwargs")


def _parse(d: Delivery, kind: JobKind, kinds: JobKinds) -> ContractModel:
    _check_kwargs(d, kind.kwargs)
    if len(d.args) != 1:
        raise InvalidRequest(f"expected one argument (the job's JSON), got {len(d.args)}", field="args")
    job = kinds.parse(d.args[0])
    if type(job) is not kind.model:
        raise InvalidRequest(f"task {d.task} cannot run a {kinds.of(job).tag} job", field="job")
    stamp = d.kwargs.get("triggered_us")
    if stamp is not None and (isinstance(stamp, bool) or not isinstance(stamp, int)):
        raise InvalidRequest("must be an integer", field="triggered_us")
    engine = d.kwargs.get("engine")
    if engine is not None and not isinstance(engine, str):
        raise InvalidRequest("must be a string (an engine key)", field="engine")
    return job


def _dispatch(rt: Runtime, d: Delivery) -> dict[str, Any]:
    kind = rt.kinds.of_task(d.task)
    if kind is not None:
        job = _parse(d, kind, rt.kinds)
        theirs = d.kwargs.get("engine")  # a job without one runs
        if isinstance(theirs, str) and theirs != rt.engine_key:
            raise WrongEngine(
                f"job for engine {theirs} reached a worker of engine {rt.engine_key}; nothing was run "
                "(deployments sharing one Redis need their own queue names and MEMORY_CORE_REDIS_PREFIX)"
            )
        return kind.handler(rt, d, job)
    task = rt.kinds.maintenance_task(d.task)
    if task is None:
        raise InvalidRequest(f"unknown task {d.task!r}", field="task")
    _check_kwargs(d, task.kwargs)
    if d.args:
        raise InvalidRequest("takes no positional arguments", field="args")
    return task.handler(rt, d)


def _dead(rt: Runtime, d: Delivery, error: BaseException | str, attempts: int, message: str | None = None) -> Outcome:
    letter = DeadLetter.of_call(
        d.job_id, error, d.args, d.kwargs, task=d.task, queue=d.queue, attempts=attempts, message=message
    )
    keep(lambda: rt.letters, letter, logging.ERROR)
    _mark_done(rt, d)  # else a twin would be dead-lettered again under the same id, replacing this letter
    return Outcome(Verdict.DEAD, letter=letter, error=error if isinstance(error, BaseException) else None)


def _mark_done(rt: Runtime, d: Delivery) -> None:
    try:
        rt.coordination.mark_done(d.job_id)
    except Exception as exc:  # a twin would only repeat an idempotent job
        log.warning("job %s: could not mark done: %s", d.job_id, exc)


def _retry(rt: Runtime, d: Delivery, exc: BaseException, attempts: int, rng: random.Random | None) -> Outcome:
    settings = rt.settings
    if attempts >= settings.max_retries + 1:
        return _dead(rt, d, exc, attempts)
    delay = backoff_s(attempts, settings.retry_backoff_s, settings.retry_backoff_max_s, rng)
    log.warning("job %s attempt %d: %s: %s; retry in %.1fs", d.job_id, attempts, type(exc).__name__, exc, delay)
    return Outcome(Verdict.RETRY, countdown=delay, error=exc)


def _stamp(sent: Any, kept: int | None) -> int | None:
    """A delivery's trigger stamp (µs), None when neither part is known (always new).

    The newer of the message's ``triggered_us`` (a message queued before the stamp moved to the store carries it)
    and the job's ``stamp`` mark, which a trigger coalescing into the queued job advances (docs/jobs.md, "The scope
    gate").
    """
    if not isinstance(sent, int) or isinstance(sent, bool):  # ``_parse`` dead-letters a malformed one
        return kept
    return sent if kept is None else max(sent, kept)


def execute(rt: Runtime, d: Delivery, rng: random.Random | None = None) -> Outcome:
    """Run one delivery through the flow and say how it ended; never raises (but ``BaseException``s: Celery's)."""
    max_attempts = rt.settings.max_retries + 1
    try:
        coordination = rt.coordination  # opening it can fail too (a SQLite store locked by another process)
        pending = d.kwargs.get("pending")
        started = coordination.begin_job(d.job_id, pending if isinstance(pending, str) else None)
        if started.done:
            log.info("job %s: a twin of a finished job, dropped", d.job_id)
            return Outcome(Verdict.DUPLICATE, result={"duplicate": True})
        attempts = started.attempts
        d = replace(d, progress=started.progress, stamp_us=_stamp(d.kwargs.get("triggered_us"), started.stamp_us))
    except TRANSIENT as exc:  # the store cannot count: fall back on Celery's own retry count
        return _retry(rt, d, exc, d.retries + 1, rng)
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
        wait = min(exc.wait_s, max_countdown_s(rt.settings))  # below the visibility timeout: check_timeouts
        log.info("job %s: deferred %.3fs", d.job_id, wait)
        return Outcome(Verdict.DEFER, countdown=wait)
    except (InvalidRequest, WrongEngine) as exc:
        return _dead(rt, d, exc, attempts)
    except TRANSIENT as exc:
        return _retry(rt, d, exc, attempts, rng)
    except Exception as exc:
        log.exception("job %s failed", d.job_id)
        return _dead(rt, d, exc, attempts)
    _mark_done(rt, d)
    return Outcome(Verdict.DONE, result=result)

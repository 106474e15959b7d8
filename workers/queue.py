"""``JobQueue``: the host side of the job flow. ``submit(job)`` returns a job id at once and never raises an outage.

```
submit(job) ─► [outbox not empty?] drain ─► BuildBeliefs: pending mark (coalesce) ─► publish (bounded) ─► id
                                   broker or coordination unreachable ─► outbox (SQLite, var_dir) ──► same id
```

* The task's argument is the job's JSON object; nothing is pickled. A ``BuildBeliefs`` also carries
  ``triggered_us`` (the store-clock stamp single flight compares with a build's start) and ``pending`` (the
  mark the worker clears when it starts).
* Identical ``BuildBeliefs`` while one is still queued return that job's id instead of queueing another
  (for at most ``pending_ttl_s``).
* The publish is bounded by ``Settings.publish_timeout_s`` (socket timeouts, no reconnect loop, no publish
  retries: celery#4556). A failure parks the job in the outbox and opens a short circuit (0.5 s doubling to
  15 s) during which submits go straight to the outbox, so a blackholed Redis costs one timeout, not one per
  turn. The outbox drains on the next submit after the circuit closes, on worker start, and from beat.
* A malformed job raises ``InvalidRequest`` (a host bug, nothing is stored); only if the outbox file itself
  cannot be written does ``EngineUnavailable`` escape, since the job could then not be kept.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import kombu.exceptions
import redis
from celery import Celery

from memory_core.errors import EngineUnavailable
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain, parse_job
from memory_core.namespace import Reach
from memory_core.settings import Settings, get_settings
from workers.config import TASK_BUILD_BELIEFS, TASK_INGEST_BRAIN, host_config, queue_for
from workers.coordination import Coordination
from workers.locks import engine_key, pending_key
from workers.outbox import Outbox, OutboxEntry
from workers.stores import open_coordination, open_outbox
from workers.transport import prepare

__all__ = ["BROKER_ERRORS", "DrainReport", "JobQueue", "describe", "describe_reach", "new_job_id", "task_of"]

log = logging.getLogger(__name__)

BROKER_ERRORS: tuple[type[BaseException], ...] = (
    kombu.exceptions.OperationalError,
    kombu.exceptions.ConnectionError,
    redis.RedisError,
    EngineUnavailable,
    ConnectionError,
    TimeoutError,
    OSError,
)
"""What counts as "the broker (or the coordination store) is unreachable" on the submit path."""

_CIRCUIT_MIN_S = 0.5
_CIRCUIT_MAX_S = 15.0
_DRAIN_ON_SUBMIT = 50
"""Rows a submit drains before publishing its own job (bounded so a long backlog cannot stall a turn)."""


def new_job_id() -> str:
    """A fresh job id (a UUID4 string, the Celery task id)."""
    return str(uuid.uuid4())


def task_of(job: BuildBeliefs | IngestBrain) -> str:
    """The task that runs a job: ``memory.build_beliefs`` or ``memory.ingest_brain``."""
    return TASK_BUILD_BELIEFS if isinstance(job, BuildBeliefs) else TASK_INGEST_BRAIN


def describe_reach(reach: Reach) -> str:
    """``agent:alice``; ``source:notion/**`` for a subtree; `` +ancestors`` when it inherits."""
    text = str(reach.at) + ("/**" if reach.descendants else "")
    return text + (" +ancestors" if reach.inherit else "")


def describe(job: BuildBeliefs | IngestBrain) -> str:
    """A short, readable summary for Flower's args column (``argsrepr``).

    ``build_beliefs agent:alice [conversation]``, ``ingest_brain 3 documents (notion, files)``.
    """
    if isinstance(job, BuildBeliefs):
        kinds = ", ".join(k.value for k in job.request.kinds) or "all kinds"
        return f"build_beliefs {describe_reach(job.request.reach)} [{kinds}]"
    sources = ", ".join(sorted({d.source.id for d in job.documents}))
    n = len(job.documents)
    return f"ingest_brain {n} document{'s' if n != 1 else ''} ({sources})"


@dataclass(frozen=True)
class DrainReport:
    """What one drain did: rows published, rows left for later, and the error that stopped it, if any."""

    delivered: int
    left: int
    error: str | None = None


class JobQueue:
    """Submit background jobs to the Celery workers (see the module docstring).

    Args:
        settings: The settings (default: the process's).
        coordination: The store for pending marks (default: from settings, with ``publish_timeout_s``).
        outbox: The outbox (default: ``var_dir/outbox.db``).

    Thread-safe: a host may submit from several threads.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        coordination: Coordination | None = None,
        outbox: Outbox | None = None,
    ) -> None:
        self.settings = settings or get_settings()
        prepare(self.settings)
        self.app = Celery("memory-core-host", set_as_current=False)
        self.app.conf.update(host_config(self.settings))
        self.coordination = coordination or open_coordination(self.settings, self.settings.publish_timeout_s)
        self.outbox = outbox or open_outbox(self.settings)
        self.engine = engine_key(self.settings.engine)
        self._lock = threading.Lock()
        self._closed_until = 0.0
        self._circuit_s = 0.0
        self._outbox_may_hold = True

    # public --------------------------------------------------------------------------------------------
    def submit(self, job: BuildBeliefs | IngestBrain | dict[str, Any] | str, *, job_id: str | None = None) -> str:
        """Queue a job and return its id at once (never waits for a result).

        Args:
            job: A ``BuildBeliefs`` or ``IngestBrain``, as a model, a JSON object or JSON text.
            job_id: The id to use (``requeue`` reuses a dead letter's); default a fresh UUID.

        Returns:
            The job id: this job's, or, for a ``BuildBeliefs`` identical to one still queued, that job's.

        Raises:
            InvalidRequest: a malformed job (nothing is queued).
            EngineUnavailable: the broker is unreachable AND the outbox cannot be written.
        """
        parsed = parse_job(job)
        jid = job_id or new_job_id()
        if self._circuit_closed():
            if self._outbox_may_hold:
                self.drain(limit=_DRAIN_ON_SUBMIT)
            try:
                served = self._publish(parsed, jid)
            except BROKER_ERRORS as exc:
                self._trip(exc)
            else:
                self._reset()
                return served
        self._park(parsed, jid)
        return jid

    def drain(self, limit: int = 1000) -> DrainReport:
        """Publish parked jobs, oldest first, until the outbox is empty, ``limit`` rows, or a failure.

        Never raises: a failure is reported and leaves the rest parked.
        """
        token = uuid.uuid4().hex
        delivered = 0
        error: str | None = None
        try:
            entries = self.outbox.claim(token, limit)
        except EngineUnavailable as exc:
            return DrainReport(0, -1, str(exc))
        for i, entry in enumerate(entries):
            try:
                self._publish(parse_job(entry.payload), entry.id)
            except BROKER_ERRORS as exc:
                error = f"{type(exc).__name__}: {exc}"
                self._trip(exc)
                for rest in entries[i:]:
                    self._quietly(self.outbox.release, rest.id, token, error)
                break
            except Exception as exc:  # a row that can never be published: keep it, report it
                error = f"{type(exc).__name__}: {exc}"
                self._quietly(self.outbox.release, entry.id, token, error)
                continue
            if self._quietly(self.outbox.delivered, entry.id, token):
                delivered += 1
        left = self._quietly(self.outbox.waiting)
        waiting = left if isinstance(left, int) else -1
        self._outbox_may_hold = waiting != 0
        if delivered:
            log.info("outbox: published %d parked job(s), %d left", delivered, waiting)
        return DrainReport(delivered, waiting, error)

    def close(self) -> None:
        """Release the producer pool and store connections."""
        self.app.close()
        self.coordination.close()
        self.outbox.close()

    @property
    def pending_ttl_s(self) -> int:
        """How long a queued build absorbs identical triggers: ``min(visibility timeout, build_due_interval_s)``.

        Short on purpose: if a queued job is lost (a server-less worker killed, a Redis without persistence),
        its mark expires within one beat period and the next build-due tick queues the scope again.
        """
        return max(1, int(min(self.settings.visibility_timeout_s, self.settings.build_due_interval_s)))

    # internals -----------------------------------------------------------------------------------------
    def _publish(self, job: BuildBeliefs | IngestBrain, job_id: str) -> str:
        task = task_of(job)
        kwargs: dict[str, Any] = {}
        key = None
        if isinstance(job, BuildBeliefs):
            key = pending_key(self.engine, job)
            pending = self.coordination.claim_pending(key, job_id, self.pending_ttl_s)
            if not pending.fresh:
                return pending.job_id
            kwargs = {"triggered_us": pending.stamp_us, "pending": key}
        try:
            self.app.send_task(
                task,
                args=(job.to_dict(),),
                kwargs=kwargs,
                task_id=job_id,
                queue=queue_for(self.settings, task),
                argsrepr=describe(job),
                kwargsrepr="",
                retry=False,
            )
        except BaseException:
            if key is not None:
                self._quietly(self.coordination.clear_pending, key, job_id)
            raise
        return job_id

    def _park(self, job: BuildBeliefs | IngestBrain, job_id: str) -> None:
        self.outbox.put(OutboxEntry(id=job_id, task=task_of(job), payload=job.to_json(), created=time.time()))
        self._outbox_may_hold = True
        log.warning("broker unreachable: job %s (%s) parked in the outbox", job_id, describe(job))

    def _circuit_closed(self) -> bool:
        with self._lock:
            return time.monotonic() >= self._closed_until

    def _trip(self, exc: BaseException) -> None:
        with self._lock:
            self._circuit_s = min(_CIRCUIT_MAX_S, max(_CIRCUIT_MIN_S, self._circuit_s * 2))
            self._closed_until = time.monotonic() + self._circuit_s
        log.warning(
            "publish failed (%s: %s); straight to the outbox for %.1fs", type(exc).__name__, exc, self._circuit_s
        )

    def _reset(self) -> None:
        with self._lock:
            self._circuit_s = 0.0

    @staticmethod
    def _quietly(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            log.warning("%s failed: %s", getattr(fn, "__name__", fn), exc)
            return None

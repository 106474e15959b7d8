"""``JobQueue``: the host side of the job flow. ``submit(job)`` returns a job id at once and never raises an outage.

```
submit(job) ─► [outbox not empty?] drain ─► coalescing kind: pending mark ─► publish (bounded) ─► id
                                   broker or coordination unreachable ─► outbox (SQLite, var_dir) ──► same id
```

The job's kind (``workers.kinds``) names its task, queue and Flower summary; the task's argument is the job's
JSON object, and every message carries ``engine`` (this host's ``engine_key``), a coalescing kind's also
``triggered_us`` and ``pending``. The publish is bounded by ``publish_timeout_s`` (celery#4556); a failure parks
the job and opens a circuit breaker (0.5 s doubling to 15 s) past which one submit probes while the others keep
parking. ``send`` is ``submit`` saying what happened (``Submitted``); ``publish`` and ``requeue`` are the
operator's path (publish now or raise, never parking). ``open_coordination`` and ``open_dead_letters`` open the
stores from settings. The guarantees (outbox, breaker, one payload per id, coalescing): docs/jobs.md.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from celery import Celery

from memory_core._model import ContractModel
from memory_core.errors import EngineUnavailable, InvalidRequest
from memory_core.safety.jobs import scrub_job
from memory_core.settings import Settings, get_settings
from workers.config import TRANSIENT, broker_problem, host_config, prepare, queue_for, redact, redis_url_of, var_paths
from workers.coordination import Coordination, RedisCoordination, SqliteCoordination, redis_client
from workers.dead_letters import DeadLetter, DeadLetterStore, RedisDeadLetters, SqliteDeadLetters, quote_id
from workers.kinds import JOB_KINDS, JobKinds, check_job_id, new_job_id
from workers.locks import engine_key, job_digest, pending_key
from workers.outbox import MAX_FAULTS, Outbox, OutboxEntry

__all__ = [
    "DrainReport",
    "JobQueue",
    "Submitted",
    "open_coordination",
    "open_dead_letters",
    "requeue",
]

log = logging.getLogger(__name__)

_CIRCUIT_MIN_S = 0.5
_CIRCUIT_MAX_S = 15.0
_DRAIN_ON_SUBMIT = 50
"""Rows a submit drains before publishing its own job (bounded so a long backlog cannot stall a turn)."""
_PROBE_HOLD = 2.0
"""While one submit probes a broker whose breaker window ended, the others park for this many publish
timeouts (the probe's publish is bounded by one; the hold ends sooner when the probe succeeds or fails)."""


def open_coordination(settings: Settings, timeout_s: float | None = None) -> Coordination:
    """The coordination store for these settings: the broker's Redis, else ``var_dir/coordination.db``.

    Args:
        settings: The settings.
        timeout_s: Redis socket timeout, seconds (hosts pass ``publish_timeout_s``); default
            ``redis_socket_timeout_s``.
    """
    job_ttl_s = 2 * settings.visibility_timeout_s
    keep_s = max(job_ttl_s, settings.result_expires_s)  # one rule for both stores
    url = redis_url_of(settings)
    if url is None:
        return SqliteCoordination(var_paths(settings)["coordination"], settings.redis_prefix, job_ttl_s, keep_s)
    client = redis_client(url, timeout_s or settings.redis_socket_timeout_s, settings.redis_health_check_s)
    return RedisCoordination(client, settings.redis_prefix, job_ttl_s, keep_s)


def open_dead_letters(settings: Settings, timeout_s: float | None = None) -> DeadLetterStore:
    """The dead-letter store for these settings, beside the coordination store (``timeout_s`` as there)."""
    url = redis_url_of(settings)
    if url is None:
        return SqliteDeadLetters(var_paths(settings)["coordination"], settings.dead_letter_max)
    client = redis_client(url, timeout_s or settings.redis_socket_timeout_s, settings.redis_health_check_s)
    return RedisDeadLetters(client, settings.redis_prefix, settings.dead_letter_max)


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _letter_payload(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


@dataclass(frozen=True)
class Submitted:
    """What one ``send`` did.

    Attributes:
        id: The job id serving the job (this job's, or the queued identical build's when coalesced).
        state: ``published`` (on the broker now), ``coalesced`` (an identical build is still queued: its id) or
            ``parked`` (the broker is unreachable: in the local outbox, published later under ``id``).
    """

    id: str
    state: str


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
        letters: Where unpublishable outbox rows go (default: the dead-letter store, opened when first needed,
            with ``publish_timeout_s``).
        kinds: The table of job kinds jobs are parsed, routed and described by (``workers.kinds``).

    Thread-safe: a host may submit from several threads.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        coordination: Coordination | None = None,
        outbox: Outbox | None = None,
        letters: DeadLetterStore | None = None,
        kinds: JobKinds = JOB_KINDS,
    ) -> None:
        self.settings = settings or get_settings()
        self.kinds = kinds
        prepare(self.settings)
        self.app = Celery("memory-core-host", set_as_current=False)
        self.app.conf.update(host_config(self.settings, kinds))
        self.coordination = coordination or open_coordination(self.settings, self.settings.publish_timeout_s)
        self.outbox = outbox or Outbox(var_paths(self.settings)["outbox"])
        self.engine = engine_key(self.settings.engine)
        self._letters = letters
        self._lock = threading.Lock()
        self._closed_until = 0.0
        self._circuit_s = 0.0
        self._trips = 0
        self._outbox_may_hold = True
        self._config_error: str | None = None  # logged once: a wrong password is no outage (issue 11 §4)

    # public --------------------------------------------------------------------------------------------
    def submit(self, job: ContractModel | dict[str, Any] | str, *, job_id: str | None = None) -> str:
        """Queue a job and return its id at once (never waits for a result).

        Args:
            job: A ``BuildBeliefs`` or ``IngestBrain``, as a model, a JSON object or JSON text.
            job_id: The id to use (``requeue`` reuses a dead letter's); default a fresh UUID.

        Returns:
            The job id: this job's, or, for a ``BuildBeliefs`` identical to one still queued, that job's.

        Raises:
            InvalidRequest: a malformed job, or a ``job_id`` that ``check_job_id`` refuses (nothing is queued).
            EngineUnavailable: the broker is unreachable AND the outbox cannot be written.
        """
        return self.send(job, job_id=job_id).id

    def send(self, job: ContractModel | dict[str, Any] | str, *, job_id: str | None = None) -> Submitted:
        """``submit``, saying whether the job was published, coalesced or parked (see ``Submitted``).

        Raises:
            InvalidRequest: as ``submit``.
            EngineUnavailable: as ``submit``.
        """
        parsed = self.kinds.parse(job)
        if self.settings.scrub:  # no secret reaches Redis, the outbox, Flower, results or dead letters
            parsed = scrub_job(parsed)
        jid = new_job_id() if job_id is None else check_job_id(job_id)
        trips = self._may_publish()
        if trips is not None:
            if self._outbox_may_hold:
                self.drain(limit=_DRAIN_ON_SUBMIT)
            if self._trips_now() == trips:  # the drain (or another thread) did not find the broker gone
                try:
                    served = self._publish(parsed, jid)
                except TRANSIENT as exc:
                    self._trip(exc)
                else:
                    self._reset()
                    return Submitted(served, "published" if served == jid else "coalesced")
        self._park(parsed, jid)
        return Submitted(jid, "parked")

    def publish(self, job: ContractModel, job_id: str, *, engine: str | None = None) -> str:
        """Publish ``job`` now under ``job_id`` for ``engine`` (an ``engine_key``; default this host's), or raise.

        The operator's path (``dead-letters requeue``): nothing is parked, so a requeue while Redis is down fails
        and the letter stays, instead of waiting in this machine's outbox.

        Returns:
            The job id serving it (``job_id``, or a queued identical build's).

        Raises:
            InvalidRequest: a ``job_id`` that ``check_job_id`` refuses.
            EngineUnavailable: the broker (or the coordination store) is unreachable.
        """
        try:
            return self._publish(job, check_job_id(job_id), engine)
        except EngineUnavailable:
            raise
        except TRANSIENT as exc:
            raise EngineUnavailable(f"broker: {_error_text(exc)}") from None

    def drain(self, limit: int = 1000) -> DrainReport:
        """Publish parked jobs, oldest first, until the outbox is empty, ``limit`` rows, or a failure.

        Never raises: a broker failure opens the breaker and leaves the rest parked; a row that fails for
        another reason is counted, and dead-lettered at its ``MAX_FAULTS``-th failure.
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
                self._publish(self.kinds.parse(entry.payload), entry.id)
            except TRANSIENT as exc:
                error = _error_text(exc)
                self._trip(exc)
                self._release(entries[i:], token, error)
                break
            except Exception as exc:  # not the broker: the row itself (a payload that is not a job)
                error = _error_text(exc)
                if not self._fault(entry, token, exc):  # the dead letters' Redis is gone too
                    self._release(entries[i + 1 :], token, error)
                    break
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
    def letters(self) -> DeadLetterStore:
        """The dead-letter store unpublishable outbox rows go to (opened on first use)."""
        if self._letters is None:
            self._letters = open_dead_letters(self.settings, self.settings.publish_timeout_s)
        return self._letters

    @property
    def pending_ttl_s(self) -> int:
        """How long a queued build absorbs identical triggers: ``min(visibility timeout, build_due_interval_s)``.

        Short on purpose: if a queued job is lost (a server-less worker killed, a Redis without persistence),
        its mark expires within one beat period and the next build-due tick queues the scope again.
        """
        return max(1, int(min(self.settings.visibility_timeout_s, self.settings.build_due_interval_s)))

    # internals -----------------------------------------------------------------------------------------
    def _publish(self, job: ContractModel, job_id: str, engine: str | None = None) -> str:
        kind = self.kinds.of(job)
        stamp = engine or self.engine
        kwargs: dict[str, Any] = {"engine": stamp}
        key = pending_key(stamp, job) if kind.coalesce else None
        pending = self.coordination.claim_job(job_id, job_digest(kind.task, job), key, self.pending_ttl_s)
        if pending is None:
            raise InvalidRequest(
                f"job id {quote_id(job_id)} names another job (a job id names one payload while its record is kept)",
                field="job_id",
            )
        if not pending.fresh:
            return pending.job_id  # an identical job is still queued: it serves this trigger
        if key is not None:
            kwargs.update(triggered_us=pending.stamp_us, pending=key)
        try:
            self.app.send_task(
                kind.task,
                args=(job.to_dict(),),
                kwargs=kwargs,
                task_id=job_id,
                queue=queue_for(self.settings, kind.task, self.kinds),
                argsrepr=kind.describe(job),
                kwargsrepr="",
                retry=False,
            )
        except BaseException:
            if key is not None:
                self._quietly(self.coordination.clear_pending, key, job_id)
            raise
        return job_id

    def _release(self, entries: list[OutboxEntry], token: str, error: str) -> None:
        for entry in entries:
            self._quietly(self.outbox.release, entry.id, token, error)

    def _fault(self, entry: OutboxEntry, token: str, exc: Exception) -> bool:
        """Count a failure of ``entry`` that was not the broker's; at ``MAX_FAULTS``, dead-letter the row.

        Returns:
            False when the dead-letter store was unreachable for a broker reason (the breaker is open now).
        """
        error = _error_text(exc)
        faults = entry.faults + 1
        if faults < MAX_FAULTS:
            self._quietly(self.outbox.release, entry.id, token, error, True)
            return True
        letter = DeadLetter.of(
            entry.id,
            exc,
            payload=_letter_payload(entry.payload),
            task=entry.task,
            attempts=entry.tries + 1,
            message=f"outbox: not publishable after {faults} tries: {exc}",
        )
        try:
            self.letters.put(letter)
        except Exception as put_exc:  # keep the row: it is retried (and dead-lettered) on a later drain
            log.warning("outbox: job %s could not be dead-lettered: %s", entry.id, _error_text(put_exc))
            self._quietly(self.outbox.release, entry.id, token, error, True)
            if isinstance(put_exc, TRANSIENT):
                self._trip(put_exc)
                return False
            return True
        self._quietly(self.outbox.remove, entry.id, token)
        log.error("outbox: job %s dead-lettered after %d failed publishes: %s", entry.id, letter.attempts, error)
        return True

    def _park(self, job: ContractModel, job_id: str) -> None:
        kind = self.kinds.of(job)
        entry = OutboxEntry(id=job_id, task=kind.task, payload=job.to_json(), created=time.time())
        self.outbox.put(entry)
        self._outbox_may_hold = True
        log.warning("broker unreachable: job %s (%s) parked in the outbox", job_id, kind.describe(job))

    def _may_publish(self) -> int | None:
        """The breaker's trip count when this caller may try the broker, None while the breaker is open.

        After a trip, the first caller past the window is the probe: the window is held for
        ``_PROBE_HOLD`` publish timeouts more, so concurrent submits park instead of each waiting out the same
        dead broker; the probe's success (``_reset``) or failure (``_trip``) ends the hold.
        """
        with self._lock:
            now = time.monotonic()
            if now < self._closed_until:
                return None
            if self._circuit_s > 0.0:
                self._closed_until = now + _PROBE_HOLD * self.settings.publish_timeout_s
            return self._trips

    def _trips_now(self) -> int:
        with self._lock:
            return self._trips

    def _trip(self, exc: BaseException) -> None:
        with self._lock:
            self._trips += 1
            self._circuit_s = min(_CIRCUIT_MAX_S, max(_CIRCUIT_MIN_S, self._circuit_s * 2))
            self._closed_until = time.monotonic() + self._circuit_s
            known = self._config_error
        problem = known or broker_problem(str(self.settings.broker_url or ""), exc, self.settings.publish_timeout_s)
        if problem is None:
            log.warning("publish failed (%s); straight to the outbox for %.1fs", _error_text(exc), self._circuit_s)
            return
        if known is None:  # once, loudly: retrying cannot fix a configuration; the jobs wait in the outbox
            self._config_error = problem
            log.critical(
                "broker configuration error: %s refuses this configuration: %s; jobs are kept in the outbox "
                "and published once the configuration is fixed",
                redact(str(self.settings.broker_url)),
                problem,
            )

    def _reset(self) -> None:
        with self._lock:
            self._circuit_s = 0.0
            self._closed_until = 0.0

    @staticmethod
    def _quietly(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            log.warning("%s failed: %s", getattr(fn, "__name__", fn), exc)
            return None


def requeue(
    settings: Settings,
    ref: str,
    *,
    engine: str | None = None,
    store: DeadLetterStore | None = None,
    queue: JobQueue | None = None,
) -> str:
    """Publish dead letter ``ref``'s job again under its id (attempts, progress and done marks cleared).

    The letter is deleted *before* the publish (and put back if it fails): a job that fails again at once then
    writes a new letter under the same id that stays. The job keeps the engine key it was submitted with (the
    letter's ``engine``), so it neither bounces back as ``WrongEngine`` nor runs against the store of whatever
    engine the operator's shell names.

    Args:
        settings: The settings.
        ref: The letter's id, or a prefix of it that only one letter has.
        engine: An engine URL to run the job against instead (its ``engine_key`` is stamped on the job).
        store: The dead-letter store (tests); default opened from settings.
        queue: The job queue (tests); default opened from settings.

    Returns:
        The job id serving it (the letter's, or a pending identical build's).

    Raises:
        NotFound: no such dead letter.
        InvalidRequest: an ambiguous prefix, or a payload that is not a job (purge it).
        EngineUnavailable: the store or the broker is unreachable (the letter is kept).
    """
    letters = store or open_dead_letters(settings)
    letter = letters.get(letters.resolve(ref))
    if letter.truncated:
        raise InvalidRequest("the payload was cut when it was dead-lettered; it cannot be requeued", field="payload")
    target = engine_key(engine) if engine else letter.engine
    jobs = queue or JobQueue(settings)
    try:
        job = jobs.kinds.parse(letter.payload)
        jobs.coordination.forget_job(letter.id)
        letters.delete(letter.id)
        try:
            return jobs.publish(job, letter.id, engine=target)
        except BaseException:
            letters.put(letter)  # not published: the letter stays for the next try
            raise
    finally:
        if queue is None:
            jobs.close()

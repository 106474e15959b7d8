"""The host side of the job flow: ``JobQueue.submit(job)`` returns a job id at once and never raises an outage.

A submit of a fresh id sends the id's bind in the broker's write that pushes the message (``Ride``: Celery's own
publish, no round trip of its own); a coalescing kind's push is one script that claims its pending mark and pushes
only when it was free, keeping Redis's stamp as the job's ``stamp`` mark (``ClaimRide``). Publishes are bounded by
``publish_timeout_s``; an unreachable broker or store parks the job in the ``Outbox`` (SQLite, ``var_dir``) under
the same id. ``publish`` and ``requeue`` are the operator's path (publish now or raise, never park). The
guarantees (outbox, circuit breaker, one payload per id, coalescing): docs/jobs.md.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from redis.connection import parse_url

from memory_core._model import ContractModel
from memory_core.engine import MemoryEngine
from memory_core.errors import EngineUnavailable, InvalidRequest
from memory_core.safety.jobs import scrub_job
from memory_core.settings import Settings, get_settings
from memory_core.tools.jobs import ToolWrite
from memory_core.tools.memory_tools import ToolScope
from memory_core.tools.writes import ToolWrites
from workers.config import (
    SAFE_REDIS_TRANSPORT,
    TRANSIENT,
    broker_problem,
    host_config,
    prepare,
    queue_for,
    redact,
    redis_url_of,
    var_paths,
)
from workers.coordination import (
    Coordination,
    LocalDb,
    Pending,
    RedisCoordination,
    SqliteCoordination,
    engine_key,
    job_digest,
    pending_key,
    pending_of,
    redis_client,
)
from workers.dead_letters import DeadLetter, DeadLetterStore, RedisDeadLetters, SqliteDeadLetters, quote_id
from workers.kinds import JOB_KINDS, JobKind, JobKinds, check_job_id, new_job_id

__all__ = [
    "MAX_FAULTS",
    "ClaimRide",
    "Coalesced",
    "DrainReport",
    "JobQueue",
    "Outbox",
    "OutboxEntry",
    "QueueSink",
    "Ride",
    "Submitted",
    "Unridable",
    "open_coordination",
    "open_dead_letters",
    "open_tool_writes",
    "current_ride",
    "requeue",
    "take_ride",
]

log = logging.getLogger(__name__)

_CIRCUIT_MIN_S, _CIRCUIT_MAX_S = 0.5, 15.0
_DRAIN_ON_SUBMIT = 50
"""Rows a submit drains before publishing its own job (bounded so a long backlog cannot stall a turn)."""
_PROBE_HOLD = 2.0
"""While one submit probes a broker whose breaker window ended, the others park for this many publish timeouts."""
MAX_FAULTS = 3
"""Failed publishes not caused by the broker after which a parked row is dead-lettered."""


def _redis(settings: Settings, timeout_s: float | None) -> Any:
    url = redis_url_of(settings)
    if url is None:
        return None
    return redis_client(url, timeout_s or settings.redis_socket_timeout_s, settings.redis_health_check_s)


def open_coordination(settings: Settings, timeout_s: float | None = None) -> Coordination:
    """The coordination store: the broker's Redis (socket timeout ``timeout_s``), else ``var_dir/coordination.db``."""
    job_ttl_s = 2 * settings.visibility_timeout_s
    keep_s = max(job_ttl_s, settings.result_expires_s)
    client = _redis(settings, timeout_s)
    if client is None:
        return SqliteCoordination(var_paths(settings)["coordination"], settings.redis_prefix, job_ttl_s, keep_s)
    return RedisCoordination(client, settings.redis_prefix, job_ttl_s, keep_s)


def open_dead_letters(settings: Settings, timeout_s: float | None = None) -> DeadLetterStore:
    """The dead-letter store, beside the coordination store (``timeout_s`` as there)."""
    client = _redis(settings, timeout_s)
    if client is None:
        return SqliteDeadLetters(var_paths(settings)["coordination"], settings.dead_letter_max)
    return RedisDeadLetters(client, settings.redis_prefix, settings.dead_letter_max)


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# the outbox -----------------------------------------------------------------------------------------------------
_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id TEXT PRIMARY KEY, task TEXT NOT NULL, payload TEXT NOT NULL, created REAL NOT NULL,
    tries INTEGER NOT NULL DEFAULT 0, faults INTEGER NOT NULL DEFAULT 0, last_error TEXT,
    claimed_by TEXT, claimed_at REAL, delivered_at REAL
);
CREATE INDEX IF NOT EXISTS outbox_waiting ON outbox (delivered_at, created);
"""


@dataclass(frozen=True)
class OutboxEntry:
    """One parked job: its id, task name, JSON text, when parked (epoch s), failed publishes and non-broker faults."""

    id: str
    task: str
    payload: str
    created: float
    tries: int = 0
    faults: int = 0


class Outbox:
    """The durable outbox: a SQLite file (``synchronous=FULL``) shared by the processes of one machine.

    Delivery is claim → publish → mark: a claim stamps rows with the drainer's token in one ``BEGIN IMMEDIATE`` and
    marking checks it, so two drainers never publish one row; a claim older than ``claim_ttl_s`` is abandoned (its
    row is published again: a twin the workers drop).
    """

    def __init__(self, path: Path, claim_ttl_s: float = 60.0) -> None:
        self.path, self.claim_ttl_s = path, claim_ttl_s
        self._store = LocalDb(path, "outbox", synchronous="FULL")
        self._tx = self._store.transaction
        self._store.execute(_SCHEMA, script=True)
        with self._tx() as db:  # an outbox written before ``faults`` existed gets the column
            if "faults" not in {row[1] for row in db.execute("PRAGMA table_info(outbox)")}:
                db.execute("ALTER TABLE outbox ADD COLUMN faults INTEGER NOT NULL DEFAULT 0")

    def _change(self, sql: str, params: tuple[Any, ...]) -> int:
        with self._tx() as db:
            return db.execute(sql, params).rowcount

    def put(self, entry: OutboxEntry) -> None:
        """Park a job durably; an id parked twice is kept once.

        Raises:
            InvalidRequest: ``field="job_id"``: the id is kept with another task or payload (issue 11 §3).
            EngineUnavailable: the file cannot be written.
        """
        with self._tx() as db:
            kept = db.execute("SELECT task, payload FROM outbox WHERE id = ?", (entry.id,)).fetchone()
            if kept is not None and tuple(kept) != (entry.task, entry.payload):
                raise InvalidRequest(f"job id {quote_id(entry.id)} names another job in the outbox", field="job_id")
            db.execute(
                "INSERT OR IGNORE INTO outbox (id, task, payload, created) VALUES (?, ?, ?, ?)",
                (entry.id, entry.task, entry.payload, entry.created),
            )

    def claim(self, token: str, limit: int = 100) -> list[OutboxEntry]:
        """Claim up to ``limit`` undelivered rows (oldest first) not claimed by a live drainer."""
        now = time.time()
        with self._tx() as db:
            rows = db.execute(
                "UPDATE outbox SET claimed_by = ?, claimed_at = ? WHERE id IN ("
                " SELECT id FROM outbox WHERE delivered_at IS NULL AND (claimed_by IS NULL OR claimed_at < ?)"
                " ORDER BY created LIMIT ?) RETURNING id, task, payload, created, tries, faults",
                (token, now, now - self.claim_ttl_s, limit),
            ).fetchall()
        return sorted((OutboxEntry(*row) for row in rows), key=lambda e: e.created)

    def delivered(self, entry_id: str, token: str) -> bool:
        """Mark a claimed row delivered; False when the claim was lost (another drainer owns it now)."""
        sql = "UPDATE outbox SET delivered_at = ?, claimed_by = NULL WHERE id = ? AND claimed_by = ?"
        sql += " AND delivered_at IS NULL"
        return self._change(sql, (time.time(), entry_id, token)) == 1

    def release(self, entry_id: str, token: str, error: str, fault: bool = False) -> None:
        """Give a claimed row back after a failed publish, counting the try (and the fault, when ``fault``)."""
        self._change(
            "UPDATE outbox SET claimed_by = NULL, claimed_at = NULL, tries = tries + 1, faults = faults + ?,"
            " last_error = ? WHERE id = ? AND claimed_by = ?",
            (int(fault), error[:500], entry_id, token),
        )

    def remove(self, entry_id: str, token: str) -> bool:
        """Delete a claimed row (it was dead-lettered); False when the claim was lost."""
        return self._change("DELETE FROM outbox WHERE id = ? AND claimed_by = ?", (entry_id, token)) == 1

    def waiting(self) -> int:
        """Rows not yet delivered."""
        return int(self._store.execute("SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL").fetchone()[0])

    def prune(self, older_than_s: float = 86400.0) -> int:
        """Drop delivered rows older than ``older_than_s``; returns how many."""
        sql = "DELETE FROM outbox WHERE delivered_at IS NOT NULL AND delivered_at < ?"
        return self._change(sql, (time.time() - older_than_s,))

    def close(self) -> None:
        """Close this thread's connection."""
        self._store.close()


# commands riding with a push ----------------------------------------------------------------------------------
class Ride:
    """Redis commands sent in the write that pushes this thread's next job message, before the push.

    ``workers.transport``'s Redis channel takes the ride (``take_ride``) as it pushes a message to a queue, so the
    commands cost no round trip of their own. It reads the write's replies only when Celery publishes the job's
    task-sent event, or when the publish returns (``settle``): Redis answers while Celery builds the event. Then
    ``replies`` holds the commands' replies (an exception for a command Redis refused), and ``error`` why the push
    did not happen (no event is sent for it). Untaken (another transport pushed, or the publish failed first), the
    caller sends the commands itself.
    """

    __slots__ = ("answer", "commands", "error", "replies", "taken")
    must = False
    """Whether the push may not go without the ride (``take_ride`` raises ``Unridable`` where it cannot ride)."""

    def __init__(self, commands: tuple[tuple[Any, ...], ...]) -> None:
        self.commands = commands
        self.replies: list[Any] = []
        self.taken = False
        self.answer: Callable[[], list[Any]] | None = None  # reads the write's replies (set by the transport)
        self.error: Exception | None = None

    def settle(self) -> Exception | None:
        """Read the replies of the write, once (``land``); the error the push ended with, else None."""
        answer, self.answer = self.answer, None
        if answer is not None:
            try:
                self.land(answer())
            except Exception as exc:
                self.error = exc
        return self.error

    def pack(self, pushes: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The push's write: these commands, then kombu's ``pushes`` (``(name, key, value)``)."""
        return [*self.commands, *pushes]

    def land(self, replies: list[Any]) -> None:
        """Keep the commands' replies; a push Redis refused raises its error, as kombu's own push would."""
        self.replies = replies[: len(self.commands)]
        for reply in replies[len(self.commands) :]:
            if isinstance(reply, Exception):
                raise reply


class Unridable(Exception):
    """A ``ClaimRide`` cannot go with this push (raised before anything is sent: the claim goes on its own)."""


class Coalesced(Exception):
    """Raised through Celery's publish by a ``ClaimRide``: an identical job is queued (nothing pushed, no event)."""

    def __init__(self, pending: Pending) -> None:
        super().__init__(pending.job_id)
        self.pending = pending


class ClaimRide(Ride):
    """A coalescing job's claim with its push inside: one ``EVAL`` that pushes only when the pending mark is fresh.

    ``command(pushes)`` is ``RedisCoordination.claim_command`` with the job bound; the message goes as Celery
    serialised it. ``pending`` holds the claim's answer; a claim another job holds raises ``Coalesced`` out of the
    publish, so Celery sends no event.
    """

    __slots__ = ("command", "pending")
    must = True

    def __init__(self, command: Callable[[list[tuple[Any, ...]]], tuple[Any, ...]]) -> None:
        super().__init__(())
        self.command = command
        self.pending: Pending | None = None

    def pack(self, pushes: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The claim script, running kombu's ``pushes`` when the claim is fresh.

        Raises:
            Unridable: a push is not a ``(name, key, value)`` command.
        """
        if not pushes or any(len(push) != 3 for push in pushes):
            raise Unridable(f"kombu's pushes are not (name, key, value) commands: {[push[0] for push in pushes]}")
        return [self.command(pushes)]

    def land(self, replies: list[Any]) -> None:
        """Keep the claim's answer; raise a refused script's error, or ``Coalesced`` when another job serves.

        Raises:
            InvalidRequest: ``field="job_id"``: the id is bound to another payload (nothing was pushed).
        """
        if isinstance(replies[0], Exception):
            raise replies[0]
        self.pending = pending_of(replies[0])
        if self.pending is None:
            raise InvalidRequest("the job id names another job", field="job_id")
        if not self.pending.fresh:
            raise Coalesced(self.pending)


_rides = threading.local()


def current_ride() -> Ride | None:
    """The ``Ride`` of this thread's publish under way, taken or not; None outside ``JobQueue``'s publishes."""
    ride: Ride | None = getattr(_rides, "current", None)
    return ride


def take_ride(able: bool = True) -> Ride | None:
    """The ``Ride`` this thread's next push should carry, marked taken; None when none waits.

    Args:
        able: False when the push cannot carry commands (a kombu publish batch, prefixed keys): then None.

    Raises:
        Unridable: ``able`` is False and the ride waiting is one the push may not go without (``Ride.must``).
    """
    ride: Ride | None = getattr(_rides, "current", None)
    if ride is None or ride.taken:
        return None
    if not able:
        if ride.must:
            raise Unridable("this push cannot carry commands")
        return None
    ride.taken = True
    return ride


def _same_redis(client: redis.Redis[str], url: str) -> bool:
    """True when ``client`` talks to the Redis server and database ``url`` names (host, port, db, socket path)."""
    mine, theirs = client.connection_pool.connection_kwargs, parse_url(url)
    return all(mine.get(key) == theirs.get(key) for key in ("host", "port", "db", "path"))


# the queue ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Submitted:
    """What one ``send`` did: the id serving the job, and ``published``, ``coalesced`` or ``parked``."""

    id: str
    state: str


@dataclass(frozen=True)
class DrainReport:
    """What one drain did: rows published, rows left for later (-1: unknown), and the error that stopped it."""

    delivered: int
    left: int
    error: str | None = None


class JobQueue:
    """Submit background jobs to the Celery workers (thread-safe); stores and ``kinds`` injectable (tests)."""

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
        self._queues = {kind.task: queue_for(self.settings, kind.task, kinds) for kind in kinds}
        store, conf = self.coordination, self.app.conf
        self._bind_command: Callable[[str, str], tuple[Any, ...]] | None = None
        self._claim_command: Callable[..., tuple[Any, ...]] | None = None
        if (  # the coordination store is the broker's Redis: a fresh id's bind (and claim) rides with its push
            isinstance(store, RedisCoordination)
            and conf.broker_transport == SAFE_REDIS_TRANSPORT
            and _same_redis(store.client, str(conf.broker_url))
        ):
            self._bind_command, self._claim_command = store.bind_command, store.claim_command
        self._letters = letters
        self._lock = threading.Lock()
        self._closed_until = self._circuit_s = 0.0
        self._trips = 0
        self._outbox_may_hold = True
        self._config_error: str | None = None  # logged once: a wrong password is no outage (issue 11 §4)

    def submit(self, job: ContractModel | dict[str, Any] | str, *, job_id: str | None = None) -> str:
        """Queue a job (a model, a JSON object or JSON text) under ``job_id`` (default a fresh UUID); its id at once.

        Returns:
            This job's id, or, for a coalescing job identical to one still queued, that job's.

        Raises:
            InvalidRequest: a malformed job, or a ``job_id`` that ``check_job_id`` refuses (nothing is queued).
            EngineUnavailable: the broker is unreachable AND the outbox cannot be written.
        """
        return self.send(job, job_id=job_id).id

    def send(self, job: ContractModel | dict[str, Any] | str, *, job_id: str | None = None) -> Submitted:
        """``submit``, saying whether the job was ``published``, ``coalesced`` or ``parked`` (same errors)."""
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
                    served = self._publish(parsed, jid, fresh=job_id is None)
                except TRANSIENT as exc:
                    self._trip(exc)
                else:
                    self._reset()
                    return Submitted(served, "published" if served == jid else "coalesced")
        self._park(parsed, jid)
        return Submitted(jid, "parked")

    def publish(self, job: ContractModel, job_id: str, *, engine: str | None = None) -> str:
        """Publish ``job`` now under ``job_id`` for ``engine`` (default this host's), or raise; never parks.

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
        """Publish parked jobs, oldest first, up to ``limit``; never raises (``MAX_FAULTS`` faults dead-letter one)."""
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

        Short on purpose: a lost queued job's mark expires within one beat period, and the next tick queues it again.
        """
        return max(1, int(min(self.settings.visibility_timeout_s, self.settings.build_due_interval_s)))

    def _publish(self, job: ContractModel, job_id: str, engine: str | None = None, fresh: bool = False) -> str:
        """Publish under ``job_id``; a ``fresh`` id's bind (and claim) goes in the push's write (nothing bound it)."""
        kind = self.kinds.of(job)
        target = engine or self.engine
        text = job.to_json()  # one serialisation: the digest, the pending key and the message's argument
        digest = job_digest(kind.task, job, text)
        key = pending_key(target, job, text) if kind.coalesce else None
        kwargs: dict[str, Any] = {"engine": target} if key is None else {"engine": target, "pending": key}
        if fresh and key is not None and self._claim_command is not None:  # claim, bind and push: one script
            ride = ClaimRide(partial(self._claim_command, job_id, digest, key, self.pending_ttl_s))
            try:
                self._send_claimed(kind, job, job_id, text, kwargs, key, digest, ride)
                return job_id
            except Coalesced as coalesced:  # an identical job is still queued: it serves this trigger
                return coalesced.pending.job_id
            except Unridable as exc:  # nothing was sent: the claim takes its own round trip
                log.debug("job %s: the claim goes on its own: %s", job_id, exc)
        if fresh and key is None:
            self._send_claimed(kind, job, job_id, text, kwargs, None, digest)
            return job_id
        claimed = self.coordination.claim_job(job_id, digest, key, self.pending_ttl_s)
        if claimed is None:
            raise InvalidRequest(
                f"job id {quote_id(job_id)} names another job (a job id names one payload while its record is kept)",
                field="job_id",
            )
        if not claimed.fresh:
            return claimed.job_id  # an identical job is still queued: it serves this trigger
        self._send_claimed(kind, job, job_id, text, kwargs, key)
        return job_id

    def _send_claimed(
        self,
        kind: JobKind,
        job: ContractModel,
        job_id: str,
        text: str,
        kwargs: dict[str, Any],
        key: str | None,
        digest: str | None = None,
        ride: Ride | None = None,
    ) -> None:
        """Publish (with the id's bind, or ``ride``, when ``digest`` is given); a failed publish gives the mark back."""
        try:
            if digest is None:
                self._send(kind, job, job_id, text, kwargs)
            else:
                self._send_bound(kind, job, job_id, text, digest, kwargs, ride)
        except (Coalesced, Unridable):
            raise  # no mark of this job's was taken
        except BaseException:
            if key is not None:
                self._quietly(self.coordination.clear_pending, key, job_id)
            raise

    def _send_bound(
        self,
        kind: JobKind,
        job: ContractModel,
        job_id: str,
        text: str,
        digest: str,
        kwargs: dict[str, Any],
        ride: Ride | None = None,
    ) -> None:
        """Publish a fresh id with its bind: riding with the push (``ride``: default the bind), else sent first.

        A failed bind is logged, not raised: the job is published, only a later replay check of its id is lost.
        """
        if self._bind_command is None:
            answer = self.coordination.bind_later(job_id, digest)
            try:
                self._send(kind, job, job_id, text, kwargs)
            finally:
                answer()
            return
        ride = ride or Ride((self._bind_command(job_id, digest),))
        _rides.current = ride
        try:
            self._send(kind, job, job_id, text, kwargs)
        finally:
            _rides.current = None
            error = ride.settle()  # read by the task-sent event's publish already, unless none followed
        if error is not None:
            raise error
        if not ride.taken:  # a channel that carries no rides pushed it: bind now
            self._quietly(self.coordination.claim_job, job_id, digest, None, 0)
        elif ride.commands and (not ride.replies or isinstance(ride.replies[0], Exception)):
            log.warning("job %s: binding its id failed: %s", job_id, ride.replies[0] if ride.replies else "no reply")

    def _send(self, kind: JobKind, job: ContractModel, job_id: str, text: str, kwargs: dict[str, Any]) -> None:
        self.app.send_task(
            kind.task,
            args=(json.loads(text),),
            kwargs=kwargs,
            task_id=job_id,
            queue=self._queues.get(kind.task) or queue_for(self.settings, kind.task, self.kinds),
            argsrepr=kind.describe(job),
            kwargsrepr="",
            retry=False,
        )

    def _release(self, entries: list[OutboxEntry], token: str, error: str) -> None:
        for entry in entries:
            self._quietly(self.outbox.release, entry.id, token, error)

    def _fault(self, entry: OutboxEntry, token: str, exc: Exception) -> bool:
        """Count a non-broker failure of ``entry``; dead-letter it at ``MAX_FAULTS``. False: the breaker opened."""
        error = _error_text(exc)
        if entry.faults + 1 < MAX_FAULTS:
            self._quietly(self.outbox.release, entry.id, token, error, True)
            return True
        try:
            payload: Any = json.loads(entry.payload)
        except ValueError:
            payload = entry.payload
        message = f"outbox: not publishable after {entry.faults + 1} tries: {exc}"
        letter = DeadLetter.of(
            entry.id, exc, payload=payload, task=entry.task, attempts=entry.tries + 1, message=message
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
        self.outbox.put(OutboxEntry(id=job_id, task=kind.task, payload=job.to_json(), created=time.time()))
        self._outbox_may_hold = True
        log.warning("broker unreachable: job %s (%s) parked in the outbox", job_id, kind.describe(job))

    def _may_publish(self) -> int | None:
        """The breaker's trip count when this caller may try the broker (a probe holds the window), else None."""
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
        elif known is None:  # once, loudly: retrying cannot fix a configuration; the jobs wait in the outbox
            self._config_error = problem
            log.critical(
                "broker configuration error: %s refuses this configuration: %s; jobs are kept in the outbox "
                "and published once the configuration is fixed",
                redact(str(self.settings.broker_url)),
                problem,
            )

    def _reset(self) -> None:
        with self._lock:
            self._circuit_s = self._closed_until = 0.0

    @staticmethod
    def _quietly(fn: Callable[..., Any], *args: Any) -> Any:
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
    """Publish dead letter ``ref`` (its id, or a prefix only it has) again under its id, its marks cleared.

    The letter is deleted before the publish and put back if it fails; the job keeps its letter's engine key unless
    ``engine`` (a URL) names another. ``store`` and ``queue`` are opened from settings unless given (tests).

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


class QueueSink:
    """``tools.writes.JobSink`` over a ``JobQueue``: a queued ``learn``/``forget`` is a ``tool_write`` job."""

    def __init__(self, queue: JobQueue) -> None:
        self.queue = queue

    def submit(self, job: ToolWrite) -> str:
        """``JobQueue.submit`` (scrubbed there when ``Settings.scrub``; published, or parked in the outbox)."""
        return self.queue.submit(job)

    def finished(self, job_id: str) -> bool:
        """Whether the job was applied or dead-lettered (the store's done mark; raises when unreachable)."""
        return self.queue.coordination.is_done(job_id)


def open_tool_writes(engine: MemoryEngine, queue: JobQueue, scope: ToolScope | None = None) -> ToolWrites:
    """``ToolWrites`` over ``engine`` whose queued requests are ``tool_write`` jobs of ``queue`` (scrubbed likewise)."""
    return ToolWrites(engine, QueueSink(queue), scope, scrub=queue.settings.scrub)

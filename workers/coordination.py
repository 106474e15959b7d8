"""Coordination state shared by hosts and workers: pending marks, scope gates, per-job marks; two stores.

``RedisCoordination`` (the default when the broker is Redis: one Lua script or pipeline per compound operation)
and ``SqliteCoordination`` (a file under ``var_dir`` for the server-less setup, one machine only, each operation
one ``BEGIN IMMEDIATE`` transaction through ``LocalDb``) keep one behaviour. The scope gate's rules are
``workers.gate.RULES``; a store only runs one event atomically. Times are microseconds from the store's own
clock (Redis ``TIME``), so a host's stamp and a worker's build start compare without clock skew. Every failure
to reach a store raises ``EngineUnavailable`` (retryable), like an engine outage. What the marks mean, and why a
dirty mark is cleared only by a pass that started after it and completed: ``workers.gate``.

| state | operations | purpose |
| --- | --- | --- |
| pending mark per (engine, job) | ``claim_job``, ``clear_pending`` | triggers while a build is queued collapse |
| scope gate: lock, dirty, built, later | ``gate_enter/extend/leave/abort`` | single flight, one follow-up |
| per-job marks | ``claim_job``, ``begin_job``, ``mark_done``, … | one payload per id, attempts, twin drop |

Redis keys (``P`` = ``Settings.redis_prefix``; ``{h}`` a hash tag so a scope's keys share a cluster slot):
``P:pending:<key>``, ``P:gate:{h}:lock|dirty|built|later``, ``P:job:<id>:attempts|progress|done|payload``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, cast

import redis
from redis.commands.core import Script

from memory_core.errors import EngineUnavailable
from workers.gate import (
    LUA_INTERPRETER,
    MARKS,
    Event,
    Mark,
    abort_event,
    enter_event,
    extend_event,
    leave_event,
    step,
)

__all__ = [
    "BUSY_TIMEOUT_S",
    "JOB_MARKS",
    "Coordination",
    "Enter",
    "Entered",
    "Leave",
    "Left",
    "LocalDb",
    "Pending",
    "RedisCoordination",
    "SqliteCoordination",
    "Started",
    "redis_client",
]


BUSY_TIMEOUT_S = 10.0
"""How long a writer waits for another process's lock before ``EngineUnavailable``, seconds."""


class LocalDb:
    """A SQLite file shared by the processes of one machine.

    Args:
        path: The database file (created with its folder).
        name: What the store is, for error messages (``"outbox"``).
        synchronous: SQLite's ``synchronous`` pragma (``FULL`` where a commit must survive power loss).
    """

    def __init__(self, path: Path, name: str, synchronous: str = "NORMAL") -> None:
        self.path = path
        self.name = name
        self._synchronous = synchronous
        self._local = threading.local()
        path.parent.mkdir(parents=True, exist_ok=True)

    def _error(self, exc: sqlite3.Error) -> EngineUnavailable:
        return EngineUnavailable(f"{self.name} {self.path.name}: {exc}")

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use)."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            try:
                db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute(f"PRAGMA synchronous={self._synchronous}")
            except sqlite3.Error as exc:
                raise self._error(exc) from None
            self._local.db = db
        return db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction, committed on success and rolled back on any error.

        Raises:
            EngineUnavailable: SQLite failed (locked past the busy timeout, unwritable file, …).
        """
        try:
            db = self.connection()
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        try:
            yield db
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise self._error(exc) from None
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        """One autocommitted statement.

        Raises:
            EngineUnavailable: SQLite failed.
        """
        try:
            return self.connection().execute(sql, params)
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def script(self, sql: str) -> None:
        """Run a schema script (``CREATE TABLE IF NOT EXISTS …``).

        Raises:
            EngineUnavailable: SQLite failed.
        """
        try:
            self.connection().executescript(sql)
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def close(self) -> None:
        """Close this thread's connection."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None


JOB_MARKS = ("attempts", "progress", "done", "payload")
"""The per-job marks (``P:job:<id>:<mark>``); ``forget_job`` drops them all."""


class Enter(StrEnum):
    """What ``gate_enter`` decided for one trigger of a scope."""

    ACQUIRED = "acquired"
    """The caller holds the scope's lock and builds now."""
    COALESCED = "coalesced"
    """Another build is running; it runs once more after it (the follow-up)."""
    COVERED = "covered"
    """A build that started after this trigger is running or has finished, and no recorded trigger waits; nothing
    to do."""
    DEFERRED = "deferred"
    """The scope's last pass started less than the minimum interval ago: the caller holds the follow-up slot and
    comes back after ``Entered.wait_us``."""
    BUSY = "busy"
    """Another delivery of the caller's own job holds the lock and its lease is alive (the message came back while
    its first delivery still runs: issue 11 §2): the caller comes back after ``Entered.wait_us`` (the lease left),
    when the job is done, or the lock is free because that delivery died."""


class Leave(StrEnum):
    """What ``gate_leave`` decided after a successful pass."""

    RELEASED = "released"
    """No trigger came in during the pass; the lock is released."""
    AGAIN = "again"
    """A trigger came in during the pass; the caller keeps the lock and builds once more."""
    LOST = "lost"
    """The lease ended and someone else holds (or may hold) the lock."""
    DEFERRED = "deferred"
    """A trigger came in during the pass, which started less than the minimum interval ago: the lock is released
    and the caller holds the follow-up slot, to build again after ``Left.wait_us``."""


@dataclass(frozen=True)
class Entered:
    """The answer of ``gate_enter``: the decision, and for ``deferred`` the microseconds until the interval ends."""

    enter: Enter
    wait_us: int = 0


@dataclass(frozen=True)
class Left:
    """The answer of ``gate_leave``: the decision, and for ``deferred`` the microseconds until the interval ends."""

    leave: Leave
    wait_us: int = 0


@dataclass(frozen=True)
class Started:
    """The answer of ``begin_job``: what a delivery needs to know before it runs, read in one round trip.

    Attributes:
        done: The job finished already (this delivery is a twin: drop it).
        attempts: The starts of the job counted so far, this one included.
        progress: The units (scopes) of the job done by earlier deliveries.
    """

    done: bool
    attempts: int
    progress: frozenset[str]


@dataclass(frozen=True)
class Pending:
    """The answer of ``claim_job``.

    Attributes:
        job_id: The job that will serve the trigger (the caller's, or the one already pending).
        stamp_us: When the trigger was stamped, store clock, microseconds.
        fresh: True when the caller's job was recorded (it must be published), False when coalesced.
    """

    job_id: str
    stamp_us: int
    fresh: bool


class Coordination:
    """Base of the coordination stores; the semantics every store keeps.

    Args:
        prefix: Namespace of every key (``Settings.redis_prefix``).
        job_ttl_s: How long per-job marks live (attempts, progress, done), seconds; longer than any
            redelivery can take (twice the visibility timeout).
        keep_s: How long a scope's ``built`` and ``dirty`` marks live, seconds (the dirty mark guards the built
            one, so it lives as long).
    """

    def __init__(self, prefix: str, job_ttl_s: int, keep_s: int) -> None:
        self.prefix = prefix
        self.job_ttl_s = job_ttl_s
        self.keep_s = keep_s

    # keys ----------------------------------------------------------------------------------------------
    def key(self, *parts: str) -> str:
        """``prefix:part:part…``."""
        return ":".join((self.prefix, *parts))

    # pending marks (submit side) -----------------------------------------------------------------------
    def now_us(self) -> int:
        """The store's clock, microseconds since the epoch."""
        raise NotImplementedError

    def clear_pending(self, key: str, job_id: str) -> None:
        """Drop the pending mark of ``key`` if it still names ``job_id`` (compare-and-delete)."""
        raise NotImplementedError

    def claim_job(self, job_id: str, digest: str, pending: str | None, ttl_s: int) -> Pending | None:
        """What a submit asks of the store, in one round trip: bind the id to its payload, and claim the pending mark.

        A job id names one payload for as long as the job's marks are kept (``job_ttl_s``): a second submit under
        the id with the same payload is a replay, one with another payload is refused (issue 11 §3). For a
        coalescing job, the pending mark of ``pending`` is taken unless one is there already (its job serves the
        trigger), and the trigger is stamped with the store's clock.

        Args:
            job_id: The job id.
            digest: The payload's digest (``workers.locks.job_digest``).
            pending: The pending key of a coalescing job (``workers.locks.pending_key``), or None.
            ttl_s: The pending mark's lifetime, seconds.

        Returns:
            None when the id names another payload (nothing is marked pending); else the ``Pending`` answer
            (for a job that does not coalesce: this job, fresh, stamped 0).
        """
        raise NotImplementedError

    # scope gate (worker side): the rules are workers.gate's table; a store only runs one event atomically -------
    def run_gate(self, scope: str, event: Event) -> tuple[str, int, int]:
        """Run one gate event (``workers.gate``) on the scope's marks atomically, in one round trip.

        Returns:
            ``(answer, wait_us, now_us)``: the rule's answer and wait, and the store clock it ran at.
        """
        raise NotImplementedError

    def gate_state(self, scope: str) -> dict[str, Mark]:
        """The scope's marks now (absent ones left out), with their remaining lifetimes: for tests and operators."""
        raise NotImplementedError

    def gate_enter(
        self, scope: str, task_id: str, token: str, stamp_us: int | None, ttl_s: int, gap_us: int = 0
    ) -> Entered:
        """Take the scope's lock, or coalesce into the running build, or find the trigger covered, or defer.

        ``stamp_us`` None counts as new. A lock another delivery of ``task_id`` holds is ``busy`` while its lease
        lives (``Enter.BUSY``). The rules: ``workers.gate.RULES["enter"]``.
        """
        answer, wait, _ = self.run_gate(scope, enter_event(task_id, token, stamp_us, ttl_s, self.keep_s, gap_us))
        return Entered(Enter(answer), wait)

    def gate_extend(self, scope: str, token: str, ttl_s: int) -> bool:
        """Extend the lease if ``token`` still owns it."""
        return self.run_gate(scope, extend_event(token, ttl_s))[0] == "extended"

    def gate_leave(self, scope: str, token: str, ttl_s: int, gap_us: int = 0) -> Left:
        """After a successful pass: record it as built, then release, or keep the lock for one more pass.

        One more pass when a trigger came in meanwhile; when that pass would start within ``gap_us``, release and
        hold the follow-up slot instead (``deferred``). The rules: ``workers.gate.RULES["leave"]``.
        """
        answer, wait, _ = self.run_gate(scope, leave_event(token, ttl_s, self.keep_s, gap_us))
        return Left(Leave(answer), wait)

    def gate_abort(self, scope: str, token: str) -> None:
        """After a failed pass: release if ``token`` owns the lock, raising the dirty mark to the pass's start.

        The failed pass covered nothing, so the next trigger of the scope builds whatever it was for.
        """
        self.run_gate(scope, abort_event(token, self.keep_s))

    # per-job marks -------------------------------------------------------------------------------------
    def begin_job(self, job_id: str, pending: str | None) -> Started:
        """A delivery's start, in one round trip: clear its pending mark, and read done, attempts and progress.

        The pending mark of ``pending`` is dropped if it still names ``job_id`` (``clear_pending``); one more start
        of the job (retries and redeliveries alike) is counted unless the job is done (a twin is no attempt); its
        progress is read.
        """
        raise NotImplementedError

    def attempts(self, job_id: str) -> int:
        """How many starts of ``job_id`` were counted (0 when none)."""
        raise NotImplementedError

    def forgive_attempt(self, job_id: str) -> None:
        """Take back the last counted start (a delivery that only deferred its build ran nothing)."""
        raise NotImplementedError

    def add_progress(self, job_id: str, unit: str) -> None:
        """Record that ``unit`` (a scope) of ``job_id`` is done."""
        raise NotImplementedError

    def progress(self, job_id: str) -> frozenset[str]:
        """The units of ``job_id`` done so far."""
        raise NotImplementedError

    def mark_done(self, job_id: str) -> None:
        """Mark ``job_id`` finished (run or dead-lettered): a twin delivery is dropped."""
        raise NotImplementedError

    def is_done(self, job_id: str) -> bool:
        """True when ``job_id`` finished already."""
        raise NotImplementedError

    def forget_job(self, job_id: str) -> None:
        """Drop every per-job mark (before a dead letter is requeued under the same id)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release connections."""


class SqliteCoordination(Coordination):
    """The coordination store in a SQLite file (server-less setup; processes on one machine).

    Each operation is one ``BEGIN IMMEDIATE`` transaction over a key/value table with expiry times.

    Args:
        path: The database file (created with its folder).
        prefix, job_ttl_s, keep_s: As ``Coordination``.
    """

    def __init__(self, path: Path, prefix: str, job_ttl_s: int, keep_s: int) -> None:
        super().__init__(prefix, job_ttl_s, keep_s)
        self.path = path
        self._store = LocalDb(path, "coordination store")
        with self._tx() as db:
            db.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires REAL)")

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._store.transaction()

    def now_us(self) -> int:
        """The machine's clock (one machine shares it), microseconds."""
        return time.time_ns() // 1000

    @staticmethod
    def _get(db: sqlite3.Connection, key: str) -> str | None:
        row = db.execute("SELECT value, expires FROM kv WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        if row[1] is not None and row[1] <= time.time():
            db.execute("DELETE FROM kv WHERE key = ?", (key,))
            return None
        return str(row[0])

    @staticmethod
    def _left_ms(db: sqlite3.Connection, key: str) -> int | None:
        row = db.execute("SELECT expires FROM kv WHERE key = ?", (key,)).fetchone()
        if row is None or row[0] is None:
            return None
        return max(0, int((row[0] - time.time()) * 1000))

    @staticmethod
    def _set(db: sqlite3.Connection, key: str, value: str, ttl_s: float | None) -> None:
        expires = None if ttl_s is None else time.time() + ttl_s
        db.execute("INSERT OR REPLACE INTO kv (key, value, expires) VALUES (?, ?, ?)", (key, value, expires))

    @staticmethod
    def _del(db: sqlite3.Connection, key: str) -> bool:
        return db.execute("DELETE FROM kv WHERE key = ?", (key,)).rowcount > 0

    def clear_pending(self, key: str, job_id: str) -> None:
        """See ``Coordination.clear_pending``."""
        with self._tx() as db:
            self._clear(db, self.key("pending", key), job_id)

    def _clear(self, db: sqlite3.Connection, k: str, job_id: str) -> None:
        current = self._get(db, k)
        if current is not None and current.rsplit("|", 1)[0] == job_id:
            self._del(db, k)

    def claim_job(self, job_id: str, digest: str, pending: str | None, ttl_s: int) -> Pending | None:
        """See ``Coordination.claim_job`` (one transaction)."""
        bound, k = self.key("job", job_id, "payload"), None if pending is None else self.key("pending", pending)
        with self._tx() as db:
            current = self._get(db, bound)
            if current is not None and current != digest:
                return None
            if current is None:
                self._set(db, bound, digest, self.job_ttl_s)
            if k is None:
                return Pending(job_id, 0, fresh=True)
            queued = self._get(db, k)
            if queued is not None:
                other, stamp = queued.rsplit("|", 1)
                return Pending(other, int(stamp), fresh=False)
            now = self.now_us()
            self._set(db, k, f"{job_id}|{now}", ttl_s)
            return Pending(job_id, now, fresh=True)

    def _marks(self, scope: str) -> dict[str, str]:
        return {mark: self.key("gate", scope, mark) for mark in MARKS}

    def _load(self, db: sqlite3.Connection, keys: dict[str, str]) -> dict[str, Mark]:
        state: dict[str, Mark] = {}
        for mark, key in keys.items():
            value = self._get(db, key)
            if value is not None:
                state[mark] = Mark(value, self._left_ms(db, key))
        return state

    def run_gate(self, scope: str, event: Event) -> tuple[str, int, int]:
        """See ``Coordination.run_gate``: load the marks, ``workers.gate.step``, save its writes (one transaction)."""
        keys = self._marks(scope)
        with self._tx() as db:
            now = self.now_us()
            done = step(self._load(db, keys), event, now)
            for write in done.writes:
                if write.value is None:
                    self._del(db, keys[write.mark])
                else:
                    self._set(db, keys[write.mark], write.value, write.ttl_ms / 1000)
        return done.answer, done.wait_us, now

    def gate_state(self, scope: str) -> dict[str, Mark]:
        """See ``Coordination.gate_state``."""
        with self._tx() as db:
            return self._load(db, self._marks(scope))

    def begin_job(self, job_id: str, pending: str | None) -> Started:
        """See ``Coordination.begin_job`` (one transaction)."""
        with self._tx() as db:
            if pending is not None:
                self._clear(db, self.key("pending", pending), job_id)
            done = self._get(db, self.key("job", job_id, "done")) is not None
            progress = frozenset(json.loads(self._get(db, self.key("job", job_id, "progress")) or "[]"))
            k = self.key("job", job_id, "attempts")
            count = int(self._get(db, k) or 0)
            if not done:
                count += 1
                self._set(db, k, str(count), self.job_ttl_s)
            return Started(done, count, progress)

    def attempts(self, job_id: str) -> int:
        """See ``Coordination.attempts``."""
        with self._tx() as db:
            return int(self._get(db, self.key("job", job_id, "attempts")) or 0)

    def forgive_attempt(self, job_id: str) -> None:
        """See ``Coordination.forgive_attempt``."""
        k = self.key("job", job_id, "attempts")
        with self._tx() as db:
            count = int(self._get(db, k) or 0)
            if count > 0:
                self._set(db, k, str(count - 1), self.job_ttl_s)

    def add_progress(self, job_id: str, unit: str) -> None:
        """See ``Coordination.add_progress``."""
        k = self.key("job", job_id, "progress")
        with self._tx() as db:
            units = set(json.loads(self._get(db, k) or "[]"))
            units.add(unit)
            self._set(db, k, json.dumps(sorted(units)), self.job_ttl_s)

    def progress(self, job_id: str) -> frozenset[str]:
        """See ``Coordination.progress``."""
        with self._tx() as db:
            return frozenset(json.loads(self._get(db, self.key("job", job_id, "progress")) or "[]"))

    def mark_done(self, job_id: str) -> None:
        """See ``Coordination.mark_done``."""
        with self._tx() as db:
            self._set(db, self.key("job", job_id, "done"), "1", self.job_ttl_s)

    def is_done(self, job_id: str) -> bool:
        """See ``Coordination.is_done``."""
        with self._tx() as db:
            return self._get(db, self.key("job", job_id, "done")) is not None

    def forget_job(self, job_id: str) -> None:
        """See ``Coordination.forget_job``."""
        with self._tx() as db:
            for part in JOB_MARKS:
                self._del(db, self.key("job", job_id, part))

    def close(self) -> None:
        """Close this thread's connection."""
        self._store.close()


# Redis ------------------------------------------------------------------------------------------------------

_CLAIM = """
local cur = redis.call('GET', KEYS[1])
if cur then
  local id, stamp = string.match(cur, '^(.*)|(%d+)$')
  return {id, stamp, 0}
end
local t = redis.call('TIME')
local now = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. now, 'PX', ARGV[2])
return {ARGV[1], now, 1}
"""

_CLEAR = """
local cur = redis.call('GET', KEYS[1])
if cur and string.match(cur, '^(.*)|%d+$') == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""

_BIND = """
local cur = redis.call('GET', KEYS[1])
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
  return 1
end
if cur == ARGV[1] then return 1 end
return 0
"""

_FORGIVE = """
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n > 0 then redis.call('DECR', KEYS[1]) end
return 0
"""


def redis_client(url: str, timeout_s: float, health_check_s: int) -> redis.Redis[str]:
    """A decoding Redis client with connect/read timeouts and health checks (redis-py#775, #1140).

    No command is retried (``from_url`` leaves redis-py's connection retries at 0 without ``retry_on_timeout``),
    so ``timeout_s`` bounds each call. A ``rediss://`` URL verifies the server's certificate unless its query
    says otherwise (redis-py's ``ssl_cert_reqs="required"`` default, the rule ``config.result_backend_url``
    writes into the Celery backend's URL). ``health_check_s`` 0: no extra PING before a command.
    """
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        socket_keepalive=True,
        health_check_interval=health_check_s,
        decode_responses=True,
    )


class RedisCoordination(Coordination):
    """The coordination store on Redis (see the module docstring).

    Args:
        client: A decoding ``redis.Redis`` (``redis_client``).
        prefix, job_ttl_s, keep_s: As ``Coordination``.
    """

    def __init__(self, client: redis.Redis[str], prefix: str, job_ttl_s: int, keep_s: int) -> None:
        super().__init__(prefix, job_ttl_s, keep_s)
        self.client = client
        self._clear: Script = client.register_script(_CLEAR)
        self._gate: Script = client.register_script(LUA_INTERPRETER)
        self._forgive: Script = client.register_script(_FORGIVE)

    @contextmanager
    def _reachable(self) -> Iterator[None]:
        try:
            yield
        except redis.RedisError as exc:
            raise EngineUnavailable(f"coordination store (redis): {exc}") from None

    def _gate_keys(self, scope: str) -> list[str]:
        tag = "{" + scope + "}"
        return [self.key("gate", tag, mark) for mark in MARKS]

    def now_us(self) -> int:
        """Redis ``TIME`` in microseconds."""
        with self._reachable():
            seconds, micros = cast(tuple[int, int], self.client.time())
            return int(seconds) * 1_000_000 + int(micros)

    def clear_pending(self, key: str, job_id: str) -> None:
        """See ``Coordination.clear_pending``."""
        with self._reachable():
            self._clear(keys=[self.key("pending", key)], args=[job_id])

    def claim_job(self, job_id: str, digest: str, pending: str | None, ttl_s: int) -> Pending | None:
        """See ``Coordination.claim_job``: both scripts in one pipeline, one round trip (each key keeps its slot).

        ``EVAL`` with the script's text, not ``EVALSHA``: a pipeline of ``EVALSHA`` would first ask ``SCRIPT
        EXISTS`` (another round trip), and Redis caches a script it has compiled either way.
        """
        bound = self.key("job", job_id, "payload")
        with self._reachable():
            pipe = self.client.pipeline(transaction=False)
            pipe.eval(_BIND, 1, bound, digest, self.job_ttl_s)
            if pending is not None:
                pipe.eval(_CLAIM, 1, self.key("pending", pending), job_id, ttl_s * 1000)
            got: list[Any] = pipe.execute()
        claimed = Pending(job_id, 0, fresh=True) if pending is None else self._pending(got[1])
        if int(got[0]):
            return claimed
        if pending is not None and claimed.fresh:  # marked pending under an id that names another job: undo
            self.clear_pending(pending, job_id)
        return None

    @staticmethod
    def _pending(got: list[Any]) -> Pending:
        return Pending(str(got[0]), int(got[1]), fresh=bool(int(got[2])))

    def run_gate(self, scope: str, event: Event) -> tuple[str, int, int]:
        """See ``Coordination.run_gate``: one ``EVALSHA`` of the generic interpreter (``workers.gate``)."""
        name, args = event
        with self._reachable():
            got = cast(list[Any], self._gate(keys=self._gate_keys(scope), args=[name, json.dumps(args)]))
        return str(got[0]), int(got[1]), int(got[2])

    def gate_state(self, scope: str) -> dict[str, Mark]:
        """See ``Coordination.gate_state`` (one pipeline)."""
        keys = self._gate_keys(scope)
        with self._reachable():
            pipe = self.client.pipeline(transaction=True)
            for key in keys:
                pipe.get(key)
                pipe.pttl(key)
            got: list[Any] = pipe.execute()
        state: dict[str, Mark] = {}
        for i, mark in enumerate(MARKS):
            value, ttl = got[2 * i], int(got[2 * i + 1])
            if value is not None:
                state[mark] = Mark(str(value), ttl if ttl >= 0 else None)
        return state

    def begin_job(self, job_id: str, pending: str | None) -> Started:
        """See ``Coordination.begin_job``: one pipeline (the job's keys keep their own slots)."""
        done, attempts, progress = (self.key("job", job_id, part) for part in ("done", "attempts", "progress"))
        with self._reachable():
            pipe = self.client.pipeline(transaction=False)
            if pending is not None:
                pipe.eval(_CLEAR, 1, self.key("pending", pending), job_id)
            pipe.exists(done)
            pipe.incr(attempts)
            pipe.expire(attempts, self.job_ttl_s)
            pipe.smembers(progress)
            got: list[Any] = pipe.execute()
        if pending is not None:
            got = got[1:]
        done_, count = bool(got[0]), int(got[1])
        if done_:  # a twin is no attempt: the pipeline cannot branch, so take it back (the twin's path only)
            self.forgive_attempt(job_id)
            count -= 1
        return Started(done_, count, frozenset(str(u) for u in got[3]))

    def attempts(self, job_id: str) -> int:
        """See ``Coordination.attempts``."""
        with self._reachable():
            return int(self.client.get(self.key("job", job_id, "attempts")) or 0)

    def forgive_attempt(self, job_id: str) -> None:
        """See ``Coordination.forgive_attempt``."""
        with self._reachable():
            self._forgive(keys=[self.key("job", job_id, "attempts")])

    def add_progress(self, job_id: str, unit: str) -> None:
        """See ``Coordination.add_progress``."""
        key = self.key("job", job_id, "progress")
        with self._reachable():
            pipe = self.client.pipeline(transaction=True)
            pipe.sadd(key, unit)
            pipe.expire(key, self.job_ttl_s)
            pipe.execute()

    def progress(self, job_id: str) -> frozenset[str]:
        """See ``Coordination.progress``."""
        with self._reachable():
            return frozenset(str(u) for u in self.client.smembers(self.key("job", job_id, "progress")))

    def mark_done(self, job_id: str) -> None:
        """See ``Coordination.mark_done``."""
        with self._reachable():
            self.client.set(self.key("job", job_id, "done"), "1", ex=self.job_ttl_s)

    def is_done(self, job_id: str) -> bool:
        """See ``Coordination.is_done``."""
        with self._reachable():
            return bool(self.client.exists(self.key("job", job_id, "done")))

    def forget_job(self, job_id: str) -> None:
        """See ``Coordination.forget_job``."""
        with self._reachable():
            self.client.delete(*(self.key("job", job_id, part) for part in JOB_MARKS))

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()

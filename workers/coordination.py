"""The coordination store (pending marks, scope gates, per-job marks) and ``single_flight`` over it.

``RedisCoordination`` beside a Redis broker, else ``SqliteCoordination`` (``var_dir/coordination.db``): one
behaviour, one round trip per operation; times are µs of the store's clock; an unreachable store raises
``EngineUnavailable``. Marks, keys and round trips: docs/jobs.md ("The scope gate", "Cost per job"); sources:
reference ``celery-reliability.md`` §2.4, https://redis.io/topics/distlock (a lease is not a mutex: builds are
idempotent).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

import redis
from redis.commands.core import Script

from memory_core._model import ContractModel
from memory_core.consolidation import BuildScope
from memory_core.engines import engine_identity
from memory_core.errors import EngineUnavailable, InvalidRequest
from workers.gate import LUA_INTERPRETER, MARKS, Event, Mark, abort_event, enter_event, extend_event, leave_event, step

__all__ = [
    "BUSY_TIMEOUT_S",
    "MAX_JOB_ID_CHARS",
    "Coordination",
    "Enter",
    "Flight",
    "Leave",
    "LocalDb",
    "Pending",
    "RedisCalls",
    "RedisCoordination",
    "SqliteCoordination",
    "check_job_id",
    "engine_key",
    "job_digest",
    "new_job_id",
    "pending_key",
    "pending_of",
    "redis_client",
    "redis_options",
    "scope_key",
    "single_flight",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

BUSY_TIMEOUT_S = 10.0
"""How long a SQLite writer waits for another process's lock before ``EngineUnavailable``, seconds."""
JOB_MARKS = ("attempts", "progress", "done", "payload", "stamp")  # P:job:<id>:<mark>


class LocalDb:
    """A SQLite file shared by the processes of one machine (a connection per thread; ``synchronous`` as SQLite's)."""

    def __init__(self, path: Path, name: str, synchronous: str = "NORMAL") -> None:
        self.path, self.name, self._synchronous = path, name, synchronous
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
        except BaseException as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise self._error(exc) from None
            raise

    def execute(self, sql: str, params: tuple[Any, ...] = (), *, script: bool = False) -> sqlite3.Cursor:
        """One autocommitted statement (``script``: a schema script of several); errors raise ``EngineUnavailable``."""
        try:
            db = self.connection()
            return db.executescript(sql) if script else db.execute(sql, params)
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def close(self) -> None:
        """Close this thread's connection."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None


class Enter(StrEnum):
    """What ``gate_enter`` decided for one trigger of a scope (docs/jobs.md, "The scope gate")."""

    ACQUIRED = "acquired"
    COALESCED = "coalesced"
    COVERED = "covered"
    DEFERRED = "deferred"
    BUSY = "busy"


class Leave(StrEnum):
    """What ``gate_leave`` decided after a successful pass (docs/jobs.md, "The scope gate")."""

    RELEASED = "released"
    AGAIN = "again"
    LOST = "lost"
    DEFERRED = "deferred"


@dataclass(frozen=True)
class Entered:
    """``gate_enter``'s decision, and for ``deferred``/``busy`` the µs to wait."""

    enter: Enter
    wait_us: int = 0


@dataclass(frozen=True)
class Left:
    """``gate_leave``'s decision, and for ``deferred`` the µs to wait."""

    leave: Leave
    wait_us: int = 0


@dataclass(frozen=True)
class Started:
    """``begin_job``'s answer: done already (a twin), starts counted (this one too), units done before, and stamp.

    ``stamp_us`` is the store-clock stamp (µs) of the claim that queued the job (None: no pending mark was given,
    or the job's ``stamp`` mark is gone).
    """

    done: bool
    attempts: int
    progress: frozenset[str]
    stamp_us: int | None = None


@dataclass(frozen=True)
class Pending:
    """The answer of ``claim_job``: the job serving the trigger, its stamp (µs), and whether it must be published."""

    job_id: str
    stamp_us: int
    fresh: bool


def pending_of(reply: Any) -> Pending | None:
    """The claim script's reply ``[serving id, stamp µs, 1 fresh | 0 queued | -1 refused]`` (text or bytes).

    Returns:
        The ``Pending``, or None when the id is bound to another payload (nothing was claimed).
    """
    job_id = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
    state = int(reply[2])
    return None if state < 0 else Pending(job_id, int(reply[1]), state == 1)


class _Store:
    """What both stores share: keys under ``prefix``, marks' lifetimes (s), the gate's events over ``run_gate``."""

    def __init__(self, prefix: str, job_ttl_s: int, keep_s: int) -> None:
        self.prefix, self.job_ttl_s, self.keep_s = prefix, job_ttl_s, keep_s

    def key(self, *parts: str) -> str:
        """``prefix:part:part…``."""
        return ":".join((self.prefix, *parts))

    def claim_job(self, job_id: str, digest: str, pending: str | None, ttl_s: int) -> Pending | None:
        """A submit's one round trip: bind the id to its payload digest (issue 11 §3), claim the pending mark.

        A fresh claim binds the id and keeps its stamp as the job's ``stamp`` mark (``begin_job`` reads it). A trigger
        that coalesces into the queued job moves that job's ``stamp`` mark to now (never back), so the job is covered
        only by a pass that started after its last trigger (docs/jobs.md, "The scope gate").

        Returns:
            None when the id names another payload; else who serves the trigger (a non-coalescing job: itself, stamp 0).
        """
        raise NotImplementedError

    def bind_later(self, job_id: str, digest: str) -> Callable[[], bool | None]:
        """Send the bind of a fresh id now; the call returned reads the answer (None: failed, and logged).

        Raises:
            EngineUnavailable: the store is unreachable before anything was sent.
        """
        bound = self.claim_job(job_id, digest, None, 0) is not None
        return lambda: bound

    def run_gate(self, scope: str, event: Event) -> tuple[str, int, int]:
        """Run one ``workers.gate`` event on the scope's marks atomically: ``(answer, wait_us, now_us)``."""
        raise NotImplementedError

    @cached_property
    def keeper(self) -> LeaseKeeper:
        """The store's ``LeaseKeeper`` (made on first use)."""
        return LeaseKeeper(self)

    def gate_enter(
        self, scope: str, task_id: str, token: str, stamp_us: int | None, ttl_s: int, gap_us: int = 0
    ) -> Entered:
        """Ask to build for a trigger stamped ``stamp_us`` (None: always new), ``RULES["enter"]``."""
        answer, wait, _ = self.run_gate(scope, enter_event(task_id, token, stamp_us, ttl_s, self.keep_s, gap_us))
        return Entered(Enter(answer), wait)

    def gate_extend(self, scope: str, token: str, ttl_s: int) -> bool:
        """Extend the lease if ``token`` still owns it."""
        return self.run_gate(scope, extend_event(token, ttl_s))[0] == "extended"

    def gate_leave(self, scope: str, token: str, ttl_s: int, gap_us: int = 0) -> Left:
        """After a successful pass: release, pass again or defer (``RULES["leave"]``)."""
        answer, wait, _ = self.run_gate(scope, leave_event(token, ttl_s, self.keep_s, gap_us))
        return Left(Leave(answer), wait)

    def gate_abort(self, scope: str, token: str) -> None:
        """After a failed pass: release, raising the dirty mark (the next trigger builds what this one was for)."""
        self.run_gate(scope, abort_event(token, self.keep_s))


class SqliteCoordination(_Store):
    """The coordination store in a SQLite file: a key/value table with expiry times."""

    def __init__(self, path: Path, prefix: str, job_ttl_s: int, keep_s: int) -> None:
        super().__init__(prefix, job_ttl_s, keep_s)
        self.path = path
        self._store = LocalDb(path, "coordination store")
        self._tx = self._store.transaction
        with self._tx() as db:
            db.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires REAL)")

    def now_us(self) -> int:
        """The machine's clock (one machine shares it), microseconds."""
        return time.time_ns() // 1000

    @staticmethod
    def _get(db: sqlite3.Connection, key: str) -> str | None:
        row = db.execute("SELECT value, expires FROM kv WHERE key = ?", (key,)).fetchone()
        if row is not None and row[1] is not None and row[1] <= time.time():
            db.execute("DELETE FROM kv WHERE key = ?", (key,))
            return None
        return None if row is None else str(row[0])

    @staticmethod
    def _set(db: sqlite3.Connection, key: str, value: str, ttl_s: float | None) -> None:
        expires = None if ttl_s is None else time.time() + ttl_s
        db.execute("INSERT OR REPLACE INTO kv (key, value, expires) VALUES (?, ?, ?)", (key, value, expires))

    @staticmethod
    def _del(db: sqlite3.Connection, key: str) -> None:
        db.execute("DELETE FROM kv WHERE key = ?", (key,))

    def _read(self, job_id: str, mark: str) -> str | None:
        with self._tx() as db:
            return self._get(db, self.key("job", job_id, mark))

    def _clear(self, db: sqlite3.Connection, pending: str, job_id: str) -> None:
        k = self.key("pending", pending)
        current = self._get(db, k)
        if current is not None and current.rsplit("|", 1)[0] == job_id:
            self._del(db, k)

    def clear_pending(self, key: str, job_id: str) -> None:
        """Drop the pending mark of ``key`` if it still names ``job_id`` (compare-and-delete)."""
        with self._tx() as db:
            self._clear(db, key, job_id)

    def claim_job(self, job_id: str, digest: str, pending: str | None, ttl_s: int) -> Pending | None:
        """See ``_Store.claim_job`` (one transaction)."""
        bound = self.key("job", job_id, "payload")
        with self._tx() as db:
            current = self._get(db, bound)
            if current is not None and current != digest:
                return None
            queued = None if pending is None else self._get(db, self.key("pending", pending))
            if queued is not None:
                other = queued.rsplit("|", 1)[0]
                return Pending(other, self._advance_stamp(db, other), fresh=False)
            self._set(db, bound, digest, self.job_ttl_s)
            if pending is None:
                return Pending(job_id, 0, fresh=True)
            now = self.now_us()
            self._set(db, self.key("pending", pending), f"{job_id}|{now}", ttl_s)
            self._set(db, self.key("job", job_id, "stamp"), str(now), self.job_ttl_s)
            return Pending(job_id, now, fresh=True)

    def _advance_stamp(self, db: sqlite3.Connection, job_id: str) -> int:
        """Move queued ``job_id``'s ``stamp`` mark to now (never back): a trigger coalesced into it; the stamp."""
        key = self.key("job", job_id, "stamp")
        had = self._get(db, key)
        stamp = max(self.now_us(), 0 if had is None else int(had))
        self._set(db, key, str(stamp), self.job_ttl_s)
        return stamp

    def _load(self, db: sqlite3.Connection, scope: str) -> dict[str, Mark]:
        state: dict[str, Mark] = {}
        for mark in MARKS:
            key = self.key("gate", scope, mark)
            value = self._get(db, key)
            if value is not None:
                row = db.execute("SELECT expires FROM kv WHERE key = ?", (key,)).fetchone()
                left = None if row[0] is None else max(0, int((row[0] - time.time()) * 1000))
                state[mark] = Mark(value, left)
        return state

    def run_gate(self, scope: str, event: Event) -> tuple[str, int, int]:
        """See ``_Store.run_gate``: load the marks, ``workers.gate.step``, save its writes."""
        with self._tx() as db:
            now = self.now_us()
            done = step(self._load(db, scope), event, now)
            for write in done.writes:
                key = self.key("gate", scope, write.mark)
                if write.value is None:
                    self._del(db, key)
                else:
                    self._set(db, key, write.value, write.ttl_ms / 1000)
        return done.answer, done.wait_us, now

    def gate_state(self, scope: str) -> dict[str, Mark]:
        """The scope's marks now with their remaining lifetimes (absent ones left out)."""
        with self._tx() as db:
            return self._load(db, scope)

    def begin_job(self, job_id: str, pending: str | None) -> Started:
        """A delivery's start in one round trip: clear its pending mark, count a start unless done, read progress.

        With ``pending`` given it reads the job's ``stamp`` mark too (its claim's stamp, ``Started.stamp_us``).
        """
        with self._tx() as db:
            stamp = None
            if pending is not None:
                self._clear(db, pending, job_id)
                stamp = self._get(db, self.key("job", job_id, "stamp"))
            done = self._get(db, self.key("job", job_id, "done")) is not None
            progress = frozenset(json.loads(self._get(db, self.key("job", job_id, "progress")) or "[]"))
            k = self.key("job", job_id, "attempts")
            count = int(self._get(db, k) or 0) + (0 if done else 1)
            if not done:
                self._set(db, k, str(count), self.job_ttl_s)
            return Started(done, count, progress, None if stamp is None else int(stamp))

    def attempts(self, job_id: str) -> int:
        """How many starts of ``job_id`` were counted (0 when none)."""
        return int(self._read(job_id, "attempts") or 0)

    def forgive_attempt(self, job_id: str) -> None:
        """Take back the last counted start (a delivery that only deferred its build ran nothing)."""
        k = self.key("job", job_id, "attempts")
        with self._tx() as db:
            count = int(self._get(db, k) or 0)
            if count > 0:
                self._set(db, k, str(count - 1), self.job_ttl_s)

    def add_progress(self, job_id: str, unit: str) -> None:
        """Record that ``unit`` (a scope) of ``job_id`` is done."""
        k = self.key("job", job_id, "progress")
        with self._tx() as db:
            units = set(json.loads(self._get(db, k) or "[]")) | {unit}
            self._set(db, k, json.dumps(sorted(units)), self.job_ttl_s)

    def progress(self, job_id: str) -> frozenset[str]:
        """The units of ``job_id`` done so far."""
        return frozenset(json.loads(self._read(job_id, "progress") or "[]"))

    def mark_done(self, job_id: str) -> None:
        """Mark ``job_id`` finished (run or dead-lettered): a twin delivery is dropped."""
        with self._tx() as db:
            self._set(db, self.key("job", job_id, "done"), "1", self.job_ttl_s)

    def is_done(self, job_id: str) -> bool:
        """True when ``job_id`` finished already."""
        return self._read(job_id, "done") is not None

    def forget_job(self, job_id: str) -> None:
        """Drop every per-job mark (before a dead letter is requeued under the same id)."""
        with self._tx() as db:
            for part in JOB_MARKS:
                self._del(db, self.key("job", job_id, part))

    def close(self) -> None:
        """Close this thread's connection."""
        self._store.close()


_CLAIM = """
local bound = redis.call('GET', KEYS[2])
if bound and bound ~= ARGV[3] then return {ARGV[1], 0, -1} end
local cur = redis.call('GET', KEYS[1])
local t = redis.call('TIME')
local now = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
if cur then
  local id = string.match(cur, '^(.*)|%d+$')
  local mark = string.sub(KEYS[3], 1, -(#ARGV[1] + 7)) .. id .. ':stamp'
  local had = redis.call('GET', mark)
  if had and tonumber(had) > tonumber(now) then now = had end
  redis.call('SET', mark, now, 'EX', ARGV[4])
  return {id, now, 0}
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. now, 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[3], 'EX', ARGV[4])
redis.call('SET', KEYS[3], now, 'EX', ARGV[4])
for i = 4, #KEYS do redis.call(ARGV[2 * i - 3], KEYS[i], ARGV[2 * i - 2]) end
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


def redis_options(timeout_s: float, health_check_s: int) -> dict[str, Any]:
    """Redis socket options: connect/read timeouts, keepalive, health checks (redis-py#775, #1140; 0: none)."""
    return {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "socket_keepalive": True,
        "health_check_interval": health_check_s,
    }


def redis_client(url: str, timeout_s: float, health_check_s: int) -> redis.Redis[str]:
    """A decoding Redis client with ``redis_options``; no command is retried, so ``timeout_s`` bounds each call."""
    return redis.Redis.from_url(url, decode_responses=True, **redis_options(timeout_s, health_check_s))


class RedisCalls:
    """A store on a Redis ``client`` whose errors raise ``EngineUnavailable`` naming the store (``what``)."""

    client: redis.Redis[str]
    what = "coordination store"

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except redis.RedisError as exc:
            raise EngineUnavailable(f"{self.what} (redis): {exc}") from None

    def _pipeline(self, fill: Callable[[Any], object], transaction: bool = False) -> list[Any]:
        def run() -> list[Any]:
            pipe = self.client.pipeline(transaction=transaction)
            fill(pipe)
            return pipe.execute()

        return cast(list[Any], self._call(run))

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()


class RedisCoordination(_Store, RedisCalls):
    """The coordination store on Redis (``{h}`` hash tags keep a scope's keys in one cluster slot)."""

    def __init__(self, client: redis.Redis[str], prefix: str, job_ttl_s: int, keep_s: int) -> None:
        super().__init__(prefix, job_ttl_s, keep_s)
        self.client = client
        self._gate: Script = client.register_script(LUA_INTERPRETER)
        self._forgive: Script = client.register_script(_FORGIVE)

    def _gate_keys(self, scope: str) -> list[str]:
        return [self.key("gate", "{" + scope + "}", mark) for mark in MARKS]

    def now_us(self) -> int:
        """Redis ``TIME`` in microseconds."""
        seconds, micros = cast(tuple[int, int], self._call(self.client.time))
        return int(seconds) * 1_000_000 + int(micros)

    def clear_pending(self, key: str, job_id: str) -> None:
        """See ``SqliteCoordination.clear_pending``."""
        self._call(self.client.eval, _CLEAR, 1, self.key("pending", key), job_id)

    def claim_job(self, job_id: str, digest: str, pending: str | None, ttl_s: int) -> Pending | None:
        """See ``_Store.claim_job``: one ``EVAL`` (of ``_BIND``, or ``claim_command``'s: no ``SCRIPT EXISTS`` trip)."""
        if pending is None:
            bound = self._call(self.client.eval, _BIND, 1, self.key("job", job_id, "payload"), digest, self.job_ttl_s)
            return Pending(job_id, 0, True) if int(bound) else None
        return pending_of(self._call(self.client.eval, *self.claim_command(job_id, digest, pending, ttl_s)[1:]))

    def bind_later(self, job_id: str, digest: str) -> Callable[[], bool | None]:
        """See ``_Store.bind_later``: the bind's ``EVAL`` is sent now, on a connection held until answered."""
        pool = self.client.connection_pool
        conn = self._call(pool.get_connection)
        try:
            conn.send_command("EVAL", _BIND, 1, self.key("job", job_id, "payload"), digest, self.job_ttl_s)
        except BaseException as exc:
            conn.disconnect()
            pool.release(conn)
            if isinstance(exc, redis.RedisError):
                raise EngineUnavailable(f"coordination store (redis): {exc}") from None
            raise

        def answer() -> bool | None:
            try:
                return bool(int(conn.read_response()))
            except Exception as exc:  # the job is published: only a later replay check of this id is lost
                conn.disconnect()
                log.warning("job %s: binding its id failed: %s", job_id, exc)
                return None
            finally:
                pool.release(conn)

        return answer

    def claim_command(
        self, job_id: str, digest: str, pending: str, ttl_s: int, pushes: Sequence[tuple[Any, ...]] = ()
    ) -> tuple[Any, ...]:
        """``claim_job`` with a pending mark and, when fresh, ``pushes``: one Redis command (``EVAL``, ``pending_of``).

        The script refuses an id bound to another payload; else, when the mark is free, it takes Redis's ``TIME`` as
        the trigger's stamp, marks the key pending, binds the id, keeps the stamp as the job's ``stamp`` mark (the
        message carries none: ``begin_job`` reads it) and runs kombu's ``(name, key, value)`` push commands as given.
        When the mark names a queued job, it moves that job's ``stamp`` mark (``P:job:<queued id>:stamp``, its name
        derived from ``KEYS[3]``) to ``TIME``, never back. ``JobQueue`` sends it in place of the broker's push (issue
        13 §4).
        """
        keys = [self.key("pending", pending), self.key("job", job_id, "payload"), self.key("job", job_id, "stamp")]
        args: list[Any] = [job_id, ttl_s * 1000, digest, self.job_ttl_s]
        for name, key, value in pushes:
            keys.append(key)
            args += [name, value]
        return ("EVAL", _CLAIM, len(keys), *keys, *args)

    def bind_command(self, job_id: str, digest: str) -> tuple[Any, ...]:
        """The bind of a fresh id as one Redis command (reply ``OK``: bound), for a pipeline on this store's server.

        ``JobQueue`` sends it in the broker's pipeline that pushes the job (one round trip with the push). Nothing
        can have bound a fresh id, so ``_BIND``'s comparison is left out: a plain ``SET … NX`` (no script to run).
        """
        return ("SET", self.key("job", job_id, "payload"), digest, "EX", self.job_ttl_s, "NX")

    def run_gate(self, scope: str, event: Event) -> tuple[str, int, int]:
        """See ``_Store.run_gate``: one ``EVALSHA`` of the generic interpreter (``workers.gate``)."""
        name, args = event
        got = cast(list[Any], self._call(self._gate, keys=self._gate_keys(scope), args=[name, json.dumps(args)]))
        return str(got[0]), int(got[1]), int(got[2])

    def gate_state(self, scope: str) -> dict[str, Mark]:
        """See ``SqliteCoordination.gate_state`` (one pipeline)."""

        def fill(pipe: Any) -> None:
            for key in self._gate_keys(scope):
                pipe.get(key)
                pipe.pttl(key)

        got = self._pipeline(fill, transaction=True)
        pairs = zip(MARKS, got[0::2], got[1::2], strict=True)
        return {mark: Mark(str(v), int(ttl) if int(ttl) >= 0 else None) for mark, v, ttl in pairs if v is not None}

    def begin_job(self, job_id: str, pending: str | None) -> Started:
        """See ``SqliteCoordination.begin_job``: one pipeline (the job's keys keep their own slots)."""

        def fill(pipe: Any) -> None:
            pipe.exists(self.key("job", job_id, "done"))
            pipe.incr(self.key("job", job_id, "attempts"))
            pipe.expire(self.key("job", job_id, "attempts"), self.job_ttl_s)
            pipe.smembers(self.key("job", job_id, "progress"))
            if pending is not None:
                pipe.eval(_CLEAR, 1, self.key("pending", pending), job_id)
                pipe.get(self.key("job", job_id, "stamp"))

        got = self._pipeline(fill)
        done, count = bool(got[0]), int(got[1])
        if done:  # a twin is no attempt: the pipeline cannot branch, so take it back (the twin's path only)
            self.forgive_attempt(job_id)
            count -= 1
        stamp = got[5] if pending is not None else None
        return Started(done, count, frozenset(str(u) for u in got[3]), None if stamp is None else int(stamp))

    def attempts(self, job_id: str) -> int:
        """See ``SqliteCoordination.attempts``."""
        return int(self._call(self.client.get, self.key("job", job_id, "attempts")) or 0)

    def forgive_attempt(self, job_id: str) -> None:
        """See ``SqliteCoordination.forgive_attempt``."""
        self._call(self._forgive, keys=[self.key("job", job_id, "attempts")])

    def add_progress(self, job_id: str, unit: str) -> None:
        """See ``SqliteCoordination.add_progress``."""
        key = self.key("job", job_id, "progress")
        self._pipeline(lambda pipe: (pipe.sadd(key, unit), pipe.expire(key, self.job_ttl_s)), transaction=True)

    def progress(self, job_id: str) -> frozenset[str]:
        """See ``SqliteCoordination.progress``."""
        return frozenset(str(u) for u in self._call(self.client.smembers, self.key("job", job_id, "progress")))

    def mark_done(self, job_id: str) -> None:
        """See ``SqliteCoordination.mark_done``."""
        self._call(self.client.set, self.key("job", job_id, "done"), "1", ex=self.job_ttl_s)

    def is_done(self, job_id: str) -> bool:
        """See ``SqliteCoordination.is_done``."""
        return bool(self._call(self.client.exists, self.key("job", job_id, "done")))

    def forget_job(self, job_id: str) -> None:
        """See ``SqliteCoordination.forget_job``."""
        self._call(self.client.delete, *(self.key("job", job_id, part) for part in JOB_MARKS))


MAX_JOB_ID_CHARS = 255
"""Longest job id ``submit`` accepts: it is the Celery task id, a message header and part of Redis keys
(``P:job:<id>:attempts``); a UUID is 36 characters."""


def new_job_id() -> str:
    """A fresh job id (a UUID4 string, the Celery task id)."""
    return str(uuid.uuid4())


def check_job_id(job_id: object) -> str:
    """``job_id`` if it can name a job: a string of 1-``MAX_JOB_ID_CHARS`` characters, not blank, no control ones.

    Raises:
        InvalidRequest: ``field="job_id"`` otherwise (an int or an object would be published as a header id).
    """
    if not isinstance(job_id, str):
        raise InvalidRequest(f"must be a string, not {type(job_id).__name__}", field="job_id")
    if not job_id.strip():
        raise InvalidRequest("must not be blank", field="job_id")
    if len(job_id) > MAX_JOB_ID_CHARS:
        raise InvalidRequest(f"must be at most {MAX_JOB_ID_CHARS} characters, got {len(job_id)}", field="job_id")
    if any(ord(c) < 32 or ord(c) == 127 for c in job_id):
        raise InvalidRequest("must not contain control characters", field="job_id")
    return job_id


Coordination = SqliteCoordination | RedisCoordination
"""A coordination store: the server-less SQLite one, or Redis's (one behaviour, pinned by the same tests)."""


# keys -----------------------------------------------------------------------------------------------------------
def _hex(text: str, digits: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:digits]


def engine_key(url: str) -> str:
    """16 hex digits naming the store an engine URL names (``engines.engine_identity``: no password, one spelling)."""
    return _hex(engine_identity(url), 16)


def scope_key(engine: str, scope: BuildScope) -> str:
    """16 hex digits naming (engine, namespace, kinds): the unit of single flight."""
    return _hex(f"{engine}\x00{scope.namespace}\x00{','.join(sorted(k.value for k in scope.kinds))}", 16)


def pending_key(engine: str, job: ContractModel, text: str | None = None) -> str:
    """32 hex digits naming (engine, job JSON; ``text`` when serialised already): identical triggers share one job."""
    return _hex(f"{engine}\x00{job.to_json() if text is None else text}", 32)


def job_digest(task: str, job: ContractModel, text: str | None = None) -> str:
    """32 hex digits naming (task, job JSON): the payload a job id is bound to (``_Store.claim_job``)."""
    return _hex(f"{task}\x00{job.to_json() if text is None else text}", 32)


# single flight ------------------------------------------------------------------------------------------------
@dataclass(eq=False)
class Lease:
    """One build's hold on its scope's lock; ``lost`` once an extension found the lock gone."""

    scope: str
    token: str
    ttl_s: int
    due: float = 0.0
    lost: bool = False


class LeaseKeeper:
    """One daemon thread per store and process, extending every third of their TTL the leases still held.

    A lease released within its first third costs no extension; an extension that cannot reach the store is tried
    again a third later.
    """

    def __init__(self, coordination: _Store) -> None:
        self._coordination = coordination
        self._held: dict[int, Lease] = {}
        self._pid = os.getpid()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def hold(self, lease: Lease) -> None:
        """Keep ``lease`` alive from now until ``release``."""
        if self._pid != os.getpid():  # a forked child: the parent's thread and lock are not ours
            self.__init__(self._coordination)  # type: ignore[misc]
        with self._wake:
            lease.due = time.monotonic() + lease.ttl_s / 3
            self._held[id(lease)] = lease
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
                self._thread.start()
            self._wake.notify()

    def release(self, lease: Lease) -> None:
        """Stop extending ``lease``."""
        with self._wake:
            self._held.pop(id(lease), None)

    def _run(self) -> None:
        while True:
            with self._wake:
                now = time.monotonic()
                due = [lease for lease in self._held.values() if lease.due <= now]
                if not due:
                    wait = min((lease.due for lease in self._held.values()), default=now + 60.0) - now
                    self._wake.wait(max(wait, 0.001))
                    continue
                for lease in due:
                    lease.due = now + lease.ttl_s / 3
            for lease in due:
                try:
                    kept = self._coordination.gate_extend(lease.scope, lease.token, lease.ttl_s)
                except EngineUnavailable as exc:  # a blip: the lease still has 2/3 left
                    log.warning("scope %s: lease extension failed: %s", lease.scope, exc)
                    continue
                if not kept:
                    lease.lost = True
                    log.warning("scope %s: lease lost while building", lease.scope)
                    self.release(lease)


@dataclass
class Flight(Generic[T]):
    """What one trigger of a scope did: the decision, each pass's result, a lost lease, the wait (s) if deferred."""

    enter: Enter
    results: list[T] = field(default_factory=list)
    lost: bool = False
    wait_s: float = 0.0

    @property
    def deferred(self) -> bool:
        """True when this caller owes the scope a pass after ``wait_s``."""
        return self.wait_s > 0 or self.enter in (Enter.DEFERRED, Enter.BUSY)


def single_flight(
    coordination: Coordination,
    scope: str,
    task_id: str,
    stamp_us: int | None,
    ttl_s: int,
    build: Callable[[], T],
    gap_s: float = 0.0,
) -> Flight[T]:
    """Run ``build`` under the scope's lock, passing again once per burst of triggers that came in meanwhile.

    ``task_id`` is the job id (a lock another delivery of it holds is waited out, never shared); ``stamp_us`` the
    trigger's stamp (None: always new); ``ttl_s`` the lease; ``gap_s`` the least seconds between two passes' starts.

    Raises:
        EngineUnavailable: the store is unreachable (retryable).
        Exception: whatever ``build`` raises; the lock is released first, the dirty mark kept (and raised).
    """
    token = secrets.token_hex(8)
    gap_us = int(gap_s * 1_000_000)
    entered = coordination.gate_enter(scope, task_id, token, stamp_us, ttl_s, gap_us)
    flight: Flight[T] = Flight(entered.enter, wait_s=entered.wait_us / 1_000_000)
    if entered.enter is not Enter.ACQUIRED:
        return flight
    lease, keeper = Lease(scope, token, ttl_s), coordination.keeper
    keeper.hold(lease)
    try:
        while True:
            flight.results.append(build())
            left = coordination.gate_leave(scope, token, ttl_s, gap_us)
            if left.leave is not Leave.AGAIN:
                break
    except BaseException:
        try:
            coordination.gate_abort(scope, token)
        except EngineUnavailable as exc:  # the lease expires on its own
            log.warning("scope %s: release after a failed build failed: %s", scope, exc)
        raise
    finally:
        keeper.release(lease)
    flight.lost = left.leave is Leave.LOST or lease.lost
    if left.leave is Leave.DEFERRED:
        flight.wait_s = max(left.wait_us / 1_000_000, 0.001)
    return flight

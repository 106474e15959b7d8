"""Connections: one psycopg pool per process and URL, a transaction runner, and error mapping.

* **One pool per process.** ``Driver.shared(options)`` hands every engine of a process opened on one URL the
  same ``psycopg_pool.ConnectionPool`` (counted, closed with the last engine). A pool made before ``fork`` is
  never used by the child (the key holds the process id), since two processes must not share a socket.
* **Dropped connections are replaced.** The pool checks a connection before lending it
  (``ConnectionPool.check_connection``) when it has been idle for ``CHECK_IDLE_S`` or more (a connection in
  steady use is lent unchecked: the check is a round trip); a call whose connection broke mid-flight (server
  restart, idle timeout, a proxy closing it) is retried on a fresh connection, so the caller never sees it.
* **Round trips.** A write runs in a transaction (``BEGIN`` … ``COMMIT``); a read (``run(read=True)``) runs
  its statements in autocommit, each seeing the data committed before it started, which is what a
  ``READ COMMITTED`` transaction gives too (PostgreSQL docs §13.2.1), without the two round trips.
* **A statement is one round trip, prepared or not** (``PooledConnection``). psycopg prepares a statement
  once it has run ``prepare_threshold`` (5) times on a connection, which spares the server its parsing and
  planning from then on; but outside a pipeline its ``Parse`` waits for a ``Sync`` of its own, and so does the
  deallocation when its cache of prepared statements fills (psycopg 3 "Prepared statements"): an extra round
  trip, paid by whichever call was lent that connection. A pooled connection sends each statement as a
  pipeline of one, so the ``Parse`` travels with the ``Bind``/``Execute`` ahead of the one ``Sync``.
* **Errors.** A server that is down, restarting or out of connections, a pool wait past ``pool_timeout_s`` and a
  statement past ``statement_timeout_ms`` are ``EngineUnavailable`` (retryable: workers retry, ``pre_turn``
  reports it). A serialization failure or deadlock is retried a few times first. Authentication, a missing
  database or role, and a server that does not speak PostgreSQL's protocol are ``ConfigError`` naming the
  setting. Every message passes through ``PgOptions.mask``: no password is ever shown.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import psycopg
import psycopg.errors
from psycopg import pq
from psycopg_pool import ConnectionPool, PoolTimeout

from memory_core.errors import ConfigError, EngineError, EngineUnavailable, MemoryCoreError

from .options import SETTING, PgOptions

__all__ = ["Conn", "Driver", "PooledConnection", "classify", "pipelined"]

_T = TypeVar("_T")
Conn = psycopg.Connection[Any]
"""A pooled connection (tuple rows)."""
_RETRIES: Final = 4
"""Attempts of a call that met a serialization failure, a deadlock or a dropped connection."""
CHECK_IDLE_S: Final = 5.0
"""A pooled connection idle this long (seconds) is checked before it is lent; a busier one is not."""
_CONFIG_STATES: Final = {
    "28P01": "the password was rejected",
    "28000": "the role may not connect (or does not exist)",
    "3D000": "the database does not exist",
    "42501": "the role lacks a privilege the engine needs",
}
_DOWN_WORDS: Final = (
    "connection refused",
    "could not connect",
    "timeout expired",
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "too many clients",
    "no route to host",
    "could not translate host name",
    "server closed the connection unexpectedly",
    "terminating connection",
)
_PROTOCOL_WORDS: Final = (
    "received invalid response",
    "expected authentication request",
    "unexpected message",
    "invalid length of startup packet",
    "bad message",
    "lost synchronization",
)


def classify(exc: BaseException, options: PgOptions) -> MemoryCoreError:
    """The memory-core error for a driver error, its message masked (pure).

    Args:
        exc: What psycopg or the pool raised.
        options: The engine's URL (for the masked URL and the password to scrub).
    """
    if isinstance(exc, MemoryCoreError):
        return exc
    raw = options.mask(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    where = f"{SETTING} {options.masked}"
    state = getattr(exc, "sqlstate", None)
    if isinstance(exc, PoolTimeout):
        return EngineUnavailable(f"postgresql {options.masked}: no connection within the pool timeout ({raw})")
    if state in _CONFIG_STATES:
        return ConfigError(f"{where}: {_CONFIG_STATES[state]} ({raw})")
    lowered = raw.lower()
    if "password authentication failed" in lowered or "no password supplied" in lowered:
        return ConfigError(f"{where}: the password was rejected ({raw})")
    if "does not exist" in lowered and ("database" in lowered or "role" in lowered):
        return ConfigError(f"{where}: {raw}")
    if any(word in lowered for word in _PROTOCOL_WORDS):
        return ConfigError(f"{where}: the server does not speak PostgreSQL's protocol ({raw})")
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return EngineUnavailable(f"postgresql {options.masked}: statement timed out ({raw})")
    if isinstance(exc, psycopg.OperationalError) or any(word in lowered for word in _DOWN_WORDS):
        return EngineUnavailable(f"postgresql {options.masked} is unavailable: {raw}")
    return EngineError(f"postgresql {options.masked}: {type(exc).__name__}: {raw}")


class PooledConnection(psycopg.Connection[Any]):
    """A pool's connection: ``execute`` costs one round trip even when psycopg prepares the statement.

    Outside a pipeline, the statement runs as a pipeline of one: psycopg queues the ``Parse`` of a statement it
    prepares (and the ``Close`` of one it evicts) with the ``Bind``/``Execute`` instead of waiting for each,
    and the one ``Sync`` at the pipeline's end is the only wait (PostgreSQL docs §55.2.4, "Pipelining"). Inside
    a pipeline (``pipelined``), or with a libpq older than 14, it is psycopg's ``execute`` as is.
    """

    def execute(
        self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: bool = False
    ) -> psycopg.Cursor[Any]:
        """Run ``query`` as psycopg's ``execute`` does (same arguments, result and errors), in one round trip."""
        if self.pgconn.pipeline_status != pq.PipelineStatus.OFF or not psycopg.Pipeline.is_supported():
            return super().execute(query, params, prepare=prepare, binary=binary)
        with self.pipeline():
            cursor = super().execute(query, params, prepare=prepare, binary=binary)
        return cursor


def _retryable(exc: BaseException, conn: Conn | None) -> bool:
    if isinstance(exc, psycopg.errors.SerializationFailure | psycopg.errors.DeadlockDetected):
        return True
    return isinstance(exc, psycopg.OperationalError) and conn is not None and conn.broken


class Driver:
    """A process's pool for one URL, with a transaction runner (``run``); see the module docstring.

    Use ``Driver.shared`` rather than the constructor, so engines of one process share one pool.
    """

    _shared: dict[tuple[int, str, tuple[int, int, float, int]], Driver] = {}
    _shared_lock = threading.Lock()

    def __init__(self, options: PgOptions) -> None:
        self.options = options
        self._users = 0
        self._key = self.key_of(options)
        self._used: weakref.WeakKeyDictionary[Conn, float] = weakref.WeakKeyDictionary()
        self._pool = ConnectionPool(
            options.conninfo,
            connection_class=PooledConnection,
            min_size=options.pool_min_size,
            max_size=options.pool_max_size,
            timeout=options.pool_timeout_s,
            kwargs={"options": f"-c statement_timeout={options.statement_timeout_ms}"},
            check=self._check,
            reset=self._returned,
            open=False,
            name="memory-core",
        )

    @staticmethod
    def key_of(options: PgOptions) -> tuple[int, str, tuple[int, int, float, int]]:
        """The shared-pool key: process, the normalised connection identity (no password), the pool's shape."""
        shape = (options.pool_min_size, options.pool_max_size, options.pool_timeout_s, options.statement_timeout_ms)
        return (os.getpid(), options.identity, shape)

    def _check(self, conn: Conn) -> None:
        """The pool's check at checkout: a round trip only for a connection idle ``CHECK_IDLE_S`` or more."""
        used = self._used.get(conn)
        if used is None or time.monotonic() - used >= CHECK_IDLE_S:
            ConnectionPool.check_connection(conn)

    def _returned(self, conn: Conn) -> None:
        """The pool's reset at return: note when the connection was last used."""
        self._used[conn] = time.monotonic()

    @classmethod
    def shared(cls, options: PgOptions) -> Driver:
        """This process's driver for ``options`` (made and opened on first use), counted for ``release``.

        Raises:
            ConfigError: the server refused the credentials, the database or role is missing, or it is not
                PostgreSQL.
            EngineUnavailable: the server does not answer.
        """
        key = cls.key_of(options)
        with cls._shared_lock:
            driver = cls._shared.get(key)
            if driver is None:
                driver = cls(options)
                driver._probe()
                driver._pool.open(wait=False)
                cls._shared[key] = driver
            driver._users += 1
            return driver

    def _probe(self) -> None:
        """Connect once directly, so a wrong URL fails now with its reason (a pool would only time out)."""
        try:
            with psycopg.connect(self.options.conninfo) as conn:
                conn.execute("SELECT 1")
        except Exception as exc:  # every driver error is mapped
            raise classify(exc, self.options) from None

    def release(self) -> None:
        """Drop one user; the last closes the pool."""
        with self._shared_lock:
            self._users -= 1
            if self._users > 0:
                return
            self._shared.pop(self._key, None)
        self._pool.close()

    def run(self, fn: Callable[[Conn], _T], *, retries: int = _RETRIES, read: bool = False) -> _T:
        """Run ``fn`` in one transaction on a pooled connection; commit when it returns, roll back if it raises.

        ``read=True``: ``fn`` only reads; its statements run in autocommit (see the module docstring).

        A dropped connection, a serialization failure or a deadlock is retried (up to ``retries`` attempts);
        driver errors come out mapped (``classify``).

        Raises:
            EngineUnavailable: the server is down or restarting, no connection came within the pool timeout,
                or a statement exceeded ``statement_timeout_ms``.
            ConfigError: the credentials or database stopped being valid.
            EngineError: any other database error, masked.
        """
        attempt = 0
        while True:
            attempt += 1
            conn: Conn | None = None
            try:
                with self._pool.connection() as conn:
                    if read:
                        conn.autocommit = True
                        try:
                            return fn(conn)
                        finally:
                            if not conn.broken:
                                conn.autocommit = False
                    with conn.transaction():
                        return fn(conn)
            except MemoryCoreError:
                raise
            except Exception as exc:  # every driver error is mapped
                if attempt < retries and _retryable(exc, conn):
                    time.sleep(0.01 * attempt)
                    continue
                raise classify(exc, self.options) from None

    def stats(self) -> dict[str, int]:
        """The pool's counters (``pool_size``, ``pool_available``, ``requests_waiting``…)."""
        return dict(self._pool.get_stats())


def pipelined(conn: Conn, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[tuple[Any, ...]]]:
    """Every statement's rows, the statements sent together in one round trip (psycopg's pipeline mode).

    Statements that do not depend on each other's answers (a fetch's items and beliefs candidates) need not each
    wait for the server: in pipeline mode they are sent at once, followed by one ``Sync`` (PostgreSQL docs
    §55.2.4, "Pipelining"; psycopg 3 "Pipeline mode support"). One statement runs alone; libpq older than 14 (no
    pipeline mode) runs them one by one.

    Args:
        conn: An open connection (a read's, in autocommit).
        statements: ``(sql, params)`` each.
    """
    if len(statements) <= 1 or not psycopg.Pipeline.is_supported():
        return [conn.execute(sql, params).fetchall() for sql, params in statements]
    with conn.pipeline():
        cursors = [conn.execute(sql, params) for sql, params in statements]
    return [cur.fetchall() for cur in cursors]

"""One SQLite file shared by threads and processes: opening checks, per-thread connections, transactions.

``Database`` owns the path and hands each thread its own ``sqlite3`` connection (autocommit mode; every write is
an explicit ``BEGIN IMMEDIATE`` so a writer never has to upgrade a read lock, the one case SQLite's busy handler
cannot wait out). Every connection runs in WAL mode with a busy timeout, so readers never block the writer and
one writer at a time waits its turn across processes.

Failures are mapped onto the contract's errors (reference §1.11):

| SQLite says | raised |
| --- | --- |
| ``database is locked`` / ``busy`` after ``busy_timeout`` and the bounded retries | ``EngineUnavailable`` |
| ``file is not a database``, ``database disk image is malformed`` | ``EngineUnavailable`` naming the file |
| ``attempt to write a readonly database``, ``unable to open database file`` | ``EngineError`` naming the file |
| anything else | ``EngineError`` |

Opening never changes a file it cannot use: the header is read, then the file is opened read-only to check it,
and only then opened for writing.
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qs, urlsplit

from memory_core.errors import ConfigError, EngineError, EngineUnavailable, MemoryCoreError

__all__ = ["INTEGRITY_TTL_S", "Database", "SQLiteOptions", "is_corrupt", "is_locked", "map_error", "parse_url"]

_T = TypeVar("_T")

SQLITE_HEADER = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file (sqlite.org/fileformat.html §1.3)."""
DEFAULT_BUSY_TIMEOUT_MS = 2_000
"""How long one statement waits for a lock inside SQLite before the retry loop takes over, ms."""
RETRY_ATTEMPTS = 6
"""Attempts of one transaction while the file stays locked (memory-core bound; about 2 s busy wait each)."""
RETRY_BASE_S = 0.02
"""First backoff between attempts, seconds; doubled each time with full jitter, capped at ``RETRY_CAP_S``."""
RETRY_CAP_S = 1.0
"""Longest backoff between attempts, seconds."""
INTEGRITY_TTL_S = 60.0
"""How long a clean ``PRAGMA quick_check`` stands before ``Database.damage`` runs another, seconds (memory-core
choice: a full check reads every page, about 0.13 s for a 100k-item, 150 MB file with the pages cached)."""

_LOCKED_MARKERS = ("database is locked", "database is busy", "database table is locked")
_CORRUPT_MARKERS = ("file is not a database", "malformed", "file is encrypted")
_READ_ONLY_MARKERS = ("readonly database", "read-only", "unable to open database file")
_SIDE_SUFFIXES = ("-wal", "-shm", "-journal")
"""Files SQLite keeps beside a database while it is in use (sqlite.org/tempfiles.html §2.1-2.3)."""


@dataclass(frozen=True)
class SQLiteOptions:
    """Settings read from the engine URL.

    Attributes:
        path: The database file.
        synchronous: ``full`` (default: a commit survives power loss) or ``normal`` (survives a crash of the
            process; faster).
        busy_timeout_ms: SQLite's own wait for a lock, per statement, ms.
    """

    path: Path
    synchronous: str = "full"
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS


def parse_url(url: str) -> SQLiteOptions:
    """Read ``sqlite:///relative/path.db`` or ``sqlite:////abs/path.db`` (query: ``synchronous``, ``busy_timeout_ms``).

    Raises:
        ConfigError: another scheme, a host part, no path, or an unknown or malformed query parameter.
    """
    parts = urlsplit(url)
    if parts.scheme.lower() != "sqlite":
        raise ConfigError(f"not a sqlite URL: {url!r}")
    if parts.netloc:
        raise ConfigError(f"sqlite URLs take no host (use sqlite:///relative.db or sqlite:////abs.db), got {url!r}")
    raw = parts.path[1:] if parts.path.startswith("/") else parts.path
    if not raw or raw.endswith("/"):
        raise ConfigError(f"sqlite URL names no file: {url!r}")
    if raw == ":memory:":
        raise ConfigError("sqlite:///:memory: is not supported: the engine is shared by threads and processes")
    query = parse_qs(parts.query)
    unknown = set(query) - {"synchronous", "busy_timeout_ms"}
    if unknown:
        raise ConfigError(f"sqlite:// takes only ?synchronous= and ?busy_timeout_ms=, not {sorted(unknown)}")
    sync = query.get("synchronous", ["full"])[-1].lower()
    if sync not in {"full", "normal"}:
        raise ConfigError(f"synchronous must be full or normal, not {sync!r}")
    try:
        busy = int(query.get("busy_timeout_ms", [str(DEFAULT_BUSY_TIMEOUT_MS)])[-1])
    except ValueError:
        raise ConfigError("busy_timeout_ms must be an integer") from None
    if busy < 0:
        raise ConfigError("busy_timeout_ms must be >= 0")
    return SQLiteOptions(path=Path(raw), synchronous=sync, busy_timeout_ms=busy)


def is_locked(exc: BaseException) -> bool:
    """True when ``exc`` is SQLite's "database is locked/busy" (worth retrying)."""
    return isinstance(exc, sqlite3.OperationalError) and any(m in str(exc).lower() for m in _LOCKED_MARKERS)


def is_corrupt(exc: BaseException) -> bool:
    """True when ``exc`` says the file is damaged or not a database (``SQLITE_CORRUPT``, ``SQLITE_NOTADB``)."""
    return isinstance(exc, sqlite3.DatabaseError) and any(m in str(exc).lower() for m in _CORRUPT_MARKERS)


def map_error(exc: BaseException, path: Path) -> MemoryCoreError:
    """The contract error for a ``sqlite3`` failure on the file at ``path`` (see the module table)."""
    text = str(exc).lower()
    if is_locked(exc):
        return EngineUnavailable(
            f"{path} stayed locked by another writer through {RETRY_ATTEMPTS} attempts; try again later"
        )
    if is_corrupt(exc):
        return EngineUnavailable(f"{path} is not a usable sqlite database: {text}")
    if any(m in text for m in _READ_ONLY_MARKERS):
        return EngineError(f"{path} cannot be written: {text}")
    return EngineError(f"sqlite error on {path}: {text}")


def _check_writable(path: Path) -> None:
    folder = path.parent
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(
            f"folder {folder} is read-only: sqlite needs to create its write-ahead log beside {path.name}"
        )
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise ConfigError(f"{path} is read-only (or unreadable): the engine needs to write it")


def _check_file(path: Path) -> None:
    """Refuse a file that is not SQLite, reading only its header (nothing is written)."""
    if not path.exists():
        return
    if not path.is_file():
        raise EngineUnavailable(f"{path} is not a file")
    with path.open("rb") as fh:
        head = fh.read(len(SQLITE_HEADER))
    if head and head != SQLITE_HEADER:
        raise EngineUnavailable(f"{path} is not a sqlite database (unknown header); the file was left untouched")


def _signature(path: Path) -> tuple[int, int, int]:
    """``(inode, size, mtime ns)`` of a file: changes when anything rewrites or replaces it."""
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns


class Database:
    """The database file and its connections: one per thread (and per process), closed together.

    Args:
        options: Path and pragmas (see ``SQLiteOptions``).
        probe: Called with a read-only connection to an existing file before anything is written (the schema
            check); what it raises propagates and the file stays untouched.

    Raises:
        ConfigError: the folder or file is read-only.
        EngineUnavailable: the file exists but is not a SQLite database (it is left untouched).
    """

    def __init__(self, options: SQLiteOptions, probe: Callable[[sqlite3.Connection], object] | None = None) -> None:
        self.options = options
        self.path = options.path.expanduser().absolute()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[sqlite3.Connection] = []
        self._closed = False
        self._damage: str | None = None
        self._checked_at: float | None = None
        self._check_lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create folder {self.path.parent}: {exc.strerror or exc}") from None
        _check_writable(self.path)
        _check_file(self.path)
        self._probe_read_only(probe)

    # opening ---------------------------------------------------------------------------------------------
    def _probe_read_only(self, probe: Callable[[sqlite3.Connection], object] | None) -> None:
        """Open an existing file read-only and read its schema, so a bad file fails before any write.

        A file at rest (no ``-wal``, ``-shm`` or ``-journal`` beside it) is read as ``immutable``: even a
        read-only connection creates ``-wal`` and ``-shm`` beside a WAL-mode file, and a refused file and its
        folder must stay exactly as found. Should another process start using the file during that read (a
        side file appears or the file changes), a failure is not trusted and the file is read again with
        ordinary shared locking, beside that process's own side files.
        """
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        at_rest = not self._side_files()
        before = _signature(self.path)
        try:
            self._probe(probe, immutable=at_rest)
        except MemoryCoreError:
            if not at_rest or (not self._side_files() and _signature(self.path) == before):
                raise
            self._probe(probe, immutable=False)

    def _side_files(self) -> list[Path]:
        """The ``-wal``, ``-shm`` and ``-journal`` files beside the database (sqlite.org/tempfiles.html)."""
        return [p for p in (self.path.with_name(self.path.name + s) for s in _SIDE_SUFFIXES) if p.exists()]

    def _probe(self, probe: Callable[[sqlite3.Connection], object] | None, *, immutable: bool) -> None:
        flags = "mode=ro&immutable=1" if immutable else "mode=ro"
        try:
            conn = sqlite3.connect(f"{self.path.as_uri()}?{flags}", uri=True, isolation_level=None)
        except sqlite3.Error as exc:
            raise map_error(exc, self.path) from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {self.options.busy_timeout_ms}")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            if probe is not None:
                probe(conn)
        except sqlite3.Error as exc:
            if is_locked(exc):
                return  # another process holds it; it is a database, so carry on
            raise map_error(exc, self.path) from None
        finally:
            conn.close()

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=0)
            conn.execute(f"PRAGMA busy_timeout = {self.options.busy_timeout_ms}")
            self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
            conn.execute(f"PRAGMA synchronous = {self.options.synchronous.upper()}")
            conn.execute("PRAGMA foreign_keys = OFF")
            conn.execute("PRAGMA temp_store = MEMORY")
            conn.execute("PRAGMA cache_size = -32000")
        except sqlite3.Error as exc:
            raise self._failed(exc) from None
        return conn

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use; reopened after a fork).

        Raises:
            EngineError: the database was closed.
        """
        if self._closed:
            raise EngineError(f"{self.path} was closed")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            conn = self._connect()
            self._local.conn = conn
            self._local.pid = os.getpid()
            with self._lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        """Close every connection this object opened in this process. Idempotent."""
        with self._lock:
            self._closed = True
            conns, self._all = self._all, []
        for conn in conns:
            try:
                conn.close()
            except sqlite3.Error:  # pragma: no cover - closing is best effort
                pass

    # running ---------------------------------------------------------------------------------------------
    def _retry(self, fn: Callable[[], _T]) -> _T:
        delay = RETRY_BASE_S
        for attempt in range(RETRY_ATTEMPTS):
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not is_locked(exc) or attempt == RETRY_ATTEMPTS - 1:
                    raise
                time.sleep(random.uniform(0, delay))
                delay = min(delay * 2, RETRY_CAP_S)
        raise AssertionError("unreachable")  # pragma: no cover

    def try_write(self, fn: Callable[[sqlite3.Connection], _T]) -> _T | None:
        """Run ``fn(conn)`` in a write transaction only if the write lock is free right now; else None at once.

        For work that may wait for a later turn (folding accepted rows into the index on a read): it never
        waits on another writer, so a live-turn read is never held up by a worker's long build.

        Raises:
            EngineUnavailable: the file is corrupt.
            EngineError: any other SQLite failure.
        """
        conn = self.connection()
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if is_locked(exc):
                    return None
                raise
            try:
                out = fn(conn)
                conn.execute("COMMIT")
                return out
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise self._failed(exc) from None
        finally:
            conn.execute(f"PRAGMA busy_timeout = {self.options.busy_timeout_ms}")

    def run(self, fn: Callable[[sqlite3.Connection], _T], *, write: bool = False) -> _T:
        """Run ``fn(conn)`` in one transaction, retried while the file is locked.

        A write runs inside ``BEGIN IMMEDIATE`` (the write lock is taken up front) and commits; a read runs
        inside ``BEGIN`` so all its statements see one snapshot. On any error the transaction rolls back, so a
        failed call changes nothing.

        Raises:
            EngineUnavailable: the file stayed locked through every retry, or is corrupt.
            EngineError: any other SQLite failure.
        """
        conn = self.connection()

        def attempt() -> _T:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                out = fn(conn)
                conn.execute("COMMIT")
                return out
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

        try:
            return self._retry(attempt)
        except sqlite3.Error as exc:
            raise self._failed(exc) from None

    def _failed(self, exc: sqlite3.Error) -> MemoryCoreError:
        """``exc`` as a contract error, remembering damage for ``damage`` (a damaged file stays damaged)."""
        if is_corrupt(exc) and self._damage is None:
            self._damage = f"{self.path} is damaged: {str(exc).lower()}"
        return map_error(exc, self.path)

    # health ----------------------------------------------------------------------------------------------
    def damage(self) -> str | None:
        """Why the file is damaged, naming it, or None when it reads clean.

        Two sources: any corruption a transaction of this object met (reported from then on: its connections
        keep the damaged file open, so a repaired or restored file needs a new ``Database``), and SQLite's
        ``PRAGMA quick_check(1)``, which walks every b-tree page of every table and index (O(file size); not
        the FTS5 index's own contents, which a read reports when it meets them). A clean check stands for
        ``INTEGRITY_TTL_S``; concurrent callers wait for the one check running.

        Raises:
            EngineUnavailable: the file is locked through every retry or cannot be read as a database.
            EngineError: any other SQLite failure.
        """
        with self._check_lock:
            due = self._checked_at is None or time.monotonic() - self._checked_at >= INTEGRITY_TTL_S
            if self._damage is None and due:
                rows = self.run(lambda conn: conn.execute("PRAGMA quick_check(1)").fetchall())
                self._checked_at = time.monotonic()
                lines = [line for r in rows for line in str(r[0]).splitlines() if not line.startswith("*** in ")]
                report = "; ".join(lines)
                if report != "ok":
                    self._damage = f"{self.path} is damaged: PRAGMA quick_check reports {report}"
            return self._damage

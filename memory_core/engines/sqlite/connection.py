"""One SQLite file shared by threads and processes: opening checks, per-thread connections, transactions.

``Database`` owns the path and hands each thread its own ``sqlite3`` connection (autocommit mode; every write is
an explicit ``BEGIN IMMEDIATE`` so a writer never has to upgrade a read lock). Every connection runs in WAL mode,
so readers never block the writer and one writer at a time holds the write lock across processes.

**Waiting for the write lock** (issue 12). SQLite's own busy handler sleeps in steps of up to 100 ms
(``sqliteDefaultBusyCallback`` in sqlite3.c), longer than a build's pause between two transactions, so a waiting
writer kept missing its turn. Connections run with ``busy_timeout = 0`` and ``Database`` waits itself, retrying
``BEGIN IMMEDIATE`` every ``STEP_S`` to ``STEP_CAP_S`` until ``busy_timeout_ms × RETRY_ATTEMPTS`` has passed.
Writes come in two priorities:

* **live** (``store_with(accepted)``, forget, erase, migrations): the writer holds the *gate* (an ``flock`` on
  ``<file>-gate``) shared from its first attempt to its commit;
* **background** (builds and their commits, ingestion's ``visible`` batches, folding pending rows, the
  embedding job's vectors, log compaction): before each ``BEGIN IMMEDIATE`` the writer takes the gate
  exclusively without waiting, and lets it go as soon as the transaction has begun. When a live writer holds the
  gate, it stands back (``WriteStats.yields``) and tries again.

So once a live writer waits, no background transaction can begin: it waits for at most the one background
transaction already holding the lock, plus other live writes, each one short transaction. Every background
transaction's body commits once it has held the lock ``TX_BUDGET_S`` (checked after each item: ``held_s``) or
at its kind's item cap, and counts its items (``tally``); ``WriteStats.holds`` records each transaction's hold
and items per kind. A background writer waits for the gate only as long as live writes keep
coming; the gate is released when a process dies (``flock`` locks belong to the open file). The gate only
orders writers: SQLite's own locks keep them correct, so a gate file removed by the last process closing the
database (as SQLite removes the WAL) while another opens it costs at most a moment's ordering.

**Checkpoints.** SQLite's automatic checkpoint runs inside whichever commit crosses 1,000 pages of log, and again in
every commit while readers keep it from finishing: a live write would pay for a build's pages (and a sync of the
file). Connections run with ``wal_autocheckpoint = 0``; a background write checkpoints (``PASSIVE``, never waiting)
after its commit once the log has grown by ``CHECKPOINT_BYTES`` since the last checkpoint any process ran (or past
it, after a restart), a live write only by ``LIVE_CHECKPOINT_BYTES`` (a host writing with nothing in the
background still bounds its log). Growth, not size: a log the host's readers keep from restarting only grows, and
measured by its size every background commit checkpointed again. The log is measured by its frames, not by its
file (``wal_header.end``: the frames whose salts match the header's): the file keeps its size when SQLite starts
writing it from the top again after a restart, and connections run with ``journal_size_limit = -1``, so nothing
cuts it back. Cutting it back is what SQLite does in the restarting commit, under the write lock, and an
``ftruncate`` of a 40-90 MB log (the size it reaches while the host's readers keep it from restarting) took
10-50 ms there (sqlite.org/pragma.html#pragma_journal_size_limit). The price is disk space: the ``-wal`` file
keeps the largest size the log reached until the last connection closes (SQLite then checkpoints and removes
it).

**Restarts.** Once a checkpoint has copied the whole log, the next write transaction *restarts* it: inside its
commit, under the write lock, it writes the log's header again and fsyncs it (``wal_header``; 0.2 ms on a quiet
disk, a few ms on a busy one; with a ``journal_size_limit`` it also cut the file back, 2-50 ms). When that was a
host's live write, the host
paid it: the host's short live transaction had a long tail only while a worker checkpointed. So a background
write whose checkpoint copied everything restarts the log at once in its own small transaction
(``_restart_log``, kind ``restart``), and ``Holds.restarts`` counts, per kind, the transactions that restarted
it (read from the log's header before and after the commit, never from ``-shm``: closing any descriptor of a
file SQLite locks drops the process's locks on it, sqlite.org/howtocorrupt.html §2.2).

**Durability** (``docs/live-turn.md``): a live ``accepted`` write (``relaxed``) and every background write commit
with ``synchronous = NORMAL``: in WAL mode a commit survives the death of the process at once, and no fsync is
paid under the write lock. A background unit of work ends with ``sync`` (an fsync of the log, holding no lock),
which makes every commit before it durable, ``accepted`` ones included; a power loss or OS crash can roll back
only what was committed since. Live forget and erase commit at the URL's ``synchronous`` (``full`` by default).
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qs, urlsplit

from memory_core.errors import ConfigError, EngineError, EngineUnavailable, MemoryCoreError

from . import log_txn, wal_header

__all__ = [
    "INTEGRITY_TTL_S",
    "TX_BUDGET_S",
    "Database",
    "Holds",
    "SQLiteOptions",
    "WriteStats",
    "held_s",
    "tally",
    "is_corrupt",
    "is_locked",
    "map_error",
    "parse_url",
]

_T = TypeVar("_T")

"""The first 16 bytes of every SQLite database file (sqlite.org/fileformat.html §1.3)."""
DEFAULT_BUSY_TIMEOUT_MS = 2_000
"""The unit of how long a transaction waits for the file's locks, ms (see ``RETRY_ATTEMPTS``)."""
RETRY_ATTEMPTS = 6
"""A transaction waits for the locks up to ``busy_timeout_ms × RETRY_ATTEMPTS`` (12 s by default) before
``EngineUnavailable`` (memory-core bound); ``busy_timeout_ms=0`` makes one attempt."""
STEP_S = 0.0005
"""First pause between two attempts at a lock, seconds; doubled each time up to ``STEP_CAP_S``."""
STEP_CAP_S = 0.002
"""Longest pause between two attempts, seconds (memory-core choice: well under a build's ``LOCK_GAP_S``, so a
waiting writer sees the lock free the moment a build transaction commits; an attempt costs a few µs)."""
CHECKPOINT_BYTES = 4_000_000
"""A background write checkpoints once the write-ahead log has grown by this much (SQLite's own default is 1,000
pages)."""
LIVE_CHECKPOINT_BYTES = 64_000_000
"""A live write checkpoints only past this (a safety net for a host no background work runs beside)."""
TX_BUDGET_S = 0.001
"""How long a background transaction's body may hold the write lock before it commits, seconds: each one checks
it after every item it writes and stops there (at least one item, at most its own cap; memory-core choice, so a
live write waiting behind one background transaction waits about a millisecond of work)."""
HOLD_SAMPLES = 4096
"""The most recent lock holds ``Holds`` keeps per kind for its quantiles."""
GATE_SUFFIX = "-gate"
BACKGROUND_KEY = "background_tx"
"""The ``meta`` key every background transaction increments, in the transaction: a live write reads it when it
starts waiting and again once it holds the lock, so ``WriteStats.behind_most`` is exact across processes."""
_COUNT_BACKGROUND = (
    "INSERT INTO meta (key, value) VALUES (?, '1') "
    "ON CONFLICT(key) DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)"
)
"""The file beside the database whose ``flock`` orders live writes before background ones (module docstring)."""
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
        busy_timeout_ms: How long a transaction waits for the locks, in units of ``RETRY_ATTEMPTS``, ms.
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
        return EngineUnavailable(f"{path} stayed locked by another writer; try again later")
    if is_corrupt(exc):  # permanent: retrying reads the same bytes (not ``EngineUnavailable``, which is transient)
        return EngineError(f"{path} is not a usable sqlite database: {text}")
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
    """Refuse a path that is not a regular file; its content is read by SQLite itself (``_probe_read_only``).

    The file is never opened here: closing any descriptor of a file drops every POSIX lock this process holds on
    it, SQLite's included, so an engine already open on it in this process would lose its locks
    (sqlite.org/howtocorrupt.html, section 2.2). SQLite's own opens share one lock record per file.
    """
    if path.exists() and not path.is_file():
        raise EngineError(f"{path} is not a file")


def _signature(path: Path) -> tuple[int, int, int]:
    """``(inode, size, mtime ns)`` of a file: changes when anything rewrites or replaces it."""
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns


@dataclass
class Holds:
    """How long one kind of write transaction held the write lock, and how many items each wrote.

    A hold runs from ``BEGIN IMMEDIATE`` succeeding to ``COMMIT`` returning (the time another writer waits for
    it); a checkpoint's (kind ``checkpoint``) is its own run, after the commit, holding neither the write lock
    nor the gate. Items are what the transaction's body counted with ``tally`` (rows of its unit: items stored
    or indexed, items merged, beliefs published).

    Attributes:
        count: Transactions of this kind.
        most_s: The longest hold, seconds.
        most_items: The most items one transaction counted.
        restarts: Transactions whose commit restarted the write-ahead log (wrote its header again and synced
            it: ``wal_header``), paying an fsync under the write lock.
        recent: The last ``HOLD_SAMPLES`` holds, seconds.
        commits: Of each of those holds, the part its ``COMMIT`` took (writing the log's frames, and a restart's
            header sync), seconds; the rest is the body's.
        cpu: Of each of those holds, the CPU time the holding thread ran, seconds.
        runnable: Of each of those holds, the time the holding thread was runnable but another thread had its CPU
            (preempted; Linux's ``/proc/thread-self/schedstat``, 0 elsewhere), seconds. The rest of a hold, neither
            on a CPU nor runnable, it was blocked: on I/O (a write, a sync, a page fault).
    """

    count: int = 0
    most_s: float = 0.0
    most_items: int = 0
    restarts: int = 0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=HOLD_SAMPLES))
    commits: deque[float] = field(default_factory=lambda: deque(maxlen=HOLD_SAMPLES))
    cpu: deque[float] = field(default_factory=lambda: deque(maxlen=HOLD_SAMPLES))
    runnable: deque[float] = field(default_factory=lambda: deque(maxlen=HOLD_SAMPLES))

    def add(
        self,
        held: float,
        items: int,
        restarted: bool = False,
        commit: float = 0.0,
        cpu: float = 0.0,
        runnable: float = 0.0,
    ) -> None:
        """Count one transaction's hold: ``held`` s in all, its parts (s), its ``items``, whether it restarted the log.

        ``commit`` of the hold went to its ``COMMIT``, ``cpu`` ran on a CPU, ``runnable`` waited for one.
        """
        self.count += 1
        self.most_s = max(self.most_s, held)
        self.most_items = max(self.most_items, items)
        self.restarts += restarted
        self.recent.append(held)
        self.commits.append(commit)
        self.cpu.append(cpu)
        self.runnable.append(runnable)

    def quantile(self, q: float, of: str = "recent") -> float:
        """The ``q`` quantile (0-1, nearest rank) of the recent holds, seconds (0.0 with none).

        ``of`` names the samples: ``recent`` (whole holds), ``commits``, ``cpu`` or ``runnable`` (their parts).
        """
        samples: deque[float] = getattr(self, of)
        if not samples:
            return 0.0
        ordered = sorted(samples)
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]

    def summary(self) -> dict[str, float]:
        """The holds' count, quantiles and parts, ms (JSON-ready).

        Keys: ``count, p50_ms, p99_ms, max_ms, most_items, restarts``, and the parts' quantiles: ``commit_p50_ms,
        commit_p99_ms, cpu_p50_ms, cpu_p99_ms, runnable_p50_ms, runnable_p99_ms, blocked_p99_ms``.
        """
        return {
            "count": self.count,
            "p50_ms": self.quantile(0.5) * 1000,
            "p99_ms": self.quantile(0.99) * 1000,
            "max_ms": self.most_s * 1000,
            "most_items": self.most_items,
            "restarts": self.restarts,
            "commit_p50_ms": self.quantile(0.5, "commits") * 1000,
            "commit_p99_ms": self.quantile(0.99, "commits") * 1000,
            "cpu_p50_ms": self.quantile(0.5, "cpu") * 1000,
            "cpu_p99_ms": self.quantile(0.99, "cpu") * 1000,
            "runnable_p50_ms": self.quantile(0.5, "runnable") * 1000,
            "runnable_p99_ms": self.quantile(0.99, "runnable") * 1000,
            "blocked_p99_ms": self._blocked(0.99) * 1000,
        }

    def _blocked(self, q: float) -> float:
        """The ``q`` quantile of each hold's time neither on a CPU nor runnable (blocked), seconds."""
        blocked = sorted(max(0.0, h - c - r) for h, c, r in zip(self.recent, self.cpu, self.runnable, strict=True))
        if not blocked:
            return 0.0
        return blocked[min(len(blocked) - 1, max(0, round(q * len(blocked)) - 1))]


class _Tx(threading.local):
    """This thread's open write transaction: when it began (monotonic s) and the items its body counted."""

    began: float = 0.0
    items: int = 0


_tx = _Tx()


def tally(items: int = 1) -> None:
    """Count ``items`` written by this thread's open write transaction (``Holds.most_items``)."""
    _tx.items += items


def _run_delay() -> float:
    """Seconds this thread has spent runnable but not running; 0.0 where the kernel does not say.

    ``/proc/thread-self/schedstat``'s second field, ns (the Linux kernel's ``Documentation/scheduler/sched-stats.rst``).
    """
    try:
        with open("/proc/thread-self/schedstat", "rb") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def held_s() -> float:
    """Seconds this thread's open write transaction has held the write lock (bodies check ``TX_BUDGET_S``)."""
    return time.monotonic() - _tx.began


@dataclass
class WriteStats:
    """What this process's writes met while waiting for the lock (counts since the ``Database`` was opened).

    Attributes:
        live: Live write transactions committed.
        live_busy: Attempts of a live write that found the write lock held.
        background: Background write transactions committed.
        background_busy: Attempts of a background write that found the write lock held.
        yields: Times a background writer stood back because a live write held the gate.
        checkpoints: Checkpoints this process ran after a commit.
        syncs: ``sync`` calls that synced the write-ahead log.
        behind_most: The most background transactions that committed while one live write waited (from
            ``meta.background_tx``, counted by SQLite's own serialisation: exact across processes).
        behind_more_than_one: Live writes that waited behind more than one background transaction.
        holds: Per kind of write transaction (``Database.run``'s ``kind``), its lock holds (``Holds``); kind
            ``live.wait`` holds how long live writes waited for the lock, ``checkpoint`` the checkpoints.
    """

    live: int = 0
    live_busy: int = 0
    background: int = 0
    background_busy: int = 0
    yields: int = 0
    checkpoints: int = 0
    syncs: int = 0
    behind_most: int = 0
    behind_more_than_one: int = 0
    holds: dict[str, Holds] = field(default_factory=dict)

    def hold_summary(self) -> dict[str, dict[str, float]]:
        """``{kind: Holds.summary()}`` for every kind seen (JSON-ready)."""
        return {kind: holds.summary() for kind, holds in sorted(self.holds.items())}


def _restart_body(conn: sqlite3.Connection) -> None:
    """A background transaction's body that writes nothing of its own (``Database._restart_log``)."""


class _Gate:
    """``flock`` on ``<file>-gate``, ordering live writes before background ones (module docstring).

    Live writers share it while they wait and write; background writers take it exclusively only to begin a
    transaction. One descriptor per thread, since ``flock`` locks belong to an open file and threads sharing one
    would share the lock. The file is created on first use.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._lock = threading.Lock()
        self._fds: list[int] = []

    def _fd(self) -> int:
        fd: int | None = getattr(self._local, "fd", None)
        if fd is None or getattr(self._local, "pid", None) != os.getpid():
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            self._local.fd, self._local.pid = fd, os.getpid()
            with self._lock:
                self._fds.append(fd)
        return fd

    @contextmanager
    def shared(self) -> Iterator[None]:
        """Hold the gate shared (waits only while a background writer is beginning a transaction)."""
        fd = self._fd()
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def try_exclusive(self) -> bool:
        """Take the gate exclusively if no live writer holds it; never waits."""
        try:
            fcntl.flock(self._fd(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def release(self) -> None:
        """Let the gate go (after ``try_exclusive``)."""
        fcntl.flock(self._fd(), fcntl.LOCK_UN)

    def close(self) -> None:
        with self._lock:
            fds, self._fds = self._fds, []
        for fd in fds:
            try:
                os.close(fd)
            except OSError:  # pragma: no cover - closing is best effort
                pass


class Database:
    """The database file and its connections: one per thread (and per process), closed together.

    Args:
        options: Path and pragmas (see ``SQLiteOptions``).
        probe: Called with a read-only connection to an existing file before anything is written (the schema
            check); what it raises propagates and the file stays untouched.

    Raises:
        ConfigError: the folder or file is read-only.
        EngineError: the file exists but is not a SQLite database, or the path is not a file (left untouched).
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
        self._gate = _Gate(self.path.with_name(self.path.name + GATE_SUFFIX))
        self._wal = self.path.with_name(self.path.name + "-wal")
        self._checkpointed_size = 0  # the log's size at the last checkpoint this process knows of (``_checkpoint``)
        self._file_written: int | None = None  # the file's mtime then: a checkpoint writes it
        self._stats_lock = threading.Lock()
        self.stats = WriteStats()
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
            conn.execute("PRAGMA busy_timeout = 0")  # waiting is ``Database``'s (module docstring)
            self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
            conn.execute(f"PRAGMA synchronous = {self.options.synchronous.upper()}")
            self._local.sync = self.options.synchronous.upper()
            conn.execute("PRAGMA foreign_keys = OFF")
            conn.execute("PRAGMA temp_store = MEMORY")
            conn.execute("PRAGMA cache_size = -32000")
            conn.execute("PRAGMA wal_autocheckpoint = 0")  # checkpoints are background work (``_checkpoint``)
            conn.execute("PRAGMA journal_size_limit = -1")  # never cut the log's file under the write lock
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
        self._gate.close()
        if not self._side_files():  # the last connection closed (SQLite removed the WAL): leave no gate behind
            self._gate.path.unlink(missing_ok=True)

    # running ---------------------------------------------------------------------------------------------
    def _wait_s(self) -> float:
        return self.options.busy_timeout_ms / 1000 * RETRY_ATTEMPTS

    def _retry(self, fn: Callable[[], _T]) -> _T:
        """``fn()`` retried in short steps while the file is locked, up to ``_wait_s``."""
        deadline = time.monotonic() + self._wait_s()
        step = STEP_S
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not is_locked(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(step)
            step = min(step * 2, STEP_CAP_S)

    def _count(self, field: str) -> None:
        with self._stats_lock:
            setattr(self.stats, field, getattr(self.stats, field) + 1)

    def _held(
        self,
        kind: str,
        seconds: float,
        items: int = 0,
        restarted: bool = False,
        commit: float = 0.0,
        cpu: float = 0.0,
        runnable: float = 0.0,
    ) -> None:
        with self._stats_lock:
            holds = self.stats.holds.get(kind)
            if holds is None:
                holds = self.stats.holds[kind] = Holds()
            holds.add(seconds, items, restarted, commit, cpu, runnable)

    def _behind(self, conn: sqlite3.Connection) -> int | None:
        """The background transactions committed so far (``meta.background_tx``; None before the schema exists)."""
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (BACKGROUND_KEY,)).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return None
            raise
        return int(row[0]) if row else 0

    def _waited(self, behind: int) -> None:
        with self._stats_lock:
            self.stats.behind_most = max(self.stats.behind_most, behind)
            if behind > 1:
                self.stats.behind_more_than_one += 1

    def _begin(self, conn: sqlite3.Connection, background: bool) -> bool:
        """One attempt at ``BEGIN IMMEDIATE``; False when the lock (or, for background, the gate) is held."""
        if background and not self._gate.try_exclusive():
            self._count("yields")
            return False
        try:
            conn.execute("BEGIN IMMEDIATE")
            return True
        except sqlite3.OperationalError as exc:
            if not is_locked(exc):
                raise
            self._count("background_busy" if background else "live_busy")
            return False
        finally:
            if background:
                self._gate.release()

    def _set_sync(self, conn: sqlite3.Connection, level: str) -> None:
        if getattr(self._local, "sync", None) != level:
            conn.execute(f"PRAGMA synchronous = {level}")
            self._local.sync = level

    def _write(
        self,
        conn: sqlite3.Connection,
        fn: Callable[[sqlite3.Connection], _T],
        background: bool,
        wait: bool,
        kind: str,
    ) -> _T:
        """Begin (waiting up to ``_wait_s`` when ``wait``, else one attempt), run ``fn``, commit.

        The hold (``BEGIN`` to ``COMMIT``) and the items ``fn`` counted are recorded under ``kind``
        (``WriteStats.holds``); so is a live write's wait for the lock (``live.wait``). The checkpoint due after
        the commit is the caller's (``_checkpoint``: a live write runs it after letting the gate go).

        Raises:
            sqlite3.OperationalError: ``database is locked``: the transaction could not begin in time.
        """
        asked = time.monotonic()
        deadline = asked + (self._wait_s() if wait else 0.0)
        step = STEP_S
        while not self._begin(conn, background):
            if time.monotonic() >= deadline:
                raise sqlite3.OperationalError("database is locked")
            time.sleep(step)
            step = min(step * 2, STEP_CAP_S)
        _tx.began, _tx.items = time.monotonic(), 0
        cpu, queued = time.thread_time(), _run_delay()
        log_txn.begin(conn)  # one write transaction, one log transaction (``log``)
        try:
            out = fn(conn)
            if background:
                conn.execute(_COUNT_BACKGROUND, (BACKGROUND_KEY,))
            before = wal_header.salt(self._wal)  # the write lock is held: only this commit can change it
            committing = time.monotonic()
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        done = time.monotonic()
        cpu, queued = time.thread_time() - cpu, _run_delay() - queued
        after = wal_header.salt(self._wal)
        restarted = before is not None and after is not None and after != before
        self._held(kind, done - _tx.began, _tx.items, restarted, done - committing, cpu, queued)
        if not background:
            self._held("live.wait", _tx.began - asked)
        self._count("background" if background else "live")
        return out

    def sync(self) -> None:
        """Make every commit so far durable: ``fsync`` the write-ahead log, holding no lock.

        Background work calls it when a unit of work ends (a build, a ``visible`` batch, a drain), so its
        transactions commit without a sync under the write lock (one fsync is 7-20 ms on a busy disk) and the
        ``accepted`` writes before them become durable too (module docstring).
        """
        try:
            fd = os.open(self._wal, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return  # no log: everything is in the file (SQLite synced it when it checkpointed)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._count("syncs")

    def _checkpoint(self, conn: sqlite3.Connection, past: int) -> bool:
        """Copy the write-ahead log into the file (``PASSIVE``: never waits) once it has grown by ``past`` bytes.

        Grown since the last checkpoint this process knows of: its own, or any process's (a checkpoint is what
        writes the database file in WAL mode, so its modification time tells), or past ``past`` from nothing once
        the log restarted (its frames, ``wal_header.end``, fell back). So a host's live write, whose threshold is
        ``LIVE_CHECKPOINT_BYTES``, checkpoints only when no background work has checkpointed meanwhile. A log
        that readers keep from restarting (the host's reads hold its frames when
        the next write comes) only grows: measured against its whole size, every background commit after it
        first passed ``past`` checkpointed again (362 checkpoints of ~11 ms at p50, two fsyncs each, beside 856
        build windows in one bench phase at 10k), keeping the file system's journal busy under the host's writes.

        Returns:
            True when a checkpoint ran and copied every frame of the log (the next write restarts it).
        """
        try:
            size = wal_header.end(self._wal)  # the current log's frames, not the file (it keeps its size)
            written = self.path.stat().st_mtime_ns  # only checkpoints write the file itself (WAL mode)
        except OSError:
            return False
        with self._stats_lock:
            if size < self._checkpointed_size:  # fewer frames than then: the log restarted since
                self._checkpointed_size = 0
            elif self._file_written not in (None, written):  # a checkpoint ran since (another process's too)
                self._checkpointed_size = size
            self._file_written = written
            if size <= self._checkpointed_size + past:  # not grown by ``past`` since the last one
                return False
            self._checkpointed_size = size
        started = time.monotonic()
        busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self._held("checkpoint", time.monotonic() - started)
        self._count("checkpoints")
        return not busy and frames > 0 and copied == frames

    def _restart_log(self, conn: sqlite3.Connection) -> None:
        """Restart the write-ahead log now, in a background transaction, after a checkpoint copied all of it.

        The first write transaction after such a checkpoint restarts the log: it writes the log's header again and
        fsyncs it, inside its commit, under the write lock (``wal_header``). When that first write was a host's
        live write, the host paid it. So the background writer that checkpointed writes that first transaction
        itself, at once (its body is the ``meta.background_tx`` count every background transaction writes). It
        makes one attempt, never waiting: when another writer holds the lock, or a live write waits (the gate),
        that writer's commit restarts the log (``Holds.restarts`` counts which kinds of transaction did). A
        reader still reading the copied frames makes SQLite append to the log instead, and no restart is due then.
        """
        try:
            self._write(conn, _restart_body, background=True, wait=False, kind="restart")
        except sqlite3.OperationalError as exc:
            if not is_locked(exc) or conn.in_transaction:
                raise

    def try_write(self, fn: Callable[[sqlite3.Connection], _T], kind: str = "index") -> _T | None:
        """Run ``fn(conn)`` in a background write transaction only if it can begin now; else None at once.

        For work that may wait for a later turn (folding accepted rows into the index on a read): it never
        waits on another writer, so a live-turn read is never held up by a worker's long build, and it stands
        back when a live write waits. It commits with ``synchronous = NORMAL`` (what it writes is derived), and
        checkpoints only past ``LIVE_CHECKPOINT_BYTES``, as a live write (a checkpoint took a host's read 20 ms
        at p50 under load: the workers' background writes checkpoint).

        Args:
            fn: The transaction's body.
            kind: What it writes, for ``WriteStats.holds``.

        Raises:
            EngineError: the file is corrupt (permanent), or any other SQLite failure.
        """
        conn = self.connection()
        try:
            self._set_sync(conn, "NORMAL")
            out = self._write(conn, fn, background=True, wait=False, kind=kind)
            self._checkpoint(conn, LIVE_CHECKPOINT_BYTES)  # a read's fold leaves checkpoints to the workers
            return out
        except sqlite3.OperationalError as exc:
            if is_locked(exc) and not conn.in_transaction:
                return None
            raise self._failed(exc) from None
        except sqlite3.Error as exc:
            raise self._failed(exc) from None

    def run(
        self,
        fn: Callable[[sqlite3.Connection], _T],
        *,
        write: bool = False,
        background: bool = False,
        relaxed: bool = False,
        kind: str | None = None,
    ) -> _T:
        """Run ``fn(conn)`` in one transaction, waiting in short steps while the file is locked.

        A write runs inside ``BEGIN IMMEDIATE`` (the write lock is taken up front) and commits; a read runs
        inside ``BEGIN`` so all its statements see one snapshot. On any error the transaction rolls back, so a
        failed call changes nothing.

        Args:
            fn: The transaction's body.
            write: Take the write lock.
            background: A background write (module docstring): it stands back while a live write waits, and
                commits with ``synchronous = NORMAL`` (its unit of work ends with ``sync``).
            relaxed: Commit with ``synchronous = NORMAL`` (a live ``accepted`` write; module docstring).
            kind: What a write writes, for ``WriteStats.holds`` (default ``background`` or ``live``).

        Raises:
            EngineUnavailable: the file stayed locked through ``busy_timeout_ms × RETRY_ATTEMPTS``.
            EngineError: the file is corrupt (permanent), or any other SQLite failure.
        """
        conn = self.connection()
        try:
            if not write:
                return self._retry(partial(self._read, conn, fn))
            self._set_sync(conn, "NORMAL" if relaxed or background else self.options.synchronous.upper())
            if background:
                out = self._write(conn, fn, background=True, wait=True, kind=kind or "background")
                if self._checkpoint(conn, CHECKPOINT_BYTES):
                    self._restart_log(conn)
                return out
            with self._gate.shared():
                before = self._behind(conn)  # the background commits it may wait for start after this
                if before is None:
                    out = self._write(conn, fn, background=False, wait=True, kind=kind or "live")
                else:
                    start = before

                    def counted(conn: sqlite3.Connection) -> _T:
                        self._waited(int(self._behind(conn) or 0) - start)
                        return fn(conn)

                    out = self._write(conn, counted, background=False, wait=True, kind=kind or "live")
            self._checkpoint(conn, LIVE_CHECKPOINT_BYTES)  # past the gate: background writes may begin meanwhile
            return out
        except sqlite3.Error as exc:
            raise self._failed(exc) from None

    @staticmethod
    def _read(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        conn.execute("BEGIN")
        try:
            out = fn(conn)
            conn.execute("COMMIT")
            return out
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

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
            EngineUnavailable: the file is locked through every retry.
            EngineError: the file cannot be read as a database (permanent), or any other SQLite failure.
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

"""``LocalDb``: the small SQLite file behind a machine-local store (outbox, coordination, dead letters).

One connection per thread (WAL, autocommit), ``BEGIN IMMEDIATE`` transactions that roll back on any error, and
every ``sqlite3.Error`` mapped to ``EngineUnavailable`` naming the store, so callers see one retryable error.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memory_core.errors import EngineUnavailable

__all__ = ["LocalDb"]

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

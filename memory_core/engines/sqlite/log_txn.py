"""Which log transaction this thread's open write transaction is (``log``): one SQLite transaction, one txn.

``Database`` calls ``begin`` as each write transaction starts; ``log.append`` opens a log transaction at the
first record after it (its id is that record's LSN) and reuses it for the rest. Kept apart from ``log`` so that
``connection`` needs nothing else of it.
"""

from __future__ import annotations

import sqlite3
import threading

__all__ = ["Slot", "begin", "slot"]


class Slot(threading.local):
    """Per thread: the connection of the open write transaction, its log txn and belief version (None: not yet)."""

    conn: int = 0
    txn: int | None = None
    version: int | None = None


slot = Slot()


def begin(conn: sqlite3.Connection) -> None:
    """A write transaction started on ``conn``: its first record opens a new log transaction."""
    slot.conn = id(conn)
    slot.txn = None
    slot.version = None

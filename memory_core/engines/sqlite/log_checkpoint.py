"""Compacting the SQLite log into a checkpoint (issue 19 item 7): fewer records, the same answers after it.

``compact(upto)`` folds the records up to a transaction's end at or before ``upto`` into ``log_checkpoint`` (each
memory's state there: status and tier; a memory removed by then has no row) and deletes them. Every ``as_of``
at or after the checkpoint answers as before: a memory's state at such an LSN is its last record at or before
it, which is either still in the log or the checkpoint's row (``log_ops.past`` reads both). An LSN before the
checkpoint can no longer be read or rolled back to (``InvalidRequest``), and ``history`` shows the records after
it. The newest record is never compacted, so LSNs keep rising. The state is the checkpoint folded with the
records after it (``memory_log.fold``'s ``base``; a test compares).
"""

from __future__ import annotations

import sqlite3
from typing import Final

from memory_core.memory_log import Held, MemoryStatus, RecordOp, Tier

from . import log
from .connection import tally

__all__ = ["COMPACT_STEP", "FLOOR_KEY", "checkpoint", "compact", "compact_step", "floor"]

FLOOR_KEY: Final = "log_checkpoint_lsn"
"""The ``meta`` key holding the checkpoint's LSN (absent: never compacted)."""
COMPACT_STEP: Final = 128
"""Most records one transaction of ``compact_step`` folds, unless one log transaction alone holds more (it is
never split): compacting is background work, and a live write may wait behind one step (memory-core choice)."""


def floor(conn: sqlite3.Connection) -> int:
    """The checkpoint's LSN: the earliest LSN a past state can still be read at (0: never compacted)."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (FLOOR_KEY,)).fetchone()
    return 0 if row is None else int(row[0])


def checkpoint(conn: sqlite3.Connection) -> dict[str, Held]:
    """Each memory's state at the checkpoint (the memories held then)."""
    return {
        str(i): Held(MemoryStatus(s), Tier(t))
        for i, s, t in conn.execute("SELECT id, status, tier FROM log_checkpoint")
    }


def compact(conn: sqlite3.Connection, upto: int) -> int:
    """Fold the records up to ``upto`` (settled; never the newest record) into the checkpoint; how many were.

    Runs in the caller's write transaction.
    """
    return _fold(conn, floor(conn), log.settled(conn, min(upto, log.current_lsn(conn) - 1)))


def compact_step(conn: sqlite3.Connection, upto: int, most: int | None = None) -> int:
    """``compact`` at most ``most`` (default ``COMPACT_STEP``) records past the checkpoint, or one log transaction.

    A log transaction longer than ``most`` is folded whole, never split.

    Runs in the caller's write transaction; call it again until it returns 0 to compact everything ``compact``
    would, one bounded transaction at a time (every step ends at a transaction's end, so ``as_of`` answers as
    before at each).
    """
    start = floor(conn)
    newest = log.current_lsn(conn) - 1
    target = min(upto, newest, start + (most or COMPACT_STEP))
    end = log.settled(conn, target)
    if end <= start and target < min(upto, newest):  # the next log transaction alone is longer than ``most``
        row = conn.execute(
            "SELECT max(lsn) FROM log WHERE txn = (SELECT txn FROM log WHERE lsn = ?)", (start + 1,)
        ).fetchone()
        end = int(row[0]) if row and row[0] is not None and int(row[0]) <= min(upto, newest) else start
    return _fold(conn, start, end)


def _fold(conn: sqlite3.Connection, start: int, end: int) -> int:
    """Fold the records in ``(start, end]`` (``end`` ends a transaction) into the checkpoint; how many went."""
    if end <= start:
        return 0
    last: dict[str, tuple[int, str, str | None, str | None]] = {}
    for item_id, lsn, op, status, tier in conn.execute(
        "SELECT id, lsn, op, status, tier FROM log WHERE lsn > ? AND lsn <= ? ORDER BY lsn", (start, end)
    ):
        last[str(item_id)] = (int(lsn), str(op), status, tier)  # each memory's last record up to ``end``
    for item_id, (lsn, op, status, tier) in last.items():
        if op == RecordOp.TOMBSTONE.value:
            conn.execute("DELETE FROM log_checkpoint WHERE id = ?", (item_id,))
        else:
            conn.execute(
                "INSERT INTO log_checkpoint (id, lsn, status, tier) VALUES (?, ?, ?, ?) ON CONFLICT(id) DO UPDATE "
                "SET lsn = excluded.lsn, status = excluded.status, tier = excluded.tier",
                (item_id, lsn, status, tier),
            )
    gone = conn.execute("DELETE FROM log WHERE lsn <= ?", (end,)).rowcount
    tally(int(gone))
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (FLOOR_KEY, str(end)),
    )
    return int(gone)

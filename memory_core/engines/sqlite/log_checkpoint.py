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

__all__ = ["FLOOR_KEY", "checkpoint", "compact", "floor"]

FLOOR_KEY: Final = "log_checkpoint_lsn"
"""The ``meta`` key holding the checkpoint's LSN (absent: never compacted)."""


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
    end = log.settled(conn, min(upto, log.current_lsn(conn) - 1))
    start = floor(conn)
    if end <= start:
        return 0
    last = conn.execute(
        "SELECT l.id, l.lsn, l.op, l.status, l.tier FROM log l JOIN (SELECT id, max(lsn) AS m FROM log "
        "WHERE lsn <= ? GROUP BY id) x ON l.lsn = x.m",
        (end,),
    ).fetchall()
    for item_id, lsn, op, status, tier in last:
        if op == RecordOp.TOMBSTONE.value:
            conn.execute("DELETE FROM log_checkpoint WHERE id = ?", (item_id,))
        else:
            conn.execute(
                "INSERT INTO log_checkpoint (id, lsn, status, tier) VALUES (?, ?, ?, ?) ON CONFLICT(id) DO UPDATE "
                "SET lsn = excluded.lsn, status = excluded.status, tier = excluded.tier",
                (item_id, lsn, status, tier),
            )
    gone = conn.execute("DELETE FROM log WHERE lsn <= ?", (end,)).rowcount
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (FLOOR_KEY, str(end)),
    )
    return int(gone)

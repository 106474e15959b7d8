"""The SQLite engine's log (seed 002, ``docs/log-model.md``): records, transactions, materialised state.

Every change to a memory (a stored item or a built belief) writes one row of ``log`` in the transaction that
makes it, so a record and the change it describes commit together or not at all (sqlite.org/lang_transaction.html).
One SQLite write transaction is one log transaction: its ``txn`` is the LSN of its first record, so LSNs and
transaction ids both rise, and the LSN where a transaction starts is its id (``settled`` needs no extra read).

The state is materialised beside the content, for reads: ``items.status`` and ``items.tier``; for beliefs,
``beliefs.status`` holds ``stale`` or ``retracted`` while the belief does not hold (its build status, active or
superseded, stays in its JSON state and comes back on a restore), and a belief's tier is ``long``. A record and
its materialised change are written by ``apply``, the only writer of both, so the materialised state is always
``memory_log.fold`` of the log (``materialised`` reads it back; a test compares).

Cost on the live write path: one ``INSERT`` per change into ``log`` (its LSN and time computed in the same
statement from the table's last row), in the same transaction, so no extra commit or fsync.

The transaction a record belongs to is tracked per thread (``log_txn``): ``Database`` calls ``begin`` when a
write transaction starts, and the first ``append`` after it opens a new log transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Final

from memory_core.beliefs import Belief
from memory_core.memory_log import Held, LogRecord, MemoryStatus, RecordOp, Tier

from . import log_txn
from .belief_index import bump_version
from .rows import now_us

__all__ = [
    "SCHEMA",
    "migrate",
    "apply",
    "append",
    "begin",
    "belief_status_column",
    "current_lsn",
    "held",
    "history",
    "lsn_at",
    "materialised",
    "page",
    "put",
    "records",
    "settled",
    "tombstones",
]

SCHEMA: Final = (
    "CREATE TABLE log (lsn INTEGER PRIMARY KEY, txn INTEGER NOT NULL, op TEXT NOT NULL, id TEXT NOT NULL, "
    "status TEXT, tier TEXT, reason TEXT, at INTEGER NOT NULL)",
    "CREATE INDEX log_id ON log(id, lsn)",
    "ALTER TABLE items ADD COLUMN status TEXT NOT NULL DEFAULT 'live'",
    "ALTER TABLE items ADD COLUMN tier TEXT NOT NULL DEFAULT 'short'",
    "ALTER TABLE items ADD COLUMN derived_from TEXT",
    "CREATE INDEX items_unserved ON items(seq) WHERE status != 'live' OR tier = 'archive'",
    "CREATE INDEX items_derived ON items(derived_from) WHERE derived_from IS NOT NULL",
    "CREATE TABLE log_checkpoint (id TEXT PRIMARY KEY, lsn INTEGER NOT NULL, status TEXT NOT NULL, "
    "tier TEXT NOT NULL) WITHOUT ROWID",
)
"""The migration adding the log (``schema``): the table, the materialised columns and their indexes.

``log_checkpoint`` holds, for the records compacted away (``log_checkpoint.compact``), each memory's state at
the checkpoint. ``items_unserved`` holds only the items a standard read leaves out (not live, or archived), so a
read finds them without a scan; ``items_derived`` finds what was built on an item (a learning's ``evidence``)."""

_BACKFILL: Final = (
    "UPDATE items SET tier = 'long' WHERE kind = 'learning' AND seq IN "
    "(SELECT seq FROM item_tags WHERE tag IN ('belief', 'consolidated'))",
    "UPDATE items SET derived_from = json_extract((SELECT b.item FROM bodies b WHERE b.seq = items.seq), "
    "'$.evidence') WHERE kind = 'learning'",
    "INSERT INTO log (txn, op, id, status, tier, reason, at) SELECT 1, 'put', id, 'live', tier, 'migrated', ? "
    "FROM items ORDER BY seq",
    "INSERT INTO log (txn, op, id, status, tier, reason, at) SELECT 1, 'put', id, 'live', 'long', 'migrated', ? "
    "FROM beliefs ORDER BY bid",
)

_APPEND: Final = (
    "INSERT INTO log (lsn, txn, op, id, status, tier, reason, at) SELECT n, coalesce(?, n), ?, ?, ?, ?, ?, "
    "max(?, last) FROM (SELECT coalesce(max(lsn), 0) + 1 AS n, "
    "coalesce((SELECT at FROM log ORDER BY lsn DESC LIMIT 1), 0) AS last FROM log) RETURNING lsn, at"
)
"""One record: its LSN follows the last, its time is never before the last record's (clocks of two processes
may disagree by a little), so LSN order is time order."""
_NOT_HOLDING: Final = {MemoryStatus.STALE.value, MemoryStatus.RETRACTED.value}
"""``beliefs.status`` values of a belief that does not hold (the others, ``active`` and ``superseded``, hold)."""


def migrate(conn: sqlite3.Connection) -> None:
    """Add the log to a database (``schema``'s migration): every held memory gets a ``put`` in transaction 1.

    The records the migration writes carry its own time (when each memory was first written is not logged).
    """
    for statement in SCHEMA:
        conn.execute(statement)
    at = now_us()
    for statement in _BACKFILL:
        conn.execute(statement, (at,) if "?" in statement else ())


_slot = log_txn.slot
begin = log_txn.begin


def append(
    conn: sqlite3.Connection, op: RecordOp, item_id: str, state: Held | None, reason: str | None = None
) -> LogRecord:
    """Write one record in the caller's write transaction (the materialised state is the caller's: ``apply``)."""
    txn = _slot.txn if _slot.conn == id(conn) else None
    row = conn.execute(
        _APPEND,
        (
            txn,
            op.value,
            item_id,
            state.status.value if state else None,
            state.tier.value if state else None,
            reason,
            now_us(),
        ),
    ).fetchone()
    lsn, at = int(row[0]), int(row[1])
    if txn is None:
        _slot.conn, _slot.txn, txn = id(conn), lsn, lsn
    return LogRecord(
        lsn=lsn,
        txn=txn,
        op=op,
        id=item_id,
        status=state.status if state else None,
        tier=state.tier if state else None,
        reason=reason,
        at=at,
    )


def put(conn: sqlite3.Connection, item_id: str, tier: Tier, reason: str | None = None) -> None:
    """A new memory was written (its row is the caller's): one ``put`` record."""
    append(conn, RecordOp.PUT, item_id, Held(MemoryStatus.LIVE, tier), reason)


def tombstones(conn: sqlite3.Connection, ids: Iterable[str], reason: str) -> None:
    """The memories' content was removed (forget, erase, retention): one ``tombstone`` record each."""
    for item_id in ids:
        append(conn, RecordOp.TOMBSTONE, item_id, None, reason)


def _belief_version(conn: sqlite3.Connection) -> int:
    """The belief version this transaction stamps the rows it changes with (one bump per transaction)."""
    if _slot.conn != id(conn) or _slot.version is None:
        _slot.conn = id(conn)
        _slot.version = bump_version(conn)
    return _slot.version


def belief_status_column(status: MemoryStatus, state_json: str) -> str:
    """``beliefs.status`` for a belief whose log status is ``status``: its build status while it holds."""
    if status is MemoryStatus.LIVE:
        return Belief.from_state(json.loads(state_json)).status.value
    return status.value


def apply(conn: sqlite3.Connection, op: RecordOp, item_id: str, state: Held, reason: str | None) -> LogRecord:
    """Change one held memory's status or tier and write its record, in the caller's transaction.

    Items take ``status`` and ``tier``; a belief takes the status (its tier stays ``long``) and is stamped with
    a new belief version, so every process's belief index reloads it (``belief_index``).
    """
    cur = conn.execute(
        "UPDATE items SET status = ?, tier = ? WHERE id = ?", (state.status.value, state.tier.value, item_id)
    )
    if cur.rowcount == 0:
        row = conn.execute("SELECT state FROM beliefs WHERE id = ?", (item_id,)).fetchone()
        if row is not None:
            conn.execute(
                "UPDATE beliefs SET status = ?, version = ? WHERE id = ?",
                (belief_status_column(state.status, str(row[0])), _belief_version(conn), item_id),
            )
    return append(conn, op, item_id, state, reason)


def _belief_held(status: str) -> Held:
    return Held(MemoryStatus(status) if status in _NOT_HOLDING else MemoryStatus.LIVE, Tier.LONG)


def held(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, Held]:
    """The materialised state of the held memories among ``ids`` (items, then beliefs), in the order named."""
    wanted = json.dumps(list(dict.fromkeys(ids)))
    found: dict[str, Held] = {}
    for item_id, status, tier in conn.execute(
        "SELECT id, status, tier FROM items WHERE id IN (SELECT value FROM json_each(?))", (wanted,)
    ):
        found[str(item_id)] = Held(MemoryStatus(status), Tier(tier))
    for item_id, status in conn.execute(
        "SELECT id, status FROM beliefs WHERE id IN (SELECT value FROM json_each(?)) AND status NOT LIKE 'pending:%'",
        (wanted,),
    ):
        found[str(item_id)] = _belief_held(str(status))
    return {i: found[i] for i in dict.fromkeys(ids) if i in found}


def materialised(conn: sqlite3.Connection) -> dict[str, Held]:
    """Every held memory's materialised state (for the test that compares it with ``fold`` of the log)."""
    out = {str(i): Held(MemoryStatus(s), Tier(t)) for i, s, t in conn.execute("SELECT id, status, tier FROM items")}
    published = "SELECT id, status FROM beliefs WHERE status NOT LIKE 'pending:%'"  # ``beliefs_store.PENDING``
    out.update({str(i): _belief_held(str(s)) for i, s in conn.execute(published)})
    return out


# reading the log ----------------------------------------------------------------------------------------
def _record(row: Sequence[object]) -> LogRecord:
    lsn, txn, op, item_id, status, tier, reason, at = row
    return LogRecord(
        lsn=int(str(lsn)),
        txn=int(str(txn)),
        op=RecordOp(str(op)),
        id=str(item_id),
        status=None if status is None else MemoryStatus(str(status)),
        tier=None if tier is None else Tier(str(tier)),
        reason=None if reason is None else str(reason),
        at=int(str(at)),
    )


_COLUMNS: Final = "lsn, txn, op, id, status, tier, reason, at"


def current_lsn(conn: sqlite3.Connection) -> int:
    """The LSN of the last record (0 for an empty log)."""
    return int(conn.execute("SELECT coalesce(max(lsn), 0) FROM log").fetchone()[0])


def page(conn: sqlite3.Connection, since: int, limit: int, upto: int | None = None) -> tuple[list[LogRecord], bool]:
    """Records after ``since`` (and at most ``upto``), in LSN order, at most ``limit``; and whether more follow."""
    end = current_lsn(conn) if upto is None else upto
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM log WHERE lsn > ? AND lsn <= ? ORDER BY lsn LIMIT ?", (since, end, limit + 1)
    ).fetchall()
    return [_record(r) for r in rows[:limit]], len(rows) > limit


def records(conn: sqlite3.Connection) -> list[LogRecord]:
    """The whole log, in LSN order (tests and small stores: ``memory_log.fold`` of it is the state)."""
    return [_record(r) for r in conn.execute(f"SELECT {_COLUMNS} FROM log ORDER BY lsn")]


def history(conn: sqlite3.Connection, item_id: str, upto: int | None = None) -> tuple[LogRecord, ...]:
    """Every record about ``item_id`` (at most LSN ``upto``), in LSN order (index ``log_id``)."""
    end = current_lsn(conn) if upto is None else upto
    rows = conn.execute(f"SELECT {_COLUMNS} FROM log WHERE id = ? AND lsn <= ? ORDER BY lsn", (item_id, end))
    return tuple(_record(r) for r in rows)


def lsn_at(conn: sqlite3.Connection, at_us: int) -> int:
    """The last LSN written at or before ``at_us`` (0: none): one pass over the log (for commands, not hot paths)."""
    return int(conn.execute("SELECT coalesce(max(lsn), 0) FROM log WHERE at <= ?", (at_us,)).fetchone()[0])


def settled(conn: sqlite3.Connection, lsn: int) -> int:
    """The last LSN at or before ``lsn`` that ends a transaction (``memory_log.settled``, read from the file).

    A transaction's id is its first LSN, so when the record after ``lsn`` belongs to a transaction begun at or
    before ``lsn``, that transaction is cut off and the state is the one before it.
    """
    row = conn.execute("SELECT txn FROM log WHERE lsn = ?", (lsn + 1,)).fetchone()
    if row is not None and int(row[0]) <= lsn:
        return int(row[0]) - 1
    return lsn

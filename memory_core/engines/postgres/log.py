"""The PostgreSQL engine's log (seed 002, ``docs/log-model.md``): records, transactions, materialised state.

The design is the SQLite engine's (``engines/sqlite/log.py``): every change to a memory (a stored item or a
built belief) writes one row of ``log`` in the transaction that makes it, so a record and the change it
describes commit together or not at all; one database transaction is one log transaction, whose ``txn`` is the
LSN of its first record; the state is materialised beside the content (``items.status``, ``items.tier``,
``beliefs.log_status``) and only ``apply`` writes both a record and its state change, so the materialised
state is always ``memory_log.fold`` of the log (``materialised`` reads it back; a test compares).

**LSN order is commit order, as every reader sees it.** LSNs come from one counter row, ``log_head``, which a
writing transaction updates in the statement that inserts its records (a data-modifying ``WITH``, PostgreSQL
docs §7.8.4: no extra round trip). The update takes the row's lock until the transaction ends (§13.3.2), so a
second writer of the log waits there until the first has committed or rolled back, and then reads the
committed counter (READ COMMITTED re-reads the updated row, §13.2.1). PostgreSQL makes a transaction visible
before it releases its locks, so any snapshot that sees a transaction's records sees every record with a lower
LSN: readers always see a gap-free prefix ``1..n`` of the log, and LSNs have no gaps (a rolled-back
transaction rolls its counter update back too). The cost is that transactions writing the log commit one at a
time from their first record on; every write keeps that window to its last statement (a store's single
statement, the records of a build at its end), see ``docs/log-model.md``. Transactions that write no record
(a replayed store, a read) never touch the row.

The head row also holds the ``xid`` of the transaction that last advanced it and that transaction's ``txn``,
so a later statement of the same transaction continues its log transaction, and ``at``, the last record's time
(µs, the server's clock, never decreasing: every host writing the database shares it), so a time names an LSN.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from memory_core.memory_log import Held, LogRecord, MemoryStatus, RecordOp, Tier

from .driver import Conn
from .schema import SCHEMA

__all__ = [
    "DDL",
    "LOGGED",
    "append",
    "apply",
    "current_lsn",
    "held",
    "history",
    "lock_head",
    "logged",
    "materialised",
    "migrate",
    "page",
    "records",
    "settled",
]

DDL: Final = (
    f"CREATE TABLE {SCHEMA}.log (lsn bigint PRIMARY KEY, txn bigint NOT NULL, op text NOT NULL, "
    "id text NOT NULL, status text, tier text, reason text, at bigint NOT NULL)",
    f"CREATE INDEX log_id ON {SCHEMA}.log (id, lsn)",
    f"CREATE TABLE {SCHEMA}.log_head (one boolean PRIMARY KEY DEFAULT true CHECK (one), lsn bigint NOT NULL, "
    "txn bigint NOT NULL, xid xid8 NOT NULL DEFAULT '0', at bigint NOT NULL)",
    f"ALTER TABLE {SCHEMA}.items ADD COLUMN status text NOT NULL DEFAULT 'live'",
    f"ALTER TABLE {SCHEMA}.items ADD COLUMN tier text NOT NULL DEFAULT 'short'",
    f"ALTER TABLE {SCHEMA}.items ADD COLUMN derived_from text",
    f"CREATE INDEX items_unserved ON {SCHEMA}.items (seq) WHERE status <> 'live' OR tier = 'archive'",
    f"CREATE INDEX items_derived ON {SCHEMA}.items (derived_from) WHERE derived_from IS NOT NULL",
    f"ALTER TABLE {SCHEMA}.beliefs ADD COLUMN log_status text",
)
"""The migration adding the log: the table, its head row, the materialised columns and their indexes.

``beliefs.log_status`` is a belief's status in the log (``live``, ``stale``, ``retracted``; NULL while the
build that made it has not logged it yet, which only that build's own transaction can see); ``beliefs.status``
stays its build status (``active``, ``superseded``). A built belief's tier is ``long``."""

_BACKFILL: Final = (
    f"UPDATE {SCHEMA}.items SET tier = 'long' WHERE kind = 'learning' AND tags && ARRAY['belief', 'consolidated']",
    f"UPDATE {SCHEMA}.items SET derived_from = item::jsonb ->> 'evidence' WHERE kind = 'learning'",
    f"UPDATE {SCHEMA}.beliefs SET log_status = 'live'",
    f"INSERT INTO {SCHEMA}.log (lsn, txn, op, id, status, tier, reason, at) "
    "SELECT row_number() OVER (ORDER BY o, k), 1, 'put', id, 'live', tier, 'migrated', %(at)s FROM "
    f"(SELECT 0 AS o, seq AS k, id, tier FROM {SCHEMA}.items UNION ALL "
    f"SELECT 1, bid, id, 'long' FROM {SCHEMA}.beliefs) s",
    f"INSERT INTO {SCHEMA}.log_head (lsn, txn, at) SELECT count(*), 1, %(at)s FROM {SCHEMA}.log",
)

CLOCK: Final = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
"""The server's clock in µs: one clock for every host writing the database."""


def migrate(conn: Conn) -> None:
    """Add the log to a database (``schema``'s migration): every held memory gets a ``put`` in transaction 1."""
    for statement in DDL:
        conn.execute(statement)  # DDL built from constants only
    at = conn.execute(f"SELECT {CLOCK}").fetchone()
    for statement in _BACKFILL:
        conn.execute(statement, {"at": int(at[0]) if at else 0})


def logged(source: str, order: str = "s.o") -> str:
    """The CTEs that write one record per row of CTE ``source``, in ``order`` (its rows aliased ``s``).

    ``source`` has the columns ``op, id, status, tier, reason`` (text); the CTEs ``_head`` (the counter row,
    advanced only when ``source`` has rows) and ``_log`` (the records, ``RETURNING`` every column) follow it in a
    ``WITH``. Put them in the statement that makes the change, so the records cost no round trip.
    """
    return (
        f"_head AS (UPDATE {SCHEMA}.log_head SET lsn = lsn + (SELECT count(*) FROM {source}), "
        "txn = CASE WHEN xid = pg_current_xact_id() THEN txn ELSE lsn + 1 END, xid = pg_current_xact_id(), "
        f"at = greatest(at, {CLOCK}) WHERE EXISTS (SELECT 1 FROM {source}) RETURNING lsn, txn, at), "
        f"_log AS (INSERT INTO {SCHEMA}.log (lsn, txn, op, id, status, tier, reason, at) "
        f"SELECT h.lsn - (SELECT count(*) FROM {source}) + row_number() OVER (ORDER BY {order}), h.txn, s.op, s.id, "
        f"s.status, s.tier, s.reason, h.at FROM _head h, {source} s "
        "RETURNING lsn, txn, op, id, status, tier, reason, at)"
    )


LOGGED: Final = "SELECT lsn, txn, op, id, status, tier, reason, at FROM _log ORDER BY lsn"
"""The final ``SELECT`` of a statement built with ``logged``: its records."""

_ROWS: Final = (
    "_src AS (SELECT * FROM unnest(%(op)s::text[], %(id)s::text[], %(status)s::text[], %(tier)s::text[], "
    "%(reason)s::text[]) WITH ORDINALITY AS s(op, id, status, tier, reason, o))"
)


def _params(rows: Sequence[tuple[RecordOp, str, Held | None, str | None]]) -> dict[str, Any]:
    return {
        "op": [op.value for op, _, _, _ in rows],
        "id": [item_id for _, item_id, _, _ in rows],
        "status": [None if h is None else h.status.value for _, _, h, _ in rows],
        "tier": [None if h is None else h.tier.value for _, _, h, _ in rows],
        "reason": [why for _, _, _, why in rows],
    }


def append(conn: Conn, rows: Sequence[tuple[RecordOp, str, Held | None, str | None]]) -> list[LogRecord]:
    """Write one record per ``(op, id, state after, reason)``, in order, in the caller's transaction.

    The materialised state is the caller's (``apply`` writes both). One statement.
    """
    if not rows:
        return []
    sql = f"WITH {_ROWS}, {logged('_src')} {LOGGED}"
    return [_record(r) for r in conn.execute(sql, _params(rows)).fetchall()]


def apply(conn: Conn, rows: Sequence[tuple[RecordOp, str, Held, str | None]]) -> list[LogRecord]:
    """Change held memories' status or tier and write their records, in order: one statement.

    Items take ``status`` and ``tier``; a belief takes the status (its tier stays ``long``); an id named twice
    (a rollback's move and status change) ends in its last row's state.
    """
    if not rows:
        return []
    sql = (
        f"WITH {_ROWS}, _last AS (SELECT DISTINCT ON (id) id, status, tier FROM _src ORDER BY id, o DESC), "
        f"_items AS (UPDATE {SCHEMA}.items i SET status = s.status, tier = s.tier FROM _last s WHERE i.id = s.id), "
        f"_beliefs AS (UPDATE {SCHEMA}.beliefs b SET log_status = s.status FROM _last s WHERE b.id = s.id), "
        f"{logged('_src')} {LOGGED}"
    )
    return [_record(r) for r in conn.execute(sql, _params(rows)).fetchall()]


def lock_head(conn: Conn) -> None:
    """Take the log's head lock now (a ``retract``/``rollback``/``move`` reads the state it changes under it)."""
    conn.execute(f"SELECT 1 FROM {SCHEMA}.log_head FOR UPDATE")


def held(conn: Conn, ids: Sequence[str]) -> dict[str, Held]:
    """The materialised state of the held memories among ``ids`` (items, then logged beliefs), in order named."""
    wanted = list(dict.fromkeys(ids))
    found: dict[str, Held] = {}
    for item_id, status, tier in conn.execute(
        f"SELECT id, status, tier FROM {SCHEMA}.items WHERE id = ANY(%s::text[]) "
        f"UNION ALL SELECT id, log_status, 'long' FROM {SCHEMA}.beliefs "
        "WHERE id = ANY(%s::text[]) AND log_status IS NOT NULL",
        (wanted, wanted),
    ):
        found[str(item_id)] = Held(MemoryStatus(str(status)), Tier(str(tier)))
    return {i: found[i] for i in wanted if i in found}


def materialised(conn: Conn) -> dict[str, Held]:
    """Every held memory's materialised state (for the test that compares it with ``fold`` of the log)."""
    rows = conn.execute(
        f"SELECT id, status, tier FROM {SCHEMA}.items UNION ALL "
        f"SELECT id, log_status, 'long' FROM {SCHEMA}.beliefs WHERE log_status IS NOT NULL"
    )
    return {str(i): Held(MemoryStatus(str(s)), Tier(str(t))) for i, s, t in rows}


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


def current_lsn(conn: Conn) -> int:
    """The LSN of the last committed record (0 for an empty log): the head row, one read."""
    row = conn.execute(f"SELECT lsn FROM {SCHEMA}.log_head").fetchone()
    return 0 if row is None else int(row[0])


def page(conn: Conn, since: int, limit: int, upto: int | None = None) -> tuple[list[LogRecord], bool]:
    """Records after ``since`` (and at most ``upto``), in LSN order, at most ``limit``; and whether more follow."""
    end = current_lsn(conn) if upto is None else upto
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM {SCHEMA}.log WHERE lsn > %s AND lsn <= %s ORDER BY lsn LIMIT %s",
        (since, end, limit + 1),
    ).fetchall()
    return [_record(r) for r in rows[:limit]], len(rows) > limit


def records(conn: Conn) -> list[LogRecord]:
    """The whole log, in LSN order (tests and small stores: ``memory_log.fold`` of it is the state)."""
    return [_record(r) for r in conn.execute(f"SELECT {_COLUMNS} FROM {SCHEMA}.log ORDER BY lsn")]


def history(conn: Conn, item_id: str, upto: int | None = None) -> tuple[LogRecord, ...]:
    """Every record about ``item_id`` (at most LSN ``upto``), in LSN order (index ``log_id``)."""
    end = current_lsn(conn) if upto is None else upto
    rows = conn.execute(f"SELECT {_COLUMNS} FROM {SCHEMA}.log WHERE id = %s AND lsn <= %s ORDER BY lsn", (item_id, end))
    return tuple(_record(r) for r in rows)


def settled(conn: Conn, lsn: int) -> int:
    """The last LSN at or before ``lsn`` that ends a transaction (``memory_log.settled``, read from the table)."""
    row = conn.execute(f"SELECT txn FROM {SCHEMA}.log WHERE lsn = %s", (lsn + 1,)).fetchone()
    if row is not None and int(row[0]) <= lsn:
        return int(row[0]) - 1
    return lsn

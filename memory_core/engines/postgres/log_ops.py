"""The PostgreSQL engine's log writes and past states: retract, rollback, move, build commits, state at an LSN.

The rules are those of ``docs/log-model.md`` and of the reference engine, the executable spec
(``engines/reference.py``), as on SQLite (``engines/sqlite/log_ops.py``); the plan of a rollback is the pure
``memory_log.compensation``. Each write runs in the caller's transaction and takes the log's head lock
(``log.lock_head``) before it reads the state it changes, so no other log writer changes that state between the
read and its records: the records form one log transaction, and the plan holds when they commit.

Provenance (``derived_from``): a learning stored with an ``evidence`` naming a memory (``items.derived_from``),
and a built belief's evidence rows (``belief_evidence``). ``derived`` follows both, transitively.

A past state costs what changed since, not the store's size: the memories with records after the LSN (the
primary key's range) are the only ones whose state then differs from now; each one's state then is its last
record at or before it (index ``log_id``).
"""

from __future__ import annotations

from collections.abc import Sequence

from memory_core.engines.sqlite.log_ops import Past  # the same pure state of a past LSN
from memory_core.engines.sqlite.rows import ns_of_key
from memory_core.memory_log import Held, LogChange, MemoryStatus, RecordOp, Tier, compensation

from . import log
from .driver import Conn
from .schema import SCHEMA

__all__ = ["Past", "commit_build", "derived", "move", "past", "publish", "retract", "rollback"]


def derived(conn: Conn, roots: Sequence[str]) -> list[str]:
    """Held memories built on ``roots``, transitively, in the order reached (``roots`` left out)."""
    reached = set(roots)
    out: list[str] = []
    frontier = list(dict.fromkeys(roots))
    while frontier:
        rows = conn.execute(
            f"(SELECT id FROM {SCHEMA}.items WHERE derived_from = ANY(%(f)s::text[]) ORDER BY seq) UNION ALL "
            f"(SELECT b.id FROM {SCHEMA}.beliefs b WHERE b.bid IN (SELECT e.bid FROM {SCHEMA}.belief_evidence e "
            "WHERE e.item_id = ANY(%(f)s::text[])) AND b.log_status IS NOT NULL ORDER BY b.bid)",
            {"f": frontier},
        ).fetchall()
        frontier = [i for i in dict.fromkeys(str(r[0]) for r in rows) if i not in reached]
        reached.update(frontier)
        out.extend(frontier)
    return out


def retract(conn: Conn, ids: Sequence[str], reason: str) -> LogChange:
    """Retract the held memories named (content kept) and make all built on them ``stale``: one transaction.

    Unknown, forgotten and already retracted ids are left alone; a memory already stale stays stale.
    """
    log.lock_head(conn)
    now = log.held(conn, ids)
    targets = [i for i in now if now[i].status is not MemoryStatus.RETRACTED]
    if not targets:
        return LogChange()
    plan: list[tuple[RecordOp, str, Held, str | None]] = [
        (RecordOp.RETRACT, i, Held(MemoryStatus.RETRACTED, now[i].tier), reason) for i in targets
    ]
    why = f"built on retracted memory ({reason})"
    for item_id, state in log.held(conn, derived(conn, targets)).items():
        if state.status is MemoryStatus.LIVE:
            plan.append((RecordOp.STALE, item_id, Held(MemoryStatus.STALE, state.tier), why))
    records = log.apply(conn, plan)
    return LogChange(txn=records[0].txn, records=tuple(records))


def move(conn: Conn, ids: Sequence[str], tier: Tier, reason: str) -> LogChange:
    """Move the held items named to ``tier`` (status unchanged): one transaction.

    Built beliefs stay ``long`` (their reads have no tier filter), so belief ids are left alone, as are unknown
    ids and items already there.
    """
    log.lock_head(conn)
    rows = conn.execute(
        f"SELECT id, status FROM {SCHEMA}.items WHERE id = ANY(%s::text[]) AND tier <> %s",
        (list(dict.fromkeys(ids)), tier.value),
    ).fetchall()
    found = {str(i): MemoryStatus(str(s)) for i, s in rows}
    targets = [i for i in dict.fromkeys(ids) if i in found]
    if not targets:
        return LogChange()
    records = log.apply(conn, [(RecordOp.MOVE, i, Held(found[i], tier), reason) for i in targets])
    return LogChange(txn=records[0].txn, records=tuple(records))


def publish(conn: Conn, belief_ids: Sequence[str], reason: str) -> list[str]:
    """Log the beliefs named that no record names yet (a ``put``, tier ``long``); the ids logged.

    Runs in the transaction that created them (a build, a rebuild after a forget), so they become visible
    together with their records.
    """
    rows = conn.execute(
        f"SELECT id FROM {SCHEMA}.beliefs WHERE id = ANY(%s::text[]) AND log_status IS NULL ORDER BY bid",
        (list(dict.fromkeys(belief_ids)),),
    ).fetchall()
    fresh = [str(r[0]) for r in rows]
    live = Held(MemoryStatus.LIVE, Tier.LONG)
    log.apply(conn, [(RecordOp.PUT, i, live, reason) for i in fresh])
    return fresh


def commit_build(conn: Conn, ns: str, kind: str, changed: Sequence[str]) -> int:
    """End a build in its own transaction: one log transaction of its records; how many it wrote.

    New beliefs get a ``put`` (tier ``long``) and beliefs the build merged new live evidence into that were
    stale or retracted get a ``restore`` (``docs/log-model.md`` rule 4), each naming the scope and the LSN its
    inputs were written by: the build's transaction holds the head lock from here to its commit, so every item
    it read was logged at or before the LSN just before its first record. A build that fails commits nothing.
    """
    if not changed:
        return 0
    log.lock_head(conn)
    inputs = log.current_lsn(conn)
    why = f"built from {_scope_name(ns)}#{kind} up to LSN {inputs}"
    rows = conn.execute(
        f"SELECT id, log_status FROM {SCHEMA}.beliefs WHERE id = ANY(%s::text[]) "
        "AND (log_status IS NULL OR log_status <> 'live') ORDER BY bid",
        (list(dict.fromkeys(changed)),),
    ).fetchall()
    live = Held(MemoryStatus.LIVE, Tier.LONG)
    plan: list[tuple[RecordOp, str, Held, str | None]] = [
        (RecordOp.PUT if status is None else RecordOp.RESTORE, str(hid), live, why) for hid, status in rows
    ]
    return len(log.apply(conn, plan))


def _scope_name(ns: str) -> str:
    return str(ns_of_key(ns))


def past(conn: Conn, lsn: int) -> Past:
    """The state at ``lsn`` (settled to a transaction's end) as a difference from now."""
    end = log.settled(conn, lsn)
    changed: dict[str, Held | None] = {}
    forgotten: set[str] = set()
    for item_id, op in conn.execute(f"SELECT id, op FROM {SCHEMA}.log WHERE lsn > %s ORDER BY lsn", (end,)):
        changed.setdefault(str(item_id), None)
        if op == RecordOp.TOMBSTONE.value:
            forgotten.add(str(item_id))
    for item_id, op, status, tier in conn.execute(
        f"SELECT DISTINCT ON (id) id, op, status, tier FROM {SCHEMA}.log WHERE lsn <= %s AND id = ANY(%s::text[]) "
        "ORDER BY id, lsn DESC",
        (end, list(changed)),
    ):
        tombstone = op == RecordOp.TOMBSTONE.value
        changed[str(item_id)] = None if tombstone else Held(MemoryStatus(str(status)), Tier(str(tier)))
    return Past(end=end, then=changed, forgotten=frozenset(forgotten))


def rollback(conn: Conn, to_lsn: int, reason: str) -> LogChange:
    """Take the state back to ``to_lsn`` with compensating records, in one transaction (nothing is erased).

    Memories written after it are retracted; memories forgotten since cannot come back: they are listed in
    ``unrecoverable`` and the ``note`` says so.
    """
    log.lock_head(conn)
    was = past(conn, to_lsn)
    then = {i: h for i, h in was.then.items() if h is not None}
    now = log.held(conn, list(was.then))
    ops, unrecoverable = compensation(then, now, set(was.forgotten))
    note = None
    if unrecoverable:
        note = (
            f"{len(unrecoverable)} memories held at LSN {to_lsn} were forgotten since and cannot come back: "
            "the log keeps only their tombstones"
        )
    if not ops:
        return LogChange(unrecoverable=tuple(unrecoverable), note=note)
    why = f"rollback to LSN {to_lsn}: {reason}"
    records = log.apply(conn, [(op, item_id, state, why) for op, item_id, state in ops])
    return LogChange(txn=records[0].txn, records=tuple(records), unrecoverable=tuple(unrecoverable), note=note)

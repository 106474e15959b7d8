"""The SQLite engine's log writes and past states: retract, rollback, move, and the state at an LSN.

Each write runs inside the caller's ``BEGIN IMMEDIATE`` transaction, so its records form one log transaction
(``log``). The rules are those of ``docs/log-model.md`` and of the reference engine, the executable spec
(``engines/reference.py``); the plan of a rollback is the pure ``memory_log.compensation``.

Provenance (``derived_from``): a learning stored with an ``evidence`` naming a memory (``items.derived_from``),
and a built belief's evidence rows (``belief_evidence``). ``derived`` follows both, transitively.

A past state costs what changed since, not the store's size: the memories with records after the LSN (an index
range on ``log``) are the only ones whose state then differs from now, and each one's state then is its last
record at or before it (index ``log_id``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from memory_core.errors import InvalidRequest
from memory_core.memory_log import Held, LogChange, MemoryStatus, RecordOp, Tier, compensation

from . import log, log_checkpoint

__all__ = ["Past", "derived", "move", "past", "retract", "rollback"]


def derived(conn: sqlite3.Connection, roots: Sequence[str]) -> list[str]:
    """Held memories built on ``roots``, transitively, in the order reached (``roots`` left out)."""
    reached = set(roots)
    out: list[str] = []
    frontier = list(dict.fromkeys(roots))
    while frontier:
        names = json.dumps(frontier)
        found = [
            str(r[0])
            for r in conn.execute(
                "SELECT id FROM items WHERE derived_from IN (SELECT value FROM json_each(?)) ORDER BY seq", (names,)
            )
        ]
        found += [
            str(r[0])
            for r in conn.execute(
                "SELECT b.id FROM beliefs b WHERE b.bid IN (SELECT e.bid FROM belief_evidence e "
                "WHERE e.item_id IN (SELECT value FROM json_each(?))) ORDER BY b.bid",
                (names,),
            )
        ]
        frontier = [i for i in dict.fromkeys(found) if i not in reached]
        reached.update(frontier)
        out.extend(frontier)
    return out


def retract(conn: sqlite3.Connection, ids: Sequence[str], reason: str) -> LogChange:
    """Retract the held memories named (content kept) and make all built on them ``stale``: one transaction.

    Unknown, forgotten and already retracted ids are left alone; a memory already stale stays stale.
    """
    now = log.held(conn, ids)
    targets = [i for i in now if now[i].status is not MemoryStatus.RETRACTED]
    if not targets:
        return LogChange()
    records = [log.apply(conn, RecordOp.RETRACT, i, Held(MemoryStatus.RETRACTED, now[i].tier), reason) for i in targets]
    below = derived(conn, targets)
    why = f"built on retracted memory ({reason})"
    for item_id, state in log.held(conn, below).items():
        if state.status is MemoryStatus.LIVE:
            records.append(log.apply(conn, RecordOp.STALE, item_id, Held(MemoryStatus.STALE, state.tier), why))
    return LogChange(txn=records[0].txn, records=tuple(records))


def move(conn: sqlite3.Connection, ids: Sequence[str], tier: Tier, reason: str) -> LogChange:
    """Move the held items named to ``tier`` (status unchanged): one transaction.

    Built beliefs stay ``long`` (their reads have no tier filter), so belief ids are left alone, as are unknown
    ids and items already there.
    """
    wanted = json.dumps(list(dict.fromkeys(ids)))
    rows = conn.execute(
        "SELECT id, status FROM items WHERE id IN (SELECT value FROM json_each(?)) AND tier != ?", (wanted, tier.value)
    ).fetchall()
    found = {str(i): MemoryStatus(str(s)) for i, s in rows}
    targets = [i for i in dict.fromkeys(ids) if i in found]
    if not targets:
        return LogChange()
    records = tuple(log.apply(conn, RecordOp.MOVE, i, Held(found[i], tier), reason) for i in targets)
    return LogChange(txn=records[0].txn, records=records)


@dataclass(frozen=True)
class Past:
    """The state at a settled LSN, as it differs from now.

    Attributes:
        end: The settled LSN (``log.settled``): the state after its transaction.
        then: Each memory with records after ``end`` → its state at ``end`` (None: not held then), in the
            order of its first record after ``end``. Every other memory is as it is now.
        forgotten: Those of them whose content was removed after ``end`` (a tombstone since).
    """

    end: int
    then: dict[str, Held | None]
    forgotten: frozenset[str]

    def ids(self, served: bool) -> list[str]:
        """The changed memories that were (``served``) or were not live at ``end``."""
        return [i for i, h in self.then.items() if (h is not None and h.status is MemoryStatus.LIVE) == served]


def past(conn: sqlite3.Connection, lsn: int, field: str = "lsn") -> Past:
    """The state at ``lsn`` (settled to a transaction's end) as a difference from now.

    A memory's state then is its last record at or before it, else its row in the checkpoint the records up to
    it were compacted into (``log_checkpoint``).

    Raises:
        InvalidRequest: ``field``: ``lsn`` is before the log's checkpoint (its records were compacted).
    """
    start = log_checkpoint.floor(conn)
    if lsn < start:
        raise InvalidRequest(f"LSN {lsn} is before the log's checkpoint at LSN {start} (compacted)", field=field)
    end = log.settled(conn, lsn)
    changed: dict[str, Held | None] = {}
    forgotten: set[str] = set()
    for item_id, op in conn.execute("SELECT id, op FROM log WHERE lsn > ? ORDER BY lsn", (end,)):
        changed.setdefault(str(item_id), None)
        if op == RecordOp.TOMBSTONE.value:
            forgotten.add(str(item_id))
    names = json.dumps(list(changed))
    for item_id, status, tier in conn.execute(
        "SELECT id, status, tier FROM log_checkpoint WHERE id IN (SELECT value FROM json_each(?))", (names,)
    ):
        changed[str(item_id)] = Held(MemoryStatus(str(status)), Tier(str(tier)))
    for item_id, op, status, tier in conn.execute(
        "SELECT l.id, l.op, l.status, l.tier FROM log l JOIN (SELECT id, max(lsn) AS last FROM log "
        "WHERE lsn <= ? AND id IN (SELECT value FROM json_each(?)) GROUP BY id) x ON l.lsn = x.last",
        (end, names),
    ):
        tombstone = op == RecordOp.TOMBSTONE.value
        changed[str(item_id)] = None if tombstone else Held(MemoryStatus(str(status)), Tier(str(tier)))
    return Past(end=end, then=changed, forgotten=frozenset(forgotten))


def rollback(conn: sqlite3.Connection, to_lsn: int, reason: str) -> LogChange:
    """Take the state back to ``to_lsn`` with compensating records, in one transaction (nothing is erased).

    Memories written after it are retracted; memories forgotten since cannot come back: they are listed in
    ``unrecoverable`` and the ``note`` says so.
    """
    was = past(conn, to_lsn, "to_lsn")
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
    records = tuple(log.apply(conn, op, item_id, state, why) for op, item_id, state in ops)
    return LogChange(txn=records[0].txn, records=records, unrecoverable=tuple(unrecoverable), note=note)

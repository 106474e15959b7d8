"""Memory as a log (seed 002): records, status, tier, and the fold that turns a log into state.

A memory is an immutable value; everything that changes about it is a record in a log. Records are numbered
(LSN, from 1, strictly increasing) and grouped into transactions (``txn``), which are all or nothing. State is a
fold over the log, so the state at any LSN can be rebuilt (``fold``), and a rollback writes compensating records
instead of erasing any. The rules of what changes are in ``docs/log-model.md``.

This module is pure: values and the fold only. Engines that keep a log declare ``log = true`` in their
``EngineDescriptor`` and implement the hooks of ``MemoryEngine`` (``current_lsn``, ``log``, ``as_of``,
``retract``, ``rollback``, ``history``, ``move``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar, Final

from pydantic import Field

from memory_core._model import ContractModel, StrictInt

__all__ = [
    "MAX_LOG_PAGE",
    "STANDARD_TIERS",
    "Held",
    "LogChange",
    "LogPage",
    "LogRecord",
    "MemoryStatus",
    "RecordOp",
    "Tier",
    "compensation",
    "fold",
    "settled",
]

MAX_LOG_PAGE: Final = 1000
"""Most records one ``log`` page returns."""


class MemoryStatus(StrEnum):
    """Whether a memory holds (seed 002, "Status")."""

    LIVE = "live"
    """It holds: reads serve it."""
    STALE = "stale"
    """Something it was built on no longer holds; redone work may bring it back. Not served."""
    RETRACTED = "retracted"
    """It was wrong. Kept (with its content) for history and rollback; not served."""


class Tier(StrEnum):
    """Where a memory sits, which is what retrieval and policies act on (seed 002, "Tier")."""

    SHORT = "short"
    """Working memory: new turns and documents."""
    MID = "mid"
    """Optional: evicted memories grouped into segments."""
    LONG = "long"
    """Consolidated memories and summaries: built beliefs."""
    ARCHIVE = "archive"
    """Moved out of the standard read by a policy; read only when a request names it (``tiers=``)."""


STANDARD_TIERS: Final[tuple[Tier, ...]] = (Tier.SHORT, Tier.MID, Tier.LONG)
"""What a fetch or recall reads when it names no ``tiers``: every tier but ``archive``."""


class RecordOp(StrEnum):
    """What a log record does to one memory (seed 002, "The log", plus the privacy tombstone)."""

    PUT = "put"
    """The memory is written: live, in the record's tier."""
    RESTORE = "restore"
    """A stale or retracted memory holds again (redone work, a re-store, a rollback)."""
    STALE = "stale"
    """Something it was built on no longer holds."""
    RETRACT = "retract"
    """It was wrong."""
    MOVE = "move"
    """It moves to the record's tier; status unchanged."""
    TOMBSTONE = "tombstone"
    """Its content was removed (forget, erase, retention): the log keeps only that it existed."""


class LogRecord(ContractModel):
    """``{lsn, txn, op, id, status?, tier?, reason?, at?}``: one change to one memory.

    ``status`` and ``tier`` are the memory's state after the record (absent after a tombstone). No record
    carries a memory's text: the content lives apart from the log, so a forget leaves nothing to read back.
    ``at`` (optional per engine, left out of JSON when absent) is when it was written, µs since the epoch, never
    less than the record before it's, so a time names an LSN (``lsn_at``).
    """

    __omit_defaults__: ClassVar[frozenset[str]] = frozenset({"at"})

    lsn: StrictInt = Field(ge=1)
    txn: StrictInt = Field(ge=1)
    op: RecordOp
    id: str
    status: MemoryStatus | None = None
    tier: Tier | None = None
    reason: str | None = None
    at: StrictInt | None = None


class LogPage(ContractModel):
    """``{records, next_since?}``: records in LSN order; pass ``next_since`` as ``since`` for the next page."""

    records: tuple[LogRecord, ...] = ()
    next_since: StrictInt | None = None


class LogChange(ContractModel):
    """``{txn?, records, unrecoverable, note?}``: what one ``retract``, ``rollback`` or ``move`` wrote.

    ``txn`` is absent when nothing changed. ``unrecoverable`` names memories a rollback should have brought
    back but could not, because their content was forgotten (the log holds only a tombstone); ``note`` says so.
    """

    __omit_defaults__: ClassVar[frozenset[str]] = frozenset({"unrecoverable"})

    txn: StrictInt | None = None
    records: tuple[LogRecord, ...] = ()
    unrecoverable: tuple[str, ...] = ()
    note: str | None = None

    def ids(self, op: RecordOp) -> list[str]:
        """The ids of the records doing ``op``, in log order."""
        return [r.id for r in self.records if r.op is op]


@dataclass(frozen=True)
class Held:
    """A memory's state: its status and tier."""

    status: MemoryStatus
    tier: Tier


def settled(records: Sequence[LogRecord], lsn: int) -> int:
    """The last LSN at or before ``lsn`` that ends a transaction; pure.

    Transactions are all or nothing (seed 002), so a state "at" an LSN inside a transaction is the state before
    that transaction. ``records`` are the log in LSN order, LSN ``n`` at index ``n - 1``.
    """
    if lsn >= len(records):
        return len(records)
    straddling = records[lsn].txn  # the first record past ``lsn``
    while lsn > 0 and records[lsn - 1].txn == straddling:
        lsn -= 1
    return lsn


def fold(
    records: Sequence[LogRecord], upto: int | None = None, base: Mapping[str, Held] | None = None
) -> dict[str, Held]:
    """The state the records give up to LSN ``upto`` (all of them when None), in first-put order.

    Only whole transactions count: a transaction with records past ``upto`` is left out entirely (``settled``).
    A tombstone removes the memory; a ``put`` after it starts it afresh. A ``move`` or status record for a
    memory the fold does not hold is ignored (a log never writes one). ``base`` is the state of a checkpoint the
    records before ``records`` were compacted into (then give no ``upto``: LSNs no longer start at 1).
    """
    if base is not None and upto is not None:
        raise ValueError("fold: upto counts LSNs from 1, which a compacted log no longer holds")
    end = len(records) if upto is None else settled(records, upto)
    state: dict[str, Held] = dict(base or {})
    for rec in records[:end]:
        held = state.get(rec.id)
        if rec.op is RecordOp.PUT:
            state[rec.id] = Held(MemoryStatus.LIVE, rec.tier or Tier.SHORT)
        elif rec.op is RecordOp.TOMBSTONE:
            state.pop(rec.id, None)
        elif held is None:
            continue
        elif rec.op is RecordOp.MOVE:
            state[rec.id] = Held(held.status, rec.tier or held.tier)
        else:
            status = {
                RecordOp.RESTORE: MemoryStatus.LIVE,
                RecordOp.STALE: MemoryStatus.STALE,
                RecordOp.RETRACT: MemoryStatus.RETRACTED,
            }[rec.op]
            state[rec.id] = Held(status, held.tier)
    return state


_TO_STATUS: Final = {
    MemoryStatus.LIVE: RecordOp.RESTORE,
    MemoryStatus.STALE: RecordOp.STALE,
    MemoryStatus.RETRACTED: RecordOp.RETRACT,
}


def compensation(
    past: dict[str, Held], now: dict[str, Held], forgotten: set[str]
) -> tuple[list[tuple[RecordOp, str, Held]], list[str]]:
    """The compensating records that take state ``now`` back to ``past`` (a rollback's plan); pure.

    Args:
        past: The state at the LSN rolled back to.
        now: The current state.
        forgotten: Ids whose content is gone (tombstoned since): they cannot come back.

    Returns:
        ``(ops, unrecoverable)``: each op is (record op, id, state after), in ``now``'s order then ``past``'s;
        a memory written after the target is retracted (its content stays, so rolling the rollback back restores
        it); ``unrecoverable`` lists memories ``past`` held that were forgotten since.
    """
    ops: list[tuple[RecordOp, str, Held]] = []
    unrecoverable: list[str] = []
    for item_id, cur in now.items():
        was = past.get(item_id)
        if was is None:
            if cur.status is not MemoryStatus.RETRACTED:
                ops.append((RecordOp.RETRACT, item_id, Held(MemoryStatus.RETRACTED, cur.tier)))
            continue
        if was.tier is not cur.tier:
            ops.append((RecordOp.MOVE, item_id, Held(cur.status, was.tier)))
        if was.status is not cur.status:
            ops.append((_TO_STATUS[was.status], item_id, was))
    for item_id in past:
        if item_id not in now and item_id in forgotten:
            unrecoverable.append(item_id)
    return ops, unrecoverable

"""What an item write or delete adds to its own statement for the log (``log``; ``docs/log-model.md``).

``writes.insert`` and ``writes.delete_where`` carry their records in the statement that makes the change (a
data-modifying ``WITH``, PostgreSQL docs §7.8.4), so a store costs no extra round trip for its log:

* a store: a ``put`` per new item (``live``, its tier), and for an id already held but stale or retracted, the
  ``UPDATE`` back to ``live`` and its ``restore`` (rule 2: stating something again says it holds again);
* a forget or erase (``forgotten``, after the delete): the learnings whose ``evidence`` named a deleted item are
  deleted too (transitively), and each deleted memory gets a ``tombstone`` (no text, rule 6).

A new item's tier (seed 002, "Tier"): a learning tagged ``belief`` or ``consolidated`` (a built belief stored
as a learning) is ``long``, every other new memory ``short``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from memory_core.items import Conversation, Document, Learning
from memory_core.limits import BELIEF_TAG, CONSOLIDATED_TAG
from memory_core.memory_log import RecordOp, Tier

from .beliefs import scope_lock
from .driver import Conn
from .log import append, logged
from .schema import SCHEMA

__all__ = ["STORED", "forgotten", "row_state", "stored_params"]


def row_state(item: Document | Conversation | Learning) -> tuple[str, str | None]:
    """``(tier, derived_from)`` of a new item's row (pure): its tier and a learning's ``evidence``."""
    tags = item.item_meta.tags
    built = isinstance(item, Learning) and (CONSOLIDATED_TAG in tags or BELIEF_TAG in tags)
    evidence = item.evidence if isinstance(item, Learning) and item.evidence else None
    return (Tier.LONG if built else Tier.SHORT).value, evidence


STORED: Final = (
    "_want AS (SELECT * FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS w(id, tier, o)), "
    f"restored AS (UPDATE {SCHEMA}.items i SET status = 'live' FROM _want w WHERE i.id = w.id "
    "AND i.status <> 'live' RETURNING i.id, i.tier), "
    "_src AS (SELECT 'put'::text AS op, w.id, 'live'::text AS status, w.tier, NULL::text AS reason, w.o "
    "FROM new n JOIN _want w ON w.id = n.id UNION ALL "
    "SELECT 'restore', r.id, 'live', r.tier, 'stored again', w.o FROM restored r JOIN _want w ON w.id = r.id), "
    + logged("_src")
)
"""CTEs after ``new`` (the ``INSERT … RETURNING id``) in ``writes.insert``: restores and the records.

The ``UPDATE`` sees the table as the statement began, so it restores only items held before it, never one the
same statement inserts. Parameters: ``stored_params``."""


def stored_params(ids: Sequence[str], tiers: Sequence[str]) -> list[Any]:
    """``STORED``'s parameters: the batch's distinct ids and their tiers, in batch order."""
    return [list(ids), list(tiers)]


def forgotten(conn: Conn, deleted: Sequence[tuple[str, str, str]], reason: str) -> list[tuple[str, str, str]]:
    """After a delete: remove what was built on it and write the tombstones; every ``(id, ns key, kind)`` gone.

    The learnings whose ``evidence`` named a deleted item are deleted too, transitively. Then the build locks
    of every scope touched are taken (sorted) before the tombstones take the log's head lock, the order a
    build takes them in (its scope, then the head at its end), so a forget and a build never deadlock.

    Args:
        conn: The deleting transaction.
        deleted: ``(id, ns key, kind)`` of each item deleted, in write order.
        reason: The tombstones' reason (``forget``, ``erase``).
    """
    gone = list(deleted)
    built = [(d, f"{reason}: built on removed memory") for d in _delete_derived(conn, [d[0] for d in deleted])]
    for ns, kind in sorted({(d[1], d[2]) for d in [*gone, *(b[0] for b in built)]}):
        scope_lock(conn, ns, kind)
    rows = [(RecordOp.TOMBSTONE, d[0], None, reason) for d in gone]
    rows += [(RecordOp.TOMBSTONE, d[0], None, why) for d, why in built]
    append(conn, rows)
    return gone + [d for d, _ in built]


def _delete_derived(conn: Conn, removed: Sequence[str]) -> list[tuple[str, str, str]]:
    """Delete the learnings built on ``removed`` (``items.derived_from``), transitively; ``(id, ns, kind)`` each."""
    out: list[tuple[str, str, str]] = []
    gone = list(removed)
    while gone:
        rows = conn.execute(
            f"DELETE FROM {SCHEMA}.items i WHERE i.derived_from = ANY(%s::text[]) RETURNING i.id, i.ns, i.kind, i.seq",
            (gone,),
        ).fetchall()
        found = [(str(r[0]), str(r[1]), str(r[2])) for r in sorted(rows, key=lambda r: int(r[3]))]
        out.extend(found)
        gone = [f[0] for f in found]
    return out

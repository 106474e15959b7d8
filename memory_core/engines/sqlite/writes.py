"""Item writes: insert (indexed now or pending), drain the pending queue, delete with provenance.

Every function runs inside the caller's ``BEGIN IMMEDIATE`` transaction, so a batch is all or nothing and the
beliefs derived from deleted items go in the same transaction as the items.

Write bookkeeping per ``(ns, kind)`` in ``scopes``: ``last_write`` is stamped inside the write transaction and
kept strictly greater than the previous write and the last build, so ``last_write > last_build`` says exactly
"written since the last build" even across processes with interleaved clocks.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from memory_core.facts.model import ranking_confidence
from memory_core.items import Conversation, Document, Learning
from memory_core.limits import BELIEF_TAG, CONSOLIDATED_TAG
from memory_core.memory_log import Held, MemoryStatus, RecordOp, Tier
from memory_core.scoring import embed

from . import beliefs_store, fts, log
from .connection import TX_BUDGET_S, held_s, tally
from .rows import META_COLUMN_NAMES, chunks, meta_columns, now_us, ns_key, placeholders, vec_blob

__all__ = [
    "Prepared",
    "delete_seqs",
    "drain",
    "index_rows",
    "index_within",
    "insert",
    "now_us",
    "pending_texts",
    "prepare",
]

_COLUMNS = ("id", "kind", "ns", *META_COLUMN_NAMES, "confidence", "stored_at", "vec", "tier", "derived_from")
_INSERT = (
    f"INSERT INTO items ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)}) ON CONFLICT(id) DO NOTHING"
)
_TOUCH = (
    "INSERT INTO scopes (ns, kind, last_write) VALUES (?, ?, ?) ON CONFLICT(ns, kind) DO UPDATE SET "
    "last_write = max(excluded.last_write, scopes.last_write + 1, coalesce(scopes.last_build, 0) + 1)"
)


@dataclass(frozen=True)
class Prepared:
    """An item turned into row values before the write transaction (pure work done outside the lock).

    Attributes:
        id: The fingerprint.
        kind: ``document``, ``conversation`` or ``learning``.
        ns: The namespace key.
        meta: Values of the filter columns.
        confidence: A learning's confidence as ranking weighs it (a fact's importance blended in).
        item_json: The item's JSON (export returns it whole).
        text: ``render_text()``.
        tags: The item's tags.
        vec: The embedding blob, or None to leave the item pending (``accepted``).
        tier: Where the item sits (seed 002): ``long`` for a built belief stored as a learning, else ``short``.
        derived_from: What it was built on: a learning's ``evidence`` (None for other items).
    """

    id: str
    kind: str
    ns: str
    meta: tuple[object, ...]
    confidence: float | None
    item_json: str
    text: str
    tags: tuple[str, ...]
    vec: bytes | None
    tier: str = Tier.SHORT.value
    derived_from: str | None = None


def prepare(item: Document | Conversation | Learning, *, index: bool) -> Prepared:
    """Row values for ``item``; with ``index`` the embedding is computed now (else the item goes pending)."""
    text = item.render_text()
    meta = item.item_meta
    return Prepared(
        id=item.id,
        kind=item.item_kind.value,
        ns=ns_key(meta.namespace),
        meta=meta_columns(meta),
        confidence=ranking_confidence(item.confidence_value(), meta.tags),  # a fact's importance (facts.model)
        item_json=item.model_dump_json(),
        text=text,
        tags=tuple(dict.fromkeys(meta.tags)),
        vec=vec_blob(embed(text)) if index else None,
        tier=_tier_of(item).value,
        derived_from=item.evidence if isinstance(item, Learning) and item.evidence else None,
    )


def _tier_of(item: Document | Conversation | Learning) -> Tier:
    """A new memory's tier (seed 002, "Tier"): built beliefs (tagged ``consolidated`` or ``belief``) are long."""
    tags = item.item_meta.tags
    return Tier.LONG if isinstance(item, Learning) and (CONSOLIDATED_TAG in tags or BELIEF_TAG in tags) else Tier.SHORT


def insert(conn: sqlite3.Connection, row: Prepared, at_us: int) -> int | None:
    """Insert one item and its ``put`` record; its seq, or None when the id is already held and live (a replay).

    Storing a held memory that is stale or retracted restores it (``docs/log-model.md`` rule 2): one
    ``restore`` record, and its seq is returned (it was not a replay).
    """
    values = (row.id, row.kind, row.ns, *row.meta, row.confidence, at_us, row.vec, row.tier, row.derived_from)
    cur = conn.execute(_INSERT, values)
    if cur.rowcount == 0:
        held = conn.execute("SELECT seq, status, tier FROM items WHERE id = ?", (row.id,)).fetchone()
        if held is None or held[1] == MemoryStatus.LIVE.value:
            return None
        log.apply(conn, RecordOp.RESTORE, row.id, Held(MemoryStatus.LIVE, Tier(held[2])), "stored again")
        return int(held[0])
    seq = int(cur.lastrowid or 0)
    log.put(conn, row.id, Tier(row.tier))
    conn.execute("INSERT INTO bodies (seq, item, text) VALUES (?, ?, ?)", (seq, row.item_json, row.text))
    if row.tags:
        conn.executemany("INSERT OR IGNORE INTO item_tags (tag, seq) VALUES (?, ?)", [(t, seq) for t in row.tags])
    if row.vec is not None:
        fts.add(conn, seq)
    else:
        conn.execute("INSERT INTO pending (seq) VALUES (?)", (seq,))
    conn.execute(_TOUCH, (row.ns, row.kind, at_us))
    return seq


def pending_texts(conn: sqlite3.Connection, limit: int) -> list[tuple[int, str]]:
    """Up to ``limit`` pending ``(seq, text)`` pairs, oldest first."""
    rows = conn.execute(
        "SELECT p.seq, b.text FROM pending p JOIN bodies b ON b.seq = p.seq ORDER BY p.seq LIMIT ?", (limit,)
    )
    return [(int(seq), str(text)) for seq, text in rows]


def index_rows(conn: sqlite3.Connection, rows: Iterable[tuple[int, str, bytes]]) -> int:
    """Index pending rows whose embeddings were computed outside the lock; rows no longer pending are skipped.

    Returns:
        How many rows were indexed.
    """
    done = 0
    for seq, _text, vec in rows:
        done += _index_one(conn, seq, vec)
    return done


def index_within(
    conn: sqlite3.Connection, rows: Sequence[tuple[int, str, bytes]], cap: int, budget_s: float = TX_BUDGET_S
) -> tuple[int, int]:
    """``index_rows`` from the start while the transaction's lock budget lasts.

    Stops after the row during which the transaction had held the lock ``budget_s`` (``connection.held_s``), or
    after ``cap`` rows: at least one. Each is counted (``connection.tally``).

    Returns:
        ``(rows consumed, rows indexed)``: the caller indexes the rest in the next transaction.
    """
    consumed = done = 0
    for seq, _text, vec in rows[:cap]:
        done += _index_one(conn, seq, vec)
        consumed += 1
        tally()
        if held_s() >= budget_s:
            break
    return consumed, done


def _index_one(conn: sqlite3.Connection, seq: int, vec: bytes) -> int:
    """Index one pending row (1), or 0 when it is no longer pending."""
    if conn.execute("DELETE FROM pending WHERE seq = ?", (seq,)).rowcount != 1:
        return 0
    conn.execute("UPDATE items SET vec = ? WHERE seq = ?", (vec, seq))
    fts.add(conn, seq)
    return 1


def drain(conn: sqlite3.Connection, limit: int = 1_000) -> int:
    """Index up to ``limit`` pending items inside this transaction (FTS row + embedding); how many were."""
    rows = pending_texts(conn, limit)
    return index_rows(conn, ((seq, text, vec_blob(embed(text))) for seq, text in rows))


def delete_seqs(conn: sqlite3.Connection, seqs: Sequence[int], reason: str = "forget") -> int:
    """Delete items by seq, with their FTS rows, tags and bodies, and retract the beliefs built on them.

    Each deleted item leaves a ``tombstone`` record without its text (``docs/log-model.md`` rule 6), and so do
    the learnings built on it alone (their ``evidence`` named it), transitively: they are deleted too, and not
    counted.

    Returns:
        How many items were deleted (of ``seqs``).
    """
    deleted = _delete_seqs(conn, seqs, reason)
    gone = deleted
    while gone:
        derived = [
            int(r[0])
            for r in conn.execute(
                "SELECT seq FROM items WHERE derived_from IN (SELECT value FROM json_each(?))", (json.dumps(gone),)
            )
        ]
        gone = _delete_seqs(conn, derived, f"{reason}: built on removed memory") if derived else []
    return len(deleted)


def _delete_seqs(conn: sqlite3.Connection, seqs: Sequence[int], reason: str) -> list[str]:
    """Delete items by seq (``delete_seqs``); the ids deleted."""
    ids: list[str] = []
    fts.remove(conn, seqs)
    for chunk in chunks(seqs):
        marks = placeholders(len(chunk))
        rows = conn.execute(
            f"SELECT i.seq, i.id, b.text, (SELECT 1 FROM pending p WHERE p.seq = i.seq) "
            f"FROM items i JOIN bodies b ON b.seq = i.seq WHERE i.seq IN ({marks})",
            chunk,
        ).fetchall()
        for seq, item_id, _text, pending in rows:
            if pending:
                conn.execute("DELETE FROM pending WHERE seq = ?", (seq,))
            ids.append(str(item_id))
        conn.executemany("INSERT INTO deleted (seq) VALUES (?)", [(int(r[0]),) for r in rows])
        conn.execute(f"DELETE FROM item_tags WHERE seq IN ({marks})", chunk)
        conn.execute(f"DELETE FROM bodies WHERE seq IN ({marks})", chunk)
        conn.execute(f"DELETE FROM items WHERE seq IN ({marks})", chunk)
    if ids:
        log.tombstones(conn, ids, reason)
        beliefs_store.retract(conn, ids)
    return ids

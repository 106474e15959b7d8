"""Item writes: one ``INSERT … ON CONFLICT DO NOTHING`` statement per batch, and deletes with provenance.

An item is turned into row values before the transaction (``prepare``: JSON, words, embedding), so a write
holds its transaction for one statement. ``insert`` writes the items and touches their scopes in that one
statement (a data-modifying ``WITH``, PostgreSQL docs §7.8.4): a replayed id inserts nothing and touches
nothing. The generated ``tsvector`` is computed by the insert itself, so an item ranks as soon as its
transaction commits: ``accepted`` and ``visible`` writes are the same statement, and both return once the row
is durable (``synchronous_commit`` is the server's).

Scope rows are touched in sorted ``(ns, kind)`` order, so two batches touching the same scopes lock them in the
same order and never deadlock. ``last_write`` is kept strictly greater than the previous write and the last
build, so ``last_write > last_build`` says exactly "written since the last build" across machines whose clocks
disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from memory_core.engines.sqlite.rows import META_COLUMN_NAMES, meta_columns, ns_key
from memory_core.items import Conversation, Document, Learning
from memory_core.scoring import embed, tokenize

from . import beliefs, log_writes
from .driver import Conn
from .schema import SCHEMA

__all__ = ["COLUMNS", "MAX_WORDS_CHARS", "Prepared", "delete_where", "insert", "prepare", "words_of"]

MAX_WORDS_CHARS: Final = 500_000
"""Longest ``words`` text kept per row: a ``tsvector`` holds at most 1 MB (PostgreSQL docs §8.11.1)."""

COLUMNS = (
    "id", "kind", "ns", *META_COLUMN_NAMES, "tags", "confidence", "stored_at", "item", "words", "vec", "tier",
    "derived_from",
)  # fmt: skip


def words_of(text: str) -> str:
    """The words the ``tsvector`` is generated from: the reference tokenizer's, space-separated, bounded."""
    return " ".join(tokenize(text))[:MAX_WORDS_CHARS]


@dataclass(frozen=True)
class Prepared:
    """An item as row values, computed outside the transaction.

    Attributes:
        id: The content id.
        kind: ``document``, ``conversation`` or ``learning``.
        ns: The namespace key.
        values: Values of ``COLUMNS`` but ``stored_at`` (filled at write time).
    """

    id: str
    kind: str
    ns: str
    values: tuple[Any, ...]


def prepare(item: Document | Conversation | Learning) -> Prepared:
    """Row values for ``item`` (pure)."""
    text = item.render_text()
    meta = item.item_meta
    ns = ns_key(meta.namespace)
    values = (
        item.id, item.item_kind.value, ns, *meta_columns(meta), list(dict.fromkeys(meta.tags)),
        item.confidence_value(), None, item.model_dump_json(), words_of(text), [float(v) for v in embed(text)],
        *log_writes.row_state(item),
    )  # fmt: skip
    return Prepared(id=item.id, kind=item.item_kind.value, ns=ns, values=values)


def insert(
    conn: Conn, rows: Sequence[Prepared], at_us: int, *, seqs: Sequence[int] | None = None, times: Sequence[int] = ()
) -> list[bool]:
    """Insert ``rows`` and touch their scopes in one statement; per row, whether it was new (False: a replay).

    An id repeated inside the batch is new once, then a replay, as storing it twice would be. The same statement
    writes a ``put`` record per new item and restores a held item that is stale or retracted (``log_writes``:
    ``docs/log-model.md`` rule 2; such an item is not a replay).

    Args:
        conn: The caller's transaction.
        rows: The prepared items.
        at_us: The write time, µs (``stored_at`` and the scopes' ``last_write``).
        seqs: Explicit write-order numbers, one per row (``migrate`` keeps a SQLite store's order); None: new ones.
        times: Explicit ``stored_at`` per row (``migrate``); empty: ``at_us`` for all.
    """
    first: dict[str, int] = {}
    for i, row in enumerate(rows):
        first.setdefault(row.id, i)
    unique = [rows[i] for i in sorted(first.values())]
    order = sorted(first.values())
    columns = ("seq", *COLUMNS) if seqs is not None else COLUMNS
    stored_at = columns.index("stored_at")
    marks = ", ".join("(" + ", ".join("%s" for _ in columns) + ")" for _ in unique)
    params: list[Any] = []
    for i in order:
        values = [seqs[i], *rows[i].values] if seqs is not None else list(rows[i].values)
        values[stored_at] = times[i] if times else at_us
        params.extend(values)
    overriding = " OVERRIDING SYSTEM VALUE" if seqs is not None else ""
    scopes = sorted({(row.ns, row.kind) for row in unique})
    sql = (
        f"WITH new AS (INSERT INTO {SCHEMA}.items ({', '.join(columns)}){overriding} VALUES {marks} "
        "ON CONFLICT (id) DO NOTHING RETURNING id, ns, kind), "
        f"touch AS (INSERT INTO {SCHEMA}.scopes (ns, kind, last_write) "
        "SELECT s.ns, s.kind, %s FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS s(ns, kind, o) "
        "WHERE EXISTS (SELECT 1 FROM new n WHERE n.ns = s.ns AND n.kind = s.kind) ORDER BY s.o "
        "ON CONFLICT (ns, kind) DO UPDATE SET last_write = greatest(excluded.last_write, "
        f"{SCHEMA}.scopes.last_write + 1, coalesce({SCHEMA}.scopes.last_build, 0) + 1)), "
        f"{log_writes.STORED} SELECT id FROM new UNION ALL SELECT id FROM restored"
    )
    params.extend([at_us, [s[0] for s in scopes], [s[1] for s in scopes]])
    params.extend(log_writes.stored_params([row.id for row in unique], [row.values[-2] for row in unique]))
    created = {str(r[0]) for r in conn.execute(sql, params).fetchall()}
    out: list[bool] = []
    for i, row in enumerate(rows):
        out.append(first[row.id] == i and row.id in created)
    return out


def delete_where(
    conn: Conn, where_sql: str, params: Sequence[Any], reason: str = "forget"
) -> list[tuple[str, str, str]]:
    """Delete the items ``where_sql`` (over alias ``i``) admits, then retract the beliefs built on them.

    Each deleted item leaves a ``tombstone`` record without its text, and so do the learnings built on it (deleted
    with it: ``log_writes.forgotten``) and the beliefs deleted with it (``docs/log-model.md`` rule 6), whose
    reason is ``reason``.

    Returns:
        ``(id, ns key, kind)`` of each item deleted (not counting the learnings built on them).
    """
    rows = conn.execute(
        f"DELETE FROM {SCHEMA}.items i WHERE {where_sql} RETURNING i.id, i.ns, i.kind, i.seq", list(params)
    ).fetchall()
    deleted = [(str(r[0]), str(r[1]), str(r[2])) for r in sorted(rows, key=lambda r: int(r[3]))]
    if deleted:
        gone = log_writes.forgotten(conn, deleted, reason)
        beliefs.retract(conn, [d[0] for d in gone], sorted({(d[1], d[2]) for d in gone}))
    return deleted

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
from memory_core.facts.model import ranking_confidence
from memory_core.items import Conversation, Document, Learning, parse_item
from memory_core.retrieval.terms import index_text
from memory_core.retrieval.window import strip_roles
from memory_core.scoring import embed, tokenize

from . import beliefs, log_writes
from .driver import Conn
from .schema import SCHEMA

__all__ = [
    "COLUMNS",
    "MAX_WORDS_CHARS",
    "Prepared",
    "delete_where",
    "insert",
    "own_terms",
    "prepare",
    "speaker_of",
    "words_of",
]

MAX_WORDS_CHARS: Final = 500_000
"""Longest ``words`` text kept per row: a ``tsvector`` holds at most 1 MB (PostgreSQL docs §8.11.1)."""

COLUMNS = (
    "id", "kind", "ns", *META_COLUMN_NAMES, "tags", "confidence", "stored_at", "item", "words", "vec",
    "terms", "wterms", "speaker", "tier", "derived_from",
)  # fmt: skip
"""Columns an insert writes; ``wterms`` starts as the item's own terms, and the window trigger (``schema``)
widens a conversation turn's and its neighbours' to the window. ``tier`` and ``derived_from`` are the log's
(``log_writes.row_state``)."""

_TIER: Final = COLUMNS.index("tier")
"""Where a prepared row's values hold its tier (the log's ``put`` records carry it)."""


def words_of(text: str) -> str:
    """The words the ``tsvector`` is generated from: the reference tokenizer's, space-separated, bounded."""
    return " ".join(tokenize(text))[:MAX_WORDS_CHARS]


def speaker_of(item: Document | Conversation | Learning) -> str | None:
    """Who said an item: its ``observed_actor.name``, if any (the speaker signal of ranking)."""
    actor = item.item_meta.observed_actor
    name = getattr(actor, "name", None) if actor is not None else None
    return str(name) if name else None


def own_terms(body: str) -> tuple[str, str | None]:
    """``(terms, speaker)`` of a stored item's JSON: its rendered text's terms (roles stripped), and speaker."""
    item = parse_item(body)
    return _bounded(index_text(strip_roles(item.render_text()))), speaker_of(item)


def _bounded(terms: str) -> str:
    """An item's own terms, at most a third of ``MAX_WORDS_CHARS``: a window holds three items' terms."""
    return terms[: MAX_WORDS_CHARS // 3]


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
    terms = _bounded(index_text(strip_roles(text)))
    meta = item.item_meta
    ns = ns_key(meta.namespace)
    values = (
        item.id, item.item_kind.value, ns, *meta_columns(meta), list(dict.fromkeys(meta.tags)),
        ranking_confidence(item.confidence_value(), meta.tags), None, item.model_dump_json(), words_of(text),
        [float(v) for v in embed(text)],
        terms, terms, speaker_of(item),
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
    params: list[Any] = []
    for i in order:
        values = [seqs[i], *rows[i].values] if seqs is not None else list(rows[i].values)
        values[stored_at] = times[i] if times else at_us
        params.extend(values)
    overriding = " OVERRIDING SYSTEM VALUE" if seqs is not None else ""
    marks, params = _windowed(columns, [rows[i] for i in order], params)
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
    params.extend(log_writes.stored_params([row.id for row in unique], [row.values[_TIER] for row in unique]))
    created = {str(r[0]) for r in conn.execute(sql, params).fetchall()}
    out: list[bool] = []
    for i, row in enumerate(rows):
        out.append(first[row.id] == i and row.id in created)
    return out


_NEIGHBOUR: Final = (
    f"(SELECT p.terms FROM {SCHEMA}.items p WHERE p.thread_id = %s AND p.turn_last {{op}} %s AND p.ns = %s "
    "AND p.kind = 'conversation' ORDER BY p.turn_last {dir}, p.seq {dir} LIMIT 1)"
)
_WINDOW: Final = (
    "concat_ws(' ', nullif(%s, ''), nullif("
    + _NEIGHBOUR.format(op="<", dir="DESC")
    + ", ''), nullif("
    + _NEIGHBOUR.format(op=">", dir="ASC")
    + ", ''))"
)
"""A new turn's window from the turns already stored (``schema``'s window trigger fixes the rest)."""


def _windowed(columns: Sequence[str], rows: Sequence[Prepared], flat: list[Any]) -> tuple[str, list[Any]]:
    """The ``VALUES`` list and its parameters, a conversation turn's ``wterms`` computed in the statement.

    A turn's window is its terms with its stored neighbours' (the same lookups as the trigger's), so the trigger
    finds it current and rewrites only the neighbours; a neighbour written in the same batch is the trigger's.

    Args:
        columns: The inserted columns.
        rows: The rows, in ``flat``'s order.
        flat: Every row's values, ``len(columns)`` a row.
    """
    width = len(columns)
    at = {name: columns.index(name) for name in ("wterms", "thread_id", "turn_first", "turn_last", "ns", "kind")}
    groups: list[str] = []
    params: list[Any] = []
    for r in range(len(rows)):
        values = flat[r * width : (r + 1) * width]
        thread, first, last = values[at["thread_id"]], values[at["turn_first"]], values[at["turn_last"]]
        turn = values[at["kind"]] == "conversation" and thread is not None and first is not None
        marks: list[str] = []
        for c, value in enumerate(values):
            if c == at["wterms"] and turn:
                ns = values[at["ns"]]
                marks.append(_WINDOW)
                params.extend([value, thread, first, ns, thread, last, ns])
            else:
                marks.append("%s")
                params.append(value)
        groups.append("(" + ", ".join(marks) + ")")
    return ", ".join(groups), params


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

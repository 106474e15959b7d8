"""Scope bookkeeping reads, row counts and the opaque cursor codec of the SQLite engine.

Every read function takes an open connection (the caller's read transaction) and returns plain data.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Final

from memory_core.consolidation import BuildScope, ConsolidateRequest
from memory_core.errors import InvalidRequest
from memory_core.meta import ItemKind

from .filters import reach_sql
from .rows import from_us, ns_of_key

__all__ = [
    "CURSOR_VALUE_BOUND",
    "ScopeRow",
    "build_scopes",
    "counts",
    "decode_cursor",
    "encode_cursor",
    "scope_rows",
]

ScopeRow = tuple[str, str, int, int | None, int]
"""``(ns key, kind, last_write µs, last_build µs or None, live items held)`` of one (node, kind) scope."""

CURSOR_VALUE_BOUND = 2**63
"""Cursor values are below this: SQLite's INTEGER is a signed 64-bit value (sqlite.org/datatype3.html §2)."""

_COUNTS = {
    "items": "SELECT count(*) FROM items",
    "pending": "SELECT count(*) FROM pending",
    "beliefs": "SELECT count(*) FROM beliefs WHERE status = 'active'",
    "superseded": "SELECT count(*) FROM beliefs WHERE status = 'superseded'",
}


_NOT_LIVE: Final = (
    "WITH gone AS (SELECT ns, kind, count(*) AS n FROM items INDEXED BY items_unserved "
    "WHERE (status != 'live' OR tier = 'archive') AND status != 'live' GROUP BY ns, kind) "
)
"""Items held but not live (retracted, e.g. a superseded fact's old value, or stale) per scope, read through the
partial index ``items_unserved`` in one pass: a scope's live items are all its items (a covering count on
``items_ns_kind``) less these, without reading every item row."""


def scope_rows(conn: sqlite3.Connection, request: ConsolidateRequest) -> list[ScopeRow]:
    """Every (node, kind) scope the request's reach and kinds admit, with its write and build marks.

    A scope's count is of its live items (any tier), the items ``list`` serves and ``memory-core status``'s
    items line counts: a retracted item (a superseded fact's old value) is still held but is neither served
    nor built from (docs/log-model.md).
    """
    kinds = [k.value for k in request.admitted_kinds()]
    sql, params = reach_sql(request.reach, "s.ns", kinds=kinds, kind_col="s.kind")
    rows = conn.execute(
        f"{_NOT_LIVE}SELECT s.ns, s.kind, s.last_write, s.last_build, "
        f"(SELECT count(*) FROM items i WHERE i.ns = s.ns AND i.kind = s.kind) - coalesce(g.n, 0) "
        f"FROM scopes s LEFT JOIN gone g ON g.ns = s.ns AND g.kind = s.kind WHERE {sql} ORDER BY s.ns, s.kind",
        params,
    ).fetchall()
    return [(str(r[0]), str(r[1]), int(r[2]), None if r[3] is None else int(r[3]), int(r[4])) for r in rows]


def build_scopes(rows: Sequence[ScopeRow]) -> list[BuildScope]:
    """One ``BuildScope`` per node holding live items (pure): its kinds, item count, newest write, oldest build."""
    by_ns: dict[str, list[ScopeRow]] = {}
    for row in rows:
        if row[4] > 0:
            by_ns.setdefault(row[0], []).append(row)
    out: list[BuildScope] = []
    for ns, group in sorted(by_ns.items(), key=lambda kv: str(ns_of_key(kv[0]))):
        builds = [g[3] for g in group]
        out.append(
            BuildScope(
                namespace=ns_of_key(ns),
                kinds=tuple(k for k in ItemKind.all() if k.value in {g[1] for g in group}),
                items=sum(g[4] for g in group),
                last_write=from_us(max(g[2] for g in group)),
                last_build=None if any(b is None for b in builds) else from_us(min(b for b in builds if b is not None)),
            )
        )
    return out


def counts(conn: sqlite3.Connection) -> dict[str, Any]:
    """Row counts: ``items``, ``pending``, ``beliefs`` (active) and ``superseded``."""
    return {name: int(conn.execute(sql).fetchone()[0]) for name, sql in _COUNTS.items()}


def encode_cursor(tag: str, data: dict[str, int]) -> str:
    """An opaque cursor: ``tag`` + URL-safe base64 of compact JSON."""
    raw = json.dumps(data, separators=(",", ":")).encode()
    return tag + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _cursor_value(v: object) -> bool:
    """True for a value ``encode_cursor`` can have written: an int (not a bool) SQLite can bind."""
    return type(v) is int and 0 <= v < CURSOR_VALUE_BOUND


def decode_cursor(tag: str, cursor: str | None, fields: Sequence[str]) -> dict[str, int] | None:
    """Read a cursor ``encode_cursor`` made with ``tag`` and exactly ``fields`` (None for no cursor).

    Every value must be an ``int`` (``true`` is refused, though Python counts it one) in
    ``[0, CURSOR_VALUE_BOUND)``: seqs and offsets are never negative, and SQLite binds only 64-bit integers.

    Raises:
        InvalidRequest: a cursor this engine did not make, or one edited out of range ("unknown cursor …",
            field ``cursor``).
    """
    if cursor is None:
        return None
    try:
        if not cursor.startswith(tag):
            raise ValueError(cursor)
        body = cursor[len(tag) :]
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        if not isinstance(data, dict) or set(data) != set(fields) or not all(map(_cursor_value, data.values())):
            raise ValueError(cursor)
        return {str(k): int(v) for k, v in data.items()}
    except (ValueError, RecursionError):  # binascii.Error, JSONDecodeError, UnicodeDecodeError are ValueErrors
        raise InvalidRequest(f"unknown cursor {cursor[:40]!r}", field="cursor") from None

"""Beliefs in SQLite: the incremental build per scope, provenance on delete, and belief reads.

A *scope* is ``(ns, kind)``; ``scopes.built_seq`` is its watermark. A build step, inside ``BEGIN IMMEDIATE``,
re-reads the watermark, reads at most ``BUILD_CHUNK`` items of that scope written after it (an index range on
``(ns, kind, seq)``), runs the pure distiller (``memory_core.beliefs``: extract, lookup, merge), loads only the
beliefs the lookup names (by key, subject and anchor), saves what changed, and moves the watermark. So a
build's cost follows the new items, a build with nothing new is one indexed read, and two builds racing (two
processes) serialise on the write lock: the second finds the watermark moved and does nothing.

Beliefs live in ``beliefs`` (never listed, fetched or forgotten as items), with ``belief_evidence`` (belief →
item ids), ``belief_anchors`` and ``beliefs_fts``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Final

import numpy as np

from memory_core.beliefs import (
    ANCHOR_WINDOW,
    Belief,
    BeliefStatus,
    Lookup,
    SourceItem,
    belief_id,
    extract,
    lookup,
    merge,
)
from memory_core.beliefs import (
    retract as retract_beliefs,
)
from memory_core.items import parse_item
from memory_core.meta import ItemKind, MemoryMeta, MetaFilter
from memory_core.query import FetchMode, Hit
from memory_core.scoring import EMBED_DIM, embed

from .belief_index import BeliefIndex, BeliefRows, bump_version
from .filters import compile_filter
from .fts import fts_matches
from .rows import META_COLUMN_NAMES, meta_columns, now_us, ns_of_key, vec_blob
from .search import Candidates, order, query_vector, score

__all__ = ["BUILD_CHUNK", "build_step", "rank", "retract"]

BUILD_CHUNK: Final = 500
"""Most items one build transaction reads (bounds how long the write lock is held)."""
SOURCE_KINDS: Final = (ItemKind.DOCUMENT.value, ItemKind.CONVERSATION.value)
"""Item kinds beliefs are built from (learnings are never a source, reference §3)."""
_BATCH: Final = 400

_BELIEF_COLUMNS = (
    "id", "ns", "from_kind", "key", "subject", "status", "text", "learning_kind", "confidence", "state", "meta",
    *META_COLUMN_NAMES, "last_seq", "updated_at", "vec",
)  # fmt: skip
_INSERT = f"INSERT INTO beliefs ({', '.join(_BELIEF_COLUMNS)}) VALUES ({', '.join('?' for _ in _BELIEF_COLUMNS)})"
_UPDATE = (
    "UPDATE beliefs SET status = ?, confidence = ?, state = ?, meta = ?, "
    + ", ".join(f"{c} = ?" for c in META_COLUMN_NAMES)
    + ", last_seq = ?, updated_at = ? WHERE bid = ?"
)


def _chunks(values: Sequence[Any], size: int = _BATCH) -> Iterable[list[Any]]:
    for start in range(0, len(values), size):
        yield list(values[start : start + size])


def _marks(n: int) -> str:
    return ", ".join("?" for _ in range(n))


def _load(conn: sqlite3.Connection, ns: str, from_kind: str, where: str, values: Sequence[Any]) -> dict[int, Belief]:
    out: dict[int, Belief] = {}
    for chunk in _chunks(values):
        cond = where.format(marks=_marks(len(chunk)))
        sql = f"SELECT bid, state FROM beliefs WHERE ns = ? AND from_kind = ? AND {cond}"
        for bid, state in conn.execute(sql, (ns, from_kind, *chunk)):
            out[int(bid)] = Belief.from_state(json.loads(state))
    return out


def _candidates(conn: sqlite3.Connection, ns: str, from_kind: str, want: Lookup) -> dict[int, Belief]:
    """The beliefs ``want`` names: by key, by subject, and the newest ``ANCHOR_WINDOW`` per anchor."""
    found = _load(conn, ns, from_kind, "key IN ({marks})", sorted(want.keys))
    found.update(_load(conn, ns, from_kind, "subject IN ({marks})", sorted(want.subjects)))
    bids: set[int] = set()
    for anchor in sorted(want.anchors):
        bids.update(
            int(r[0])
            for r in conn.execute(
                "SELECT bid FROM belief_anchors WHERE ns = ? AND from_kind = ? AND anchor = ? "
                "ORDER BY first_seq DESC, key DESC LIMIT ?",
                (ns, from_kind, anchor, ANCHOR_WINDOW),
            )
        )
    found.update(_load(conn, ns, from_kind, "bid IN ({marks})", sorted(bids - found.keys())))
    return found


def _columns(belief: Belief) -> tuple[Any, ...]:
    return meta_columns(belief.meta)


def _save(conn: sqlite3.Connection, ns: str, from_kind: str, beliefs: Sequence[Belief], at_us: int) -> None:
    if beliefs:
        bump_version(conn)  # per-process belief indexes reload (``belief_index``)
    namespace = ns_of_key(ns)
    for belief in beliefs:
        state = json.dumps(belief.to_state(), separators=(",", ":"), ensure_ascii=False)
        meta = belief.meta.to_json()
        row = conn.execute(
            "SELECT bid, state FROM beliefs WHERE ns = ? AND from_kind = ? AND key = ?", (ns, from_kind, belief.key)
        ).fetchone()
        if row is None:
            bid_cur = conn.execute(
                _INSERT,
                (
                    belief_id(namespace, from_kind, belief.key), ns, from_kind, belief.key, belief.subject,
                    belief.status.value, belief.text, belief.kind.value, belief.confidence, state, meta,
                    *_columns(belief), belief.last_seq, at_us, vec_blob(embed(belief.text)),
                ),
            )  # fmt: skip
            bid = int(bid_cur.lastrowid or 0)
            conn.execute("INSERT INTO beliefs_fts (rowid, text) VALUES (?, ?)", (bid, belief.text))
            conn.executemany(
                "INSERT OR IGNORE INTO belief_anchors (ns, from_kind, anchor, first_seq, key, bid) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(ns, from_kind, a, belief.first_seq, belief.key, bid) for a in belief.anchors] if belief.free else [],
            )
            old: tuple[str, ...] = ()
        else:
            bid = int(row[0])
            old = tuple(json.loads(row[1])["evidence"])
            conn.execute(
                _UPDATE,
                (belief.status.value, belief.confidence, state, meta, *_columns(belief), belief.last_seq, at_us, bid),
            )
        gone = set(old) - set(belief.evidence)
        if gone:
            conn.execute(
                f"DELETE FROM belief_evidence WHERE bid = ? AND item_id IN ({_marks(len(gone))})", (bid, *sorted(gone))
            )
        conn.executemany(
            "INSERT OR IGNORE INTO belief_evidence (bid, item_id) VALUES (?, ?)",
            [(bid, e) for e in belief.evidence if e not in old],
        )


def _delete(conn: sqlite3.Connection, ns: str, from_kind: str, keys: Sequence[str]) -> None:
    for key in keys:
        row = conn.execute(
            "SELECT bid, text FROM beliefs WHERE ns = ? AND from_kind = ? AND key = ?", (ns, from_kind, key)
        ).fetchone()
        if row is None:
            continue
        bump_version(conn)
        bid, text = int(row[0]), str(row[1])
        conn.execute("INSERT INTO beliefs_fts (beliefs_fts, rowid, text) VALUES ('delete', ?, ?)", (bid, text))
        conn.execute("DELETE FROM belief_evidence WHERE bid = ?", (bid,))
        conn.execute("DELETE FROM belief_anchors WHERE bid = ?", (bid,))
        conn.execute("DELETE FROM beliefs WHERE bid = ?", (bid,))


def build_step(
    conn: sqlite3.Connection, ns: str, kind: str, at_us: int, chunk: int = BUILD_CHUNK
) -> tuple[set[str], bool]:
    """One build transaction for scope ``(ns, kind)``: read past the watermark, merge, save, move the mark.

    Returns:
        ``(changed, more)``: ids of the beliefs created or changed, and whether items remain past the new mark.
    """
    mark = conn.execute("SELECT built_seq FROM scopes WHERE ns = ? AND kind = ?", (ns, kind)).fetchone()
    if mark is None:
        return set(), False
    rows = conn.execute(
        "SELECT i.seq, i.id, b.item FROM items i JOIN bodies b ON b.seq = i.seq "
        "WHERE i.ns = ? AND i.kind = ? AND i.seq > ? ORDER BY i.seq LIMIT ?",
        (ns, kind, int(mark[0]), chunk + 1),
    ).fetchall()
    more = len(rows) > chunk
    rows = rows[:chunk]
    if not rows:
        return set(), False
    sources = [SourceItem(seq=int(seq), id=str(item_id), item=parse_item(body)) for seq, item_id, body in rows]
    statements = extract(sources)
    changed: list[Belief] = []
    if statements:
        want = lookup(statements)
        existing = _candidates(conn, ns, kind, want)
        changed = merge(statements, existing.values())
        _save(conn, ns, kind, changed, at_us)
    conn.execute(
        "UPDATE scopes SET built_seq = ?, last_build = max(?, last_write) WHERE ns = ? AND kind = ?",
        (int(rows[-1][0]), at_us, ns, kind),
    )
    namespace = ns_of_key(ns)
    return {belief_id(namespace, kind, b.key) for b in changed}, more


def retract(conn: sqlite3.Connection, removed_ids: Sequence[str]) -> int:
    """Shrink or delete the beliefs derived from ``removed_ids`` (in the caller's transaction).

    Returns:
        How many beliefs were deleted.
    """
    affected: dict[tuple[str, str], dict[int, Belief]] = {}
    for chunk in _chunks(list(dict.fromkeys(removed_ids))):
        for bid, ns, from_kind, state in conn.execute(
            "SELECT b.bid, b.ns, b.from_kind, b.state FROM beliefs b WHERE b.bid IN "
            f"(SELECT bid FROM belief_evidence WHERE item_id IN ({_marks(len(chunk))}))",
            chunk,
        ):
            affected.setdefault((str(ns), str(from_kind)), {})[int(bid)] = Belief.from_state(json.loads(state))
    deleted = 0
    for (ns, from_kind), beliefs in sorted(affected.items()):
        subjects = {b.subject for b in beliefs.values()}
        siblings = {
            bid: b
            for bid, b in _load(conn, ns, from_kind, "subject IN ({marks})", sorted(subjects)).items()
            if bid not in beliefs
        }
        changed, gone = retract_beliefs(list(beliefs.values()), removed_ids, siblings.values())
        _delete(conn, ns, from_kind, gone)
        _save(conn, ns, from_kind, changed, now_us())
        deleted += len(gone)
    return deleted


# reads --------------------------------------------------------------------------------------------------
_HIT_COLUMNS = "b.bid, b.id, b.text, b.meta, b.confidence, b.state"


def _hits(
    conn: sqlite3.Connection, ranked: Sequence[tuple[int, float]], cache: dict[int, Hit] | None = None
) -> list[Hit]:
    """The ranked beliefs as hits, best first; ``cache`` (``BeliefRows.hits``) holds and keeps built ones."""
    if not ranked:
        return []
    rows: dict[int, Hit] = {}
    missing = [bid for bid, _ in ranked if cache is None or bid not in cache]
    for chunk in _chunks(missing):
        for bid, hid, text, meta, conf, state in conn.execute(
            f"SELECT {_HIT_COLUMNS} FROM beliefs b WHERE b.bid IN ({_marks(len(chunk))})", chunk
        ):
            rows[int(bid)] = Hit.model_construct(
                id=str(hid),
                kind=ItemKind.LEARNING,
                text=str(text),
                meta=MemoryMeta.model_validate_json(meta),
                score=0.0,
                confidence=float(conf),
                derived_from=tuple(json.loads(state)["evidence"]),
            )
    if cache is not None:
        cache.update(rows)
        rows = {bid: cache[bid] for bid, _ in ranked if bid in cache}
    return [_scored(rows[bid], score) for bid, score in ranked if bid in rows]


def _scored(hit: Hit, score: float) -> Hit:
    return hit.model_copy(update={"score": score})


def rank(
    conn: sqlite3.Connection,
    flt: MetaFilter,
    query: str | None,
    mode: FetchMode,
    limit: int,
    index: BeliefIndex | None = None,
) -> list[Hit]:
    """Active beliefs the filter admits: ranked for ``query`` in ``mode``; else most confident, then newest.

    With ``index`` (the engine's per-process ``BeliefIndex``), the ranking data comes from its arrays when they
    hold the read's snapshot, else from SQL; either way the result is the same.
    """
    where = compile_filter(flt, "b", beliefs=True)
    where.add("b.status = ?", BeliefStatus.ACTIVE.value)
    if query is None:
        rows = conn.execute(
            f"SELECT b.bid FROM beliefs b WHERE {where.sql} "
            "ORDER BY b.confidence DESC, coalesce(b.observed_at, b.updated_at) DESC, b.bid LIMIT ?",
            (*where.params, limit),
        ).fetchall()
        return _hits(conn, [(int(r[0]), 0.0) for r in rows])
    held = index.rows(conn, flt) if index is not None else None
    if held is None:
        held = _sql_rows(conn, where.sql, where.params)
    n = len(held.keys)
    if n == 0:
        return []
    keys, when, conf = held.keys, held.when_us, held.confidence
    matches = fts_matches(conn, "beliefs_fts", query, n) if mode is not FetchMode.VECTOR else None
    empty = (keys[:0], np.zeros(0))
    cos = None
    if mode is not FetchMode.KEYWORD:
        cos = (held.vectors @ query_vector(query)).astype(np.float64)
    cands = Candidates.build(keys, when, conf, cos, matches or empty)
    if mode is FetchMode.KEYWORD:
        keep = cands.matched
        cands = Candidates(keys[keep], when[keep], conf[keep], None, cands.lexical[keep], cands.matched[keep])
    hit_keys, scores = score(cands, mode)
    return _hits(conn, order(hit_keys, scores, limit), held.hits)


def _sql_rows(conn: sqlite3.Connection, where_sql: str, params: Sequence[Any]) -> BeliefRows:
    select = "SELECT b.bid, b.vec, coalesce(b.observed_at, b.updated_at), b.confidence FROM beliefs b"
    rows = conn.execute(f"{select} WHERE {where_sql} ORDER BY b.bid", params).fetchall()
    n = len(rows)
    return BeliefRows(
        keys=np.fromiter((r[0] for r in rows), dtype=np.int64, count=n),
        vectors=np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(n, EMBED_DIM),
        when_us=np.fromiter((r[2] for r in rows), dtype=np.int64, count=n),
        confidence=np.fromiter((r[3] for r in rows), dtype=np.float64, count=n),
    )

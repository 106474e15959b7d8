"""Beliefs in PostgreSQL: the incremental build per scope, retraction on delete, and belief reads.

A *scope* is ``(ns, kind)``. ``build_scope`` builds one in one transaction holding a transaction-scoped
advisory lock on the scope (``pg_advisory_xact_lock``), so two workers on two machines never build one scope
at once, with or without Redis; the lock goes with the commit or with a dropped connection.

**The watermark is a transaction id, not a sequence number.** A sequence is allocated when a row is inserted
but the row becomes visible when its transaction commits, so row 10 can commit after row 11: a build that read
up to 11 and stored "built through 11" would skip 10 forever. Each item row records the id of the
transaction that wrote it (``items.tx``, ``pg_current_xact_id()``), and a build stores as its watermark the
``xmin`` of the snapshot it started with (``pg_snapshot_xmin(pg_current_snapshot())``): every transaction below
it had finished when the build started, so the build saw all of their rows. The next build reads the rows with
``tx >= watermark``: whatever committed since, in any order (PostgreSQL docs §9.27.5, "Transaction ID and
Snapshot Information Functions"). A row read twice (its transaction was still the oldest running one) merges
as a no-op: the distiller skips evidence already recorded (``held``).

The distiller is the pure one in ``memory_core.beliefs`` (extract, lookup, merge, retract), as on SQLite;
the storage mirrors SQLite's (``beliefs``, ``belief_evidence``, ``belief_anchors``). ``retract`` runs in the
deleting transaction and takes the lock of every scope it touches, in sorted order (no deadlock between two
deletes, and a build never sees half a retraction).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from memory_core.beliefs import (
    ANCHOR_WINDOW,
    Belief,
    BeliefStatus,
    Lookup,
    SourceItem,
    Statement,
    belief_id,
    extract,
    lookup,
    merge,
)
from memory_core.beliefs import retract as retract_beliefs
from memory_core.engines.sqlite.rows import META_COLUMN_NAMES, meta_columns, now_us, ns_of_key
from memory_core.items import parse_item
from memory_core.memory_log import RecordOp
from memory_core.meta import MetaFilter
from memory_core.namespace import Reach
from memory_core.query import FetchMode, Hit
from memory_core.scoring import embed, tokenize

from . import log, log_ops
from .driver import Conn
from .filters import admits_beliefs, compile_filter, reach_sql
from .fusion import fuse
from .schema import SCHEMA
from .search import Candidates, Features, Frequencies, statement

__all__ = ["BUILD_CHUNK", "build_scope", "evidence_of", "rank", "retract", "scope_lock", "scopes_to_build"]

BUILD_CHUNK: Final = 500
"""Items read and merged per round of a build."""
_NEWEST: Final = "observed_at DESC NULLS LAST, last_seq DESC, key DESC"
_BELIEF_COLUMNS = (
    "id", "ns", "from_kind", "key", "subject", "status", "text", "learning_kind", "confidence", "state", "meta",
    *META_COLUMN_NAMES, "last_seq", "updated_at", "words", "vec",
)  # fmt: skip
_INSERT = (
    f"INSERT INTO {SCHEMA}.beliefs ({', '.join(_BELIEF_COLUMNS)}) "
    f"VALUES ({', '.join('%s' for _ in _BELIEF_COLUMNS)}) RETURNING bid"
)
_UPDATE = (
    f"UPDATE {SCHEMA}.beliefs SET status = %s, confidence = %s, state = %s, meta = %s, "
    + ", ".join(f"{c} = %s" for c in META_COLUMN_NAMES)
    + ", last_seq = %s, updated_at = %s WHERE bid = %s"
)


def scope_lock(conn: Conn, ns: str, kind: str) -> None:
    """Take the transaction-scoped advisory lock of scope ``(ns, kind)`` (released at commit or rollback)."""
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"memory-core:build:{ns}#{kind}",))


def _words(text: str) -> str:
    return " ".join(tokenize(text))


def _vec(text: str) -> list[float]:
    return [float(v) for v in embed(text)]


# loading ------------------------------------------------------------------------------------------------
def _load(conn: Conn, ns: str, kind: str, cond: str, values: Sequence[Any]) -> dict[int, Belief]:
    if not values:
        return {}
    sql = f"SELECT bid, state FROM {SCHEMA}.beliefs WHERE ns = %s AND from_kind = %s AND {cond}"
    return {int(bid): Belief.from_state(json.loads(state)) for bid, state in conn.execute(sql, (ns, kind, values))}


def _candidates(conn: Conn, ns: str, kind: str, want: Lookup) -> dict[int, Belief]:
    """The beliefs ``want`` names: by key, the active one per subject, the newest ``ANCHOR_WINDOW`` per anchor."""
    found = _load(conn, ns, kind, "key = ANY(%s::text[])", sorted(want.keys))
    found.update(
        _load(
            conn,
            ns,
            kind,
            f"subject = ANY(%s::text[]) AND status = '{BeliefStatus.ACTIVE.value}'",
            sorted(want.subjects),
        )
    )
    bids: set[int] = set()
    for anchor in sorted(want.anchors):
        bids.update(
            int(r[0])
            for r in conn.execute(
                f"SELECT bid FROM {SCHEMA}.belief_anchors WHERE ns = %s AND from_kind = %s AND anchor = %s "
                "ORDER BY first_seq DESC, key DESC LIMIT %s",
                (ns, kind, anchor, ANCHOR_WINDOW),
            )
        )
    found.update(_load(conn, ns, kind, "bid = ANY(%s::bigint[])", sorted(bids - found.keys())))
    return found


def _held(conn: Conn, ns: str, kind: str, item_ids: Sequence[str]) -> set[tuple[str, str]]:
    """``(belief key, item id)`` pairs already recorded for these items."""
    rows = conn.execute(
        f"SELECT b.key, e.item_id FROM {SCHEMA}.belief_evidence e JOIN {SCHEMA}.beliefs b ON b.bid = e.bid "
        "WHERE e.item_id = ANY(%s::text[]) AND b.ns = %s AND b.from_kind = %s",
        (list(item_ids), ns, kind),
    )
    return {(str(k), str(i)) for k, i in rows}


# saving -------------------------------------------------------------------------------------------------
def _put_anchors(conn: Conn, ns: str, kind: str, bid: int, belief: Belief) -> None:
    if belief.free and belief.anchors:
        conn.cursor().executemany(
            f"INSERT INTO {SCHEMA}.belief_anchors (ns, from_kind, anchor, first_seq, key, bid) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            [(ns, kind, a, belief.first_seq, belief.key, bid) for a in belief.anchors],
        )


def _save(conn: Conn, ns: str, kind: str, beliefs: Sequence[Belief], at_us: int) -> None:
    """Insert or update ``beliefs`` and append the evidence each gained (``Belief.added``)."""
    for belief in beliefs:
        state = json.dumps(belief.to_state(), separators=(",", ":"), ensure_ascii=False)
        row = conn.execute(
            f"SELECT bid, state FROM {SCHEMA}.beliefs WHERE ns = %s AND from_kind = %s AND key = %s",
            (ns, kind, belief.key),
        ).fetchone()
        if row is None:
            values = (
                belief_id(ns_of_key(ns), kind, belief.key), ns, kind, belief.key, belief.subject,
                belief.status.value, belief.text, belief.kind.value, belief.confidence, state, belief.meta.to_json(),
                *meta_columns(belief.meta), belief.last_seq, at_us, _words(belief.text), _vec(belief.text),
            )  # fmt: skip
            got = conn.execute(_INSERT, values).fetchone()
            bid = int(got[0]) if got else 0
            _put_anchors(conn, ns, kind, bid, belief)
        else:
            bid = int(row[0])
            old = Belief.from_state(json.loads(row[1]))
            conn.execute(
                _UPDATE,
                (
                    belief.status.value, belief.confidence, state, belief.meta.to_json(), *meta_columns(belief.meta),
                    belief.last_seq, now_us(), bid,
                ),
            )  # fmt: skip
            if belief.text != old.text:
                conn.execute(
                    f"UPDATE {SCHEMA}.beliefs SET text = %s, learning_kind = %s, words = %s, vec = %s WHERE bid = %s",
                    (belief.text, belief.kind.value, _words(belief.text), _vec(belief.text), bid),
                )
            if (belief.anchors, belief.first_seq) != (old.anchors, old.first_seq):
                conn.execute(f"DELETE FROM {SCHEMA}.belief_anchors WHERE bid = %s", (bid,))
                _put_anchors(conn, ns, kind, bid, belief)
        if belief.added:
            conn.cursor().executemany(
                f"INSERT INTO {SCHEMA}.belief_evidence (bid, item_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                [(bid, e) for e in belief.added],
            )


def _delete(conn: Conn, ns: str, kind: str, keys: Sequence[str]) -> None:
    if keys:  # evidence and anchors go by ON DELETE CASCADE
        rows = conn.execute(
            f"DELETE FROM {SCHEMA}.beliefs WHERE ns = %s AND from_kind = %s AND key = ANY(%s::text[]) "
            "RETURNING id, log_status",
            (ns, kind, list(keys)),
        ).fetchall()  # a tombstone for each logged one (``docs/log-model.md`` rule 6)
        why = "built only on removed memories"
        log.append(conn, [(RecordOp.TOMBSTONE, str(r[0]), None, why) for r in rows if r[1] is not None])


# building -----------------------------------------------------------------------------------------------
def scopes_to_build(conn: Conn, reach: Reach, kinds: Sequence[str]) -> list[tuple[str, str, bool]]:
    """``(ns key, kind, due)`` for every scope the reach and kinds admit that holds items, in order.

    ``due``: rows were written at or past its watermark (an index probe on ``(ns, kind, tx)``).
    """
    if not kinds:
        return []
    sql, params = reach_sql(reach, "s.ns")
    rows = conn.execute(
        f"SELECT s.ns, s.kind, EXISTS (SELECT 1 FROM {SCHEMA}.items i WHERE i.ns = s.ns AND i.kind = s.kind "
        f"AND i.tx >= s.built_xmin) FROM {SCHEMA}.scopes s WHERE s.kind = ANY(%s::text[]) AND ({sql}) "
        f"AND EXISTS (SELECT 1 FROM {SCHEMA}.items i WHERE i.ns = s.ns AND i.kind = s.kind) ORDER BY s.ns, s.kind",
        [list(kinds), *params],
    ).fetchall()
    return [(str(ns), str(kind), bool(due)) for ns, kind, due in rows]


def _statements(rows: Sequence[tuple[int, str, str]]) -> list[Statement]:
    sources = [SourceItem(seq=seq, id=item_id, item=parse_item(body)) for seq, item_id, body in rows]
    return list(extract(sources))


def build_scope(conn: Conn, ns: str, kind: str, *, chunk: int = BUILD_CHUNK) -> set[str]:
    """Build scope ``(ns key, kind)`` in the caller's transaction (module docstring); ids of beliefs changed.

    The scope's row is not locked while the build runs (only its final watermark update is), so live writes to
    the scope never wait behind a build.

    ``last_build`` (what ``scopes`` reports ``due`` from) moves only when the build covered every write: when
    ``last_write`` is still the one its starting snapshot read. A write committed after that snapshot may have
    been missed by the build's reads, and ``last_write`` is strictly increasing (``writes``), so it keeps the scope
    due until a build covers it; the row-level watermark (``built_xmin``) already rereads it. SQLite's rule
    (``engines.sqlite.beliefs_store``): ``last_build`` moves only when no item is past the build's watermark.
    """
    scope_lock(conn, ns, kind)
    mark = conn.execute(
        f"SELECT built_xmin, pg_snapshot_xmin(pg_current_snapshot()), last_write FROM {SCHEMA}.scopes "
        "WHERE ns = %s AND kind = %s",
        (ns, kind),
    ).fetchone()
    if mark is None:
        return set()
    built, horizon, seen_write = mark
    changed: set[str] = set()
    namespace = ns_of_key(ns)
    after = 0
    while True:
        rows = conn.execute(
            f"SELECT seq, id, item FROM {SCHEMA}.items WHERE ns = %s AND kind = %s AND tx >= %s AND seq > %s "
            "AND status = 'live' ORDER BY seq LIMIT %s",  # a retracted or stale source builds nothing
            (ns, kind, built, after, chunk),
        ).fetchall()
        if not rows:
            break
        after = int(rows[-1][0])
        statements = _statements([(int(r[0]), str(r[1]), str(r[2])) for r in rows])
        if statements:
            existing = _candidates(conn, ns, kind, lookup(statements))
            held = _held(conn, ns, kind, sorted({st.evidence for st in statements}))
            beliefs = merge(statements, existing.values(), held)
            _save(conn, ns, kind, beliefs, now_us())
            changed.update(belief_id(namespace, kind, b.key) for b in beliefs)
        if len(rows) < chunk:
            break
    conn.execute(  # read committed: ``last_write`` here is the newest committed one (a write in flight is waited for)
        f"UPDATE {SCHEMA}.scopes SET built_xmin = %s, last_build = CASE WHEN last_write = %s "
        "THEN greatest(%s, last_write) ELSE last_build END WHERE ns = %s AND kind = %s",
        (horizon, seen_write, now_us(), ns, kind),
    )
    # one log transaction at the build's end; after the scope row, the order a store locks them in (no deadlock)
    log_ops.commit_build(conn, ns, kind, sorted(changed))
    return changed


def retract(conn: Conn, removed_ids: Sequence[str], scopes: Sequence[tuple[str, str]]) -> int:
    """Rebuild or delete the beliefs derived from ``removed_ids`` (already deleted), in the caller's transaction.

    Args:
        conn: The deleting transaction.
        removed_ids: Ids of the deleted items.
        scopes: The ``(ns key, kind)`` scopes they were in, sorted (their build locks are taken in this order).

    Returns:
        How many beliefs were deleted.
    """
    for ns, kind in scopes:
        scope_lock(conn, ns, kind)
    removed = list(dict.fromkeys(removed_ids))
    affected: dict[tuple[str, str], dict[int, Belief]] = {}
    for bid, ns, kind, state in conn.execute(
        f"SELECT b.bid, b.ns, b.from_kind, b.state FROM {SCHEMA}.beliefs b WHERE b.bid IN "
        f"(SELECT bid FROM {SCHEMA}.belief_evidence WHERE item_id = ANY(%s::text[]))",
        (removed,),
    ):
        affected.setdefault((str(ns), str(kind)), {})[int(bid)] = Belief.from_state(json.loads(state))
    conn.execute(f"DELETE FROM {SCHEMA}.belief_evidence WHERE item_id = ANY(%s::text[])", (removed,))
    deleted = 0
    for (ns, kind), beliefs in sorted(affected.items()):
        survivors = {b.key: _survivors(conn, bid) for bid, b in beliefs.items()}
        others: list[Belief] = []
        for subject in sorted({b.subject for b in beliefs.values() if b.status is BeliefStatus.ACTIVE}):
            row = conn.execute(
                f"SELECT state FROM {SCHEMA}.beliefs WHERE ns = %s AND from_kind = %s AND subject = %s "
                f"AND status = %s AND NOT (bid = ANY(%s::bigint[])) ORDER BY {_NEWEST} LIMIT 1",
                (ns, kind, subject, BeliefStatus.SUPERSEDED.value, list(beliefs)),
            ).fetchone()
            if row is not None:
                others.append(Belief.from_state(json.loads(row[0])))
        changed, gone = retract_beliefs(list(beliefs.values()), survivors, others)
        _delete(conn, ns, kind, gone)
        _save(conn, ns, kind, changed, now_us())
        log_ops.publish(conn, [belief_id(ns_of_key(ns), kind, b.key) for b in changed], "rebuilt")
        deleted += len(gone)
    return deleted


def _survivors(conn: Conn, bid: int) -> list[SourceItem]:
    rows = conn.execute(
        f"SELECT i.seq, i.id, i.item FROM {SCHEMA}.belief_evidence e JOIN {SCHEMA}.items i ON i.id = e.item_id "
        "WHERE e.bid = %s ORDER BY i.seq",
        (bid,),
    ).fetchall()
    return [SourceItem(seq=int(seq), id=str(item_id), item=parse_item(body)) for seq, item_id, body in rows]


# reads --------------------------------------------------------------------------------------------------
def _evidence(conn: Conn, bids: Sequence[int]) -> dict[int, tuple[str, ...]]:
    """``bid → ids of the items it was derived from``, in write order."""
    out: dict[int, list[str]] = {}
    for bid, item_id in conn.execute(
        f"SELECT e.bid, i.id FROM {SCHEMA}.belief_evidence e JOIN {SCHEMA}.items i ON i.id = e.item_id "
        "WHERE e.bid = ANY(%s::bigint[]) ORDER BY e.bid, i.seq",
        (list(bids),),
    ):
        out.setdefault(int(bid), []).append(str(item_id))
    return {bid: tuple(ids) for bid, ids in out.items()}


def evidence_of(conn: Conn, belief_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """``belief id → ids of the items it was derived from`` in write order (unknown ids left out)."""
    by_bid = {
        int(bid): str(hid)
        for bid, hid in conn.execute(
            f"SELECT bid, id FROM {SCHEMA}.beliefs WHERE id = ANY(%s::text[])", (list(dict.fromkeys(belief_ids)),)
        )
    }
    evidence = _evidence(conn, sorted(by_bid))
    return {hid: evidence.get(bid, ()) for bid, hid in by_bid.items()}


def _hits(conn: Conn, ranked: Sequence[tuple[int, float]]) -> list[Hit]:
    if not ranked:
        return []
    bids = [bid for bid, _ in ranked]
    rows: dict[int, Hit] = {}
    for bid, hid, text, meta, conf, derived in conn.execute(  # one statement: the beliefs with their evidence
        f"SELECT b.bid, b.id, b.text, b.meta, b.confidence, ARRAY(SELECT i.id FROM {SCHEMA}.belief_evidence e "
        f"JOIN {SCHEMA}.items i ON i.id = e.item_id WHERE e.bid = b.bid ORDER BY i.seq) "
        f"FROM {SCHEMA}.beliefs b WHERE b.bid = ANY(%s::bigint[])",
        (bids,),
    ):
        rows[int(bid)] = _hit(hid, text, meta, conf, derived)
    return [rows[bid].model_copy(update={"score": score}) for bid, score in ranked if bid in rows]


_BODY: Final = (
    "i.id, i.text, i.meta, i.confidence, "
    f"ARRAY(SELECT x.id FROM {SCHEMA}.belief_evidence e JOIN {SCHEMA}.items x ON x.id = e.item_id "
    "WHERE e.bid = i.bid ORDER BY x.seq)"
)
"""A belief hit's columns (``_hit``), read with the candidates' signals: the page needs no second statement."""


def _hit(hid: Any, text: Any, meta: Any, conf: Any, derived: Any) -> Hit:
    return Hit.of_belief(str(hid), str(text), meta, float(conf), [str(d) for d in derived or ()])


@dataclass(frozen=True)
class Ranking:
    """A belief ranking's one statement (``plan``) and how its rows become hits (``hits``).

    Attributes:
        plan: The candidates' statement, each row also holding the belief's hit columns; None: no candidates.
        mode: The fetch mode.
        limit: Most hits.
    """

    plan: Candidates | None
    mode: FetchMode
    limit: int

    def hits(self, rows: Sequence[Sequence[Any]]) -> list[Hit]:
        """The best ``limit`` hits from the statement's rows (recency measured from now)."""
        if self.plan is None:
            return []
        ranked = fuse(self.plan.signals(rows), self.mode, now_us(), self.limit)
        by_bid = {int(r[0]): r for r in rows}
        return [_hit(*by_bid[bid][8:13]).model_copy(update={"score": score}) for bid, score in ranked]


def ranking(
    conn: Conn,
    flt: MetaFilter,
    query: str,
    mode: FetchMode,
    limit: int,
    features: Features,
    frequencies: Frequencies,
    served: tuple[str, list[Any]] = ("i.log_status = 'live'", []),
    stats: tuple[dict[str, float], float] | None = None,
) -> Ranking:
    """The statement ranking the active beliefs ``flt`` admits for ``query`` (``rank``'s, to run with others).

    A filter that admits no belief (no ``learning``, or tags without ``belief``) needs no statement.
    """
    if not admits_beliefs(flt):
        return Ranking(None, mode, limit)
    where = compile_filter(flt, "i", beliefs=True)
    where.add("i.status = %s", BeliefStatus.ACTIVE.value)
    where.add(served[0], *served[1])
    plan = statement(
        conn,
        table=f"{SCHEMA}.beliefs",
        key="bid",
        where=where,
        query=query,
        mode=mode,
        want=limit,
        features=features,
        frequencies=frequencies,
        stats=stats,
        columns=_BODY,
    )
    return Ranking(plan, mode, limit)


def rank(
    conn: Conn,
    flt: MetaFilter,
    query: str | None,
    mode: FetchMode,
    limit: int,
    features: Features,
    frequencies: Frequencies,
    served: tuple[str, list[Any]] = ("i.log_status = 'live'", []),
    stats: tuple[dict[str, float], float] | None = None,
) -> list[Hit]:
    """Active beliefs the filter admits: ranked for ``query`` in ``mode``; else most confident, then newest.

    ``served`` is the predicate (over ``i``) of the beliefs the log lets a read serve: live ones now
    (``log_view.served_beliefs`` as of an LSN). ``stats``: ``Frequencies.read``'s answer for the beliefs
    table, when the caller read it with the items'. A ranked read is one statement (``ranking``).
    """
    if query is not None:
        ranked = ranking(conn, flt, query, mode, limit, features, frequencies, served, stats)
        if ranked.plan is None:
            return []
        return ranked.hits(conn.execute(ranked.plan.sql, ranked.plan.params).fetchall())
    where = compile_filter(flt, "i", beliefs=True)
    where.add("i.status = %s", BeliefStatus.ACTIVE.value)
    where.add(served[0], *served[1])
    rows = conn.execute(
        f"SELECT i.bid FROM {SCHEMA}.beliefs i WHERE {where.sql} "
        "ORDER BY i.confidence DESC, coalesce(i.observed_at, i.updated_at) DESC, i.bid LIMIT %s",
        [*where.params, limit],
    ).fetchall()
    return _hits(conn, [(int(r[0]), 0.0) for r in rows])

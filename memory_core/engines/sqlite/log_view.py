"""What a SQLite read serves under the log (``docs/log-model.md`` rule 7), now or as of an LSN.

Reads serve only ``live`` memories, and by default only the ``short``, ``mid`` and ``long`` tiers (a request's
``tiers`` names others); ``list`` serves live memories of every tier; ``get`` shows every held memory with its
status and tier. Now, the materialised columns say it (``items.status``/``tier``; the few items a standard read
leaves out are one partial index, ``items_unserved``, so a read on a store where nothing was retracted or
archived costs one empty index probe). As of an LSN (``SQLiteView``), the memories changed since
(``log_ops.Past``) take their state then; every other memory is as it is now. Content forgotten since is not in
the file, so no past view shows it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from memory_core.beliefs import Belief, BeliefStatus
from memory_core.memory_log import STANDARD_TIERS, MemoryStatus, Tier
from memory_core.meta import MetaFilter
from memory_core.query import FetchMode, Hit

from . import beliefs_store
from .belief_index import BeliefIndex, _evidence, _sql_rows
from .filters import compile_filter
from .fts import fts_matches
from .log_ops import Past
from .read_memo import ReadMemo
from .search import BoolArray, Candidates, IntArray, order, query_vector, score

__all__ = ["annotate", "annotate_each", "listed_sql", "rank_beliefs", "served_mask", "shown_ids", "states"]


def _seqs(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, int]:
    rows = conn.execute("SELECT id, seq FROM items WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(ids),))
    return {str(i): int(s) for i, s in rows}


def served_mask(
    conn: sqlite3.Connection, keys: IntArray, tiers: Sequence[Tier], past: Past | None, memo: ReadMemo | None = None
) -> BoolArray | None:
    """Which candidate items (``keys``: seqs) a ranked read serves; None when every one is.

    Args:
        conn: The read's connection.
        keys: Candidate seqs.
        tiers: The request's tiers (empty: every tier but archive).
        past: The state as of an LSN (None: now).
        memo: The transaction's shared values (the unserved rows are read once per transaction), if any.
    """
    wanted = set(tiers or STANDARD_TIERS)
    if wanted >= set(STANDARD_TIERS):
        rows = memo.unserved if memo is not None else None
        if rows is None:
            rows = [
                (int(s), str(st), str(t))
                for s, st, t in conn.execute(
                    "SELECT seq, status, tier FROM items INDEXED BY items_unserved "
                    "WHERE status != 'live' OR tier = 'archive'"
                )
            ]
            if memo is not None:
                memo.unserved = rows
        hidden = [int(s) for s, st, t in rows if st != MemoryStatus.LIVE.value or Tier(t) not in wanted]
        mask = ~np.isin(keys, np.array(hidden, dtype=np.int64)) if hidden else None
    else:
        marks = ", ".join("?" for _ in wanted)
        allowed = [
            int(r[0])
            for r in conn.execute(
                f"SELECT seq FROM items WHERE status = 'live' AND tier IN ({marks})", [t.value for t in wanted]
            )
        ]
        mask = np.isin(keys, np.array(allowed, dtype=np.int64))
    if past is not None and past.then:
        seqs = _seqs(conn, list(past.then))
        changed = np.array(list(seqs.values()), dtype=np.int64)
        ok = [
            seq
            for item_id, seq in seqs.items()
            if (h := past.then[item_id]) is not None and h.status is MemoryStatus.LIVE and h.tier in wanted
        ]
        base = np.ones(len(keys), dtype=bool) if mask is None else mask
        mask = (base & ~np.isin(keys, changed)) | np.isin(keys, np.array(ok, dtype=np.int64))
    if mask is None or bool(mask.all()):
        return None
    return mask


def listed_sql(past: Past | None, *, every_status: bool) -> tuple[str, list[Any]]:
    """The predicate on ``items i`` of a listing: live items (``list``) or every held one (``export``)."""
    if past is None:
        return ("1", []) if every_status else ("i.status = 'live'", [])
    if every_status:
        absent = [i for i, h in past.then.items() if h is None]
        return "i.id NOT IN (SELECT value FROM json_each(?))", [json.dumps(absent)]
    return (
        "(i.status = 'live' AND i.id NOT IN (SELECT value FROM json_each(?))) "
        "OR i.id IN (SELECT value FROM json_each(?))",
        [json.dumps(past.ids(served=False)), json.dumps(past.ids(served=True))],
    )


_STATUS: Final = {s.value: s for s in MemoryStatus}
_TIER: Final = {t.value: t for t in Tier}


def shown_ids(ids: Sequence[str], past: Past | None) -> list[str]:
    """``ids`` without those not held at the view's LSN (all of them now)."""
    if past is None:
        return list(ids)
    return [i for i in ids if i not in past.then or past.then[i] is not None]


def annotate(conn: sqlite3.Connection, hits: Sequence[Hit], past: Past | None) -> list[Hit]:
    """``hits`` with each item's status and tier (now, or at the view's LSN)."""
    return annotate_each(conn, [hits], past)[0]


def states(conn: sqlite3.Connection, ids: Sequence[str], past: Past | None) -> dict[str, tuple[MemoryStatus, Tier]]:
    """``id → (status, tier)`` of the stored items among ``ids`` (now, or at the view's LSN), in one statement."""
    if not ids:
        return {}
    rows = conn.execute(
        "SELECT id, status, tier FROM items WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(list(ids)),)
    )
    state = {str(i): (_STATUS[s], _TIER[t]) for i, s, t in rows}
    if past is not None:
        for item_id in state:
            then = past.then.get(item_id)
            if then is not None:
                state[item_id] = (then.status, then.tier)
    return state


def annotate_each(conn: sqlite3.Connection, lists: Sequence[Sequence[Hit]], past: Past | None) -> list[list[Hit]]:
    """``annotate`` for several lists of hits of one read, in one statement."""
    ids = list(dict.fromkeys(h.id for hits in lists for h in hits))
    if not ids:
        return [[] for _ in lists]
    state = states(conn, ids, past)
    return [
        [h.model_copy(update={"status": state[h.id][0], "tier": state[h.id][1]}) if h.id in state else h for h in hits]
        for hits in lists
    ]


# beliefs ------------------------------------------------------------------------------------------------
def _belief_sets(conn: sqlite3.Connection, past: Past) -> tuple[list[str], list[str]]:
    """Beliefs the view hides although served now, and serves although not served now (live then, active)."""
    hidden = past.ids(served=False)
    shown: list[str] = []
    for item_id, status, state in conn.execute(
        "SELECT id, status, state FROM beliefs WHERE id IN (SELECT value FROM json_each(?))",
        (json.dumps(past.ids(served=True)),),
    ):
        if status != BeliefStatus.ACTIVE.value and Belief.from_state(json.loads(state)).status is BeliefStatus.ACTIVE:
            shown.append(str(item_id))
    return hidden, shown


def rank_beliefs(
    conn: sqlite3.Connection,
    flt: MetaFilter,
    query: str | None,
    mode: FetchMode,
    limit: int,
    index: BeliefIndex,
    past: Past | None,
) -> list[Hit]:
    """The beliefs a read serves (``beliefs_store.rank``), now or as of the view's LSN.

    A view whose LSN no belief changed since reads as now; otherwise its beliefs are ranked from SQL, the
    beliefs it hides left out and those stale or retracted since (active at its LSN) put back.
    """
    if past is None:
        return beliefs_store.rank(conn, flt, query, mode, limit, index)
    hidden, shown = _belief_sets(conn, past)
    if (
        not shown
        and not conn.execute(
            "SELECT 1 FROM beliefs WHERE id IN (SELECT value FROM json_each(?)) LIMIT 1", (json.dumps(hidden),)
        ).fetchone()
    ):
        return beliefs_store.rank(conn, flt, query, mode, limit, index)
    where = compile_filter(flt, "b", beliefs=True)
    where.add(
        "(b.status = 'active' AND b.id NOT IN (SELECT value FROM json_each(?))) "
        "OR b.id IN (SELECT value FROM json_each(?))",
        json.dumps(hidden),
        json.dumps(shown),
    )
    if query is None:
        rows = conn.execute(
            f"SELECT b.bid FROM beliefs b WHERE {where.sql} "
            "ORDER BY b.confidence DESC, coalesce(b.observed_at, b.updated_at) DESC, b.bid LIMIT ?",
            (*where.params, limit),
        ).fetchall()
        return _hits(conn, [(int(r[0]), 0.0) for r in rows])
    held = _sql_rows(conn, where.sql, where.params)
    if len(held.keys) == 0:
        return []
    keys, when, conf = held.keys, held.when_us, held.confidence
    matches = fts_matches(conn, "beliefs_fts", query, len(keys)) if mode is not FetchMode.VECTOR else None
    cos = (held.vectors @ query_vector(query)).astype(np.float64) if mode is not FetchMode.KEYWORD else None
    cands = Candidates.build(keys, when, conf, cos, matches or (keys[:0], np.zeros(0)))
    if mode is FetchMode.KEYWORD:
        keep = cands.matched
        cands = Candidates(keys[keep], when[keep], conf[keep], None, cands.lexical[keep], cands.matched[keep])
    hit_keys, scores = score(cands, mode)
    return _hits(conn, order(hit_keys, scores, limit))


def _hits(conn: sqlite3.Connection, ranked: Sequence[tuple[int, float]]) -> list[Hit]:
    """Belief hits in ranked order, whatever their status now (the view chose them)."""
    bids = [bid for bid, _ in ranked]
    evidence = _evidence(conn, bids)
    rows = {
        int(bid): (str(hid), str(text), str(meta), float(conf))
        for bid, hid, text, meta, conf in conn.execute(
            "SELECT bid, id, text, meta, confidence FROM beliefs WHERE bid IN (SELECT value FROM json_each(?))",
            (json.dumps(bids),),
        )
    }
    return [Hit.of_belief(*rows[bid], evidence.get(bid, ()), score=s) for bid, s in ranked if bid in rows]

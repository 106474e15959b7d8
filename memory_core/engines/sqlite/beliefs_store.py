"""Beliefs in SQLite: the incremental build per scope and provenance on delete (reads: ``belief_index``).

A *scope* is ``(ns, kind)``; ``scopes.built_seq`` is its watermark. ``build_scope`` builds one scope in rounds:

1. a read transaction takes at most ``BUILD_CHUNK`` items of the scope written after the watermark (an index
   range on ``(ns, kind, seq)``), and the pure distiller extracts their statements outside any lock;
2. write transactions (``BEGIN IMMEDIATE``) each re-read the watermark (if another build moved it, the round
   starts again from the new mark), then, ``MERGE_BATCH`` items at a time, load only the beliefs those
   statements can touch (by key, the *active* belief of each subject, the newest ``ANCHOR_WINDOW`` per
   anchor), merge, save, and move the watermark; a transaction commits once it has held the write lock
   ``LOCK_BUDGET_S``, and they are background writes (``connection``), so a live turn's write waits for at
   most one of them.

So a build's cost follows the new items, not the scope's size or a subject's history; a build with nothing
new reads one index entry per scope and takes no lock; two builds racing serialise on the write lock and give
the beliefs of one.

Beliefs live in ``beliefs`` (never listed, fetched or forgotten as items). A belief's state (JSON) is bounded:
its evidence is one ``belief_evidence`` row per item (appending is one insert; ``derived_from`` lists them in
write order by joining ``items``), with ``belief_anchors`` and ``beliefs_fts`` beside. On forget or erase
(``retract``, in the deleting transaction) the beliefs that lost evidence are rebuilt from their surviving
items (``memory_core.beliefs.retract``): text, FTS row, vector and anchors follow a new text.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from functools import lru_cache, partial
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
from memory_core.beliefs import (
    retract as retract_beliefs,
)
from memory_core.items import parse_item
from memory_core.memory_log import Held, MemoryStatus, RecordOp, Tier
from memory_core.meta import ItemKind
from memory_core.namespace import Reach
from memory_core.scoring import embed

from . import log
from .belief_index import bump_version, evidence_of, rank
from .connection import TX_BUDGET_S, Database, held_s, tally
from .filters import reach_sql
from .rows import META_COLUMN_NAMES, chunks, meta_columns, now_us, ns_of_key, placeholders, vec_blob

__all__ = [
    "BUILD_CHUNK",
    "BUILD_TX_ITEMS",
    "PUBLISH_MAX",
    "STAGING",
    "LOCK_BUDGET_S",
    "LOCK_GAP_S",
    "MERGE_BATCH",
    "build_scope",
    "commit_build",
    "evidence_of",
    "rank",
    "retract",
    "scopes_to_build",
]

BUILD_CHUNK: Final = 500
"""Most items one round reads and extracts (outside the write lock)."""
MERGE_BATCH: Final = 1
"""Items merged and saved between two looks at the clock inside a build transaction."""
LOCK_BUDGET_S: Final = TX_BUDGET_S
"""A build transaction commits once it has held the write lock this long, seconds (memory-core choice: a live
``store_with(accepted)`` waits for at most one build transaction; a build commits without an fsync under the
lock (``connection``: background writes), so a commit costs little and transactions can be short)."""
BUILD_TX_ITEMS: Final = 32
"""Most items one build transaction merges, whatever the clock says (``connection.Holds.most_items``)."""
PUBLISH_MAX: Final = 32
"""A build commits (``commit_build``) once it has changed this many beliefs since its last commit, so a commit's
transaction applies at most this many plus one item's (memory-core choice: a commit costs an ``UPDATE`` and a log
record per belief, and a big scope's build changes thousands)."""
LOCK_GAP_S: Final = 0.002
"""Pause between two write transactions of a build, seconds. A live write does not need it (a build is a
background write and stands back while a live write waits: ``connection``); it lets other background writers
(another build, an ingestion chunk, a host's fold) in rather than starving them (memory-core choice)."""
SOURCE_KINDS: Final = (ItemKind.DOCUMENT.value, ItemKind.CONVERSATION.value)
"""Item kinds beliefs are built from (learnings are never a source, reference §3)."""
_NOT_HOLDING: Final = frozenset({MemoryStatus.STALE.value, MemoryStatus.RETRACTED.value})
"""``beliefs.status`` of a belief that does not hold (``log``)."""
PENDING: Final = "pending:"
"""``beliefs.status`` prefix of a belief a build created and has not committed yet (``commit_build``): no read
serves it, and it has no log record yet."""
STAGING: Final = (
    "CREATE TABLE belief_staged (bid INTEGER PRIMARY KEY, ns TEXT NOT NULL, from_kind TEXT NOT NULL, "
    "subject TEXT NOT NULL, status TEXT NOT NULL, state TEXT NOT NULL, restore INTEGER NOT NULL)",
    "CREATE INDEX belief_staged_subject ON belief_staged(ns, from_kind, subject, status)",
    "CREATE TABLE belief_staged_evidence (bid INTEGER NOT NULL, item_id TEXT NOT NULL, PRIMARY KEY (bid, item_id)) "
    "WITHOUT ROWID",
    "CREATE INDEX belief_staged_item ON belief_staged_evidence(item_id)",
)
"""A build's changes to beliefs already published, held until its commit (``commit_build`` applies them):
``belief_staged`` the belief's new state (its build ``status``; ``restore``: it did not hold when staged, so the
commit writes its ``restore``), ``belief_staged_evidence`` the evidence it gained. No read looks at them; the
build's own later windows read them over the published rows (``_candidates``, ``_held``)."""
PARSED_STATES: Final = 8192
"""Distinct belief states ``_parsed`` keeps per process (a few MB; memory-core choice)."""
_NEWEST: Final = "observed_at DESC, last_seq DESC, key DESC"
"""SQL order of a subject's members, newest first, as ``Belief.newness`` then key (NULL, undated, sorts
lowest: sqlite.org/datatype3.html §4.1)."""

_BELIEF_COLUMNS = (
    "id", "ns", "from_kind", "key", "subject", "status", "text", "learning_kind", "confidence", "state", "meta",
    *META_COLUMN_NAMES, "last_seq", "updated_at", "vec", "version",
)  # fmt: skip
_INSERT = f"INSERT INTO beliefs ({', '.join(_BELIEF_COLUMNS)}) VALUES ({', '.join('?' for _ in _BELIEF_COLUMNS)})"
_UPDATE = (
    "UPDATE beliefs SET status = ?, confidence = ?, state = ?, meta = ?, "
    + ", ".join(f"{c} = ?" for c in META_COLUMN_NAMES)
    + ", last_seq = ?, updated_at = ?, version = ? WHERE bid = ?"
)
_Row = tuple[int, str, str]
"""One item read for a round: ``(seq, id, its JSON)``."""
_Group = tuple[int, str, list[Statement]]
"""One item of a round after extraction: ``(seq, id, its statements)``."""


# loading ------------------------------------------------------------------------------------------------
@lru_cache(maxsize=PARSED_STATES)
def _vec(text: str) -> bytes:
    """The stored vector of a belief's text (``scoring.embed``), computed once per process per text.

    A build computes its statements' before the write lock (``_statements``): a belief reads as one of them.
    """
    return vec_blob(embed(text))


@lru_cache(maxsize=PARSED_STATES)
def _parsed(state: str) -> Belief:
    """The belief a stored state (JSON text) describes, parsed once per process per distinct state.

    A ``Belief`` is immutable, so one parsed value serves every window that loads the same row unchanged
    (issue 12: parsing the candidates' states was most of a build window's time under the write lock).
    """
    return Belief.from_state(json.loads(state))


def _load(conn: sqlite3.Connection, ns: str, from_kind: str, where: str, values: Sequence[Any]) -> dict[int, Belief]:
    out: dict[int, Belief] = {}
    for chunk in chunks(values):
        cond = where.format(marks=placeholders(len(chunk)))
        sql = f"SELECT bid, state FROM beliefs WHERE ns = ? AND from_kind = ? AND {cond}"
        for bid, state in conn.execute(sql, (ns, from_kind, *chunk)):
            out[int(bid)] = _parsed(state)
    return out


def _candidates(conn: sqlite3.Connection, ns: str, from_kind: str, want: Lookup) -> dict[int, Belief]:
    """The beliefs ``want`` names: by key, the active one per subject, and the newest ``ANCHOR_WINDOW`` per anchor."""
    found = _load(conn, ns, from_kind, "key IN ({marks})", sorted(want.keys))
    active = (
        f"subject IN ({{marks}}) AND status IN ('{BeliefStatus.ACTIVE.value}', '{PENDING}{BeliefStatus.ACTIVE.value}')"
    )
    found.update(_load(conn, ns, from_kind, active, sorted(want.subjects)))
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
    for chunk in chunks(sorted(want.subjects)):
        bids.update(
            int(r[0])
            for r in conn.execute(
                f"SELECT bid FROM belief_staged WHERE ns = ? AND from_kind = ? AND subject IN "
                f"({placeholders(len(chunk))}) AND status = '{BeliefStatus.ACTIVE.value}'",
                (ns, from_kind, *chunk),
            )
        )
    found.update(_load(conn, ns, from_kind, "bid IN ({marks})", sorted(bids - found.keys())))
    for chunk in chunks(sorted(found)):
        for bid, state in conn.execute(
            f"SELECT bid, state FROM belief_staged WHERE bid IN ({placeholders(len(chunk))})", chunk
        ):
            found[int(bid)] = _parsed(state)  # this build's (or a stopped one's) newer state
    return found


def _held(conn: sqlite3.Connection, ns: str, from_kind: str, item_ids: Sequence[str]) -> set[tuple[str, str]]:
    """``(belief key, item id)`` pairs already recorded for these items (empty unless they were built before)."""
    out: set[tuple[str, str]] = set()
    for chunk in chunks(list(item_ids)):
        out.update(
            (str(key), str(item))
            for key, item in conn.execute(
                # CROSS JOIN keeps the evidence index as the outer loop (sqlite.org/optoverview.html §7)
                "SELECT b.key, e.item_id FROM belief_evidence e CROSS JOIN beliefs b ON b.bid = e.bid "
                f"WHERE e.item_id IN ({placeholders(len(chunk))}) AND b.ns = ? AND b.from_kind = ?",
                (*chunk, ns, from_kind),
            )
        )
        out.update(
            (str(key), str(item))
            for key, item in conn.execute(
                "SELECT b.key, e.item_id FROM belief_staged_evidence e CROSS JOIN beliefs b ON b.bid = e.bid "
                f"WHERE e.item_id IN ({placeholders(len(chunk))}) AND b.ns = ? AND b.from_kind = ?",
                (*chunk, ns, from_kind),
            )
        )
    return out


# saving -------------------------------------------------------------------------------------------------
def _insert(
    conn: sqlite3.Connection, ns: str, from_kind: str, belief: Belief, state: str, at_us: int, version: int, status: str
) -> int:
    cur = conn.execute(
        _INSERT,
        (
            belief_id(ns_of_key(ns), from_kind, belief.key), ns, from_kind, belief.key, belief.subject,
            status, belief.text, belief.kind.value, belief.confidence, state, belief.meta.to_json(),
            *meta_columns(belief.meta), belief.last_seq, at_us, _vec(belief.text), version,
        ),
    )  # fmt: skip
    bid = int(cur.lastrowid or 0)
    conn.execute("INSERT INTO beliefs_fts (rowid, text) VALUES (?, ?)", (bid, belief.text))
    _put_anchors(conn, ns, from_kind, bid, belief)
    return bid


def _put_anchors(conn: sqlite3.Connection, ns: str, from_kind: str, bid: int, belief: Belief) -> None:
    if belief.free:
        conn.executemany(
            "INSERT OR IGNORE INTO belief_anchors (ns, from_kind, anchor, first_seq, key, bid) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [(ns, from_kind, a, belief.first_seq, belief.key, bid) for a in belief.anchors],
        )


def _update(
    conn: sqlite3.Connection, ns: str, from_kind: str, bid: int, old: Belief, new: Belief, state: str, version: int
) -> None:
    conn.execute(
        _UPDATE,
        (
            new.status.value, new.confidence, state, new.meta.to_json(), *meta_columns(new.meta), new.last_seq,
            now_us(), version, bid,
        ),
    )  # fmt: skip
    if new.text != old.text:  # a rebuild after its text's item was forgotten
        conn.execute(
            "UPDATE beliefs SET text = ?, learning_kind = ?, vec = ? WHERE bid = ?",
            (new.text, new.kind.value, _vec(new.text), bid),
        )
        conn.execute("INSERT INTO beliefs_fts (beliefs_fts, rowid, text) VALUES ('delete', ?, ?)", (bid, old.text))
        conn.execute("INSERT INTO beliefs_fts (rowid, text) VALUES (?, ?)", (bid, new.text))
    if (new.anchors, new.first_seq) != (old.anchors, old.first_seq):
        conn.execute("DELETE FROM belief_anchors WHERE bid = ?", (bid,))
        _put_anchors(conn, ns, from_kind, bid, new)


def _save(
    conn: sqlite3.Connection, ns: str, from_kind: str, beliefs: Sequence[Belief], at_us: int, *, restore: bool = True
) -> None:
    """Insert or update ``beliefs`` and append the evidence each gained (``Belief.added``).

    A build (``restore``) inserts a new belief *pending* (``PENDING`` + its status: no read serves it) and
    ``commit_build`` publishes it; a change to a belief already published is staged (``STAGING``) and applied
    by ``commit_build`` too, where a belief that did not hold (stale or retracted) written again is restored
    (``docs/log-model.md`` rule 4: a ``restore`` record). A rebuild after a forget (``retract``) keeps each
    belief's status, and a belief new there is written with its ``put`` at once.
    """
    if not beliefs:
        return
    version = bump_version(conn)  # per-process belief indexes load the rows stamped with it (``belief_index``)
    for belief in beliefs:
        state = json.dumps(belief.to_state(), separators=(",", ":"), ensure_ascii=False)
        row = conn.execute(
            "SELECT bid, state, status, id FROM beliefs WHERE ns = ? AND from_kind = ? AND key = ?",
            (ns, from_kind, belief.key),
        ).fetchone()
        if row is None:
            status = f"{PENDING}{belief.status.value}" if restore else belief.status.value
            bid = _insert(conn, ns, from_kind, belief, state, at_us, version, status)
            if not restore:
                log.put(conn, belief_id(ns_of_key(ns), from_kind, belief.key), Tier.LONG, "rebuilt")
        elif restore and not str(row[2]).startswith(PENDING):  # published: staged until the build's commit
            bid = int(row[0])
            _stage(conn, ns, from_kind, bid, belief, state, str(row[2]) in _NOT_HOLDING)
            conn.executemany(
                "INSERT OR IGNORE INTO belief_staged_evidence (bid, item_id) VALUES (?, ?)",
                [(bid, e) for e in belief.added],
            )
            continue
        else:
            bid = int(row[0])
            _update(conn, ns, from_kind, bid, _parsed(row[1]), belief, state, version)
            if str(row[2]).startswith(PENDING):  # built by a build not committed yet: stays unpublished
                conn.execute("UPDATE beliefs SET status = ? WHERE bid = ?", (PENDING + belief.status.value, bid))
            elif str(row[2]) in _NOT_HOLDING:
                conn.execute("UPDATE beliefs SET status = ? WHERE bid = ?", (str(row[2]), bid))
        conn.executemany(
            "INSERT OR IGNORE INTO belief_evidence (bid, item_id) VALUES (?, ?)", [(bid, e) for e in belief.added]
        )


def _stage(
    conn: sqlite3.Connection, ns: str, from_kind: str, bid: int, belief: Belief, state: str, restore: bool
) -> None:
    """Hold a published belief's new state for the build's commit (``STAGING``); a later window replaces it."""
    conn.execute(
        "INSERT INTO belief_staged (bid, ns, from_kind, subject, status, state, restore) VALUES (?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(bid) DO UPDATE SET status = excluded.status, state = excluded.state, "
        "restore = max(restore, excluded.restore)",
        (bid, ns, from_kind, belief.subject, belief.status.value, state, int(restore)),
    )


def _unstage(conn: sqlite3.Connection, bids: Sequence[int]) -> None:
    """Drop the staged changes of these beliefs (a forget touched them, or they were deleted)."""
    for chunk in chunks(list(bids)):
        marks = placeholders(len(chunk))
        conn.execute(f"DELETE FROM belief_staged WHERE bid IN ({marks})", chunk)
        conn.execute(f"DELETE FROM belief_staged_evidence WHERE bid IN ({marks})", chunk)


def _delete(conn: sqlite3.Connection, ns: str, from_kind: str, keys: Sequence[str]) -> None:
    for key in keys:
        row = conn.execute(
            "SELECT bid, text FROM beliefs WHERE ns = ? AND from_kind = ? AND key = ?", (ns, from_kind, key)
        ).fetchone()
        if row is None:
            continue
        version = bump_version(conn)
        bid, text = int(row[0]), str(row[1])
        _unstage(conn, [bid])
        log.tombstones(conn, [belief_id(ns_of_key(ns), from_kind, key)], "built only on removed memories")
        conn.execute("INSERT INTO beliefs_removed (version, bid) VALUES (?, ?)", (version, bid))
        conn.execute("INSERT INTO beliefs_fts (beliefs_fts, rowid, text) VALUES ('delete', ?, ?)", (bid, text))
        conn.execute("DELETE FROM belief_evidence WHERE bid = ?", (bid,))
        conn.execute("DELETE FROM belief_anchors WHERE bid = ?", (bid,))
        conn.execute("DELETE FROM beliefs WHERE bid = ?", (bid,))


# building -----------------------------------------------------------------------------------------------
def scopes_to_build(conn: sqlite3.Connection, reach: Reach, kinds: Sequence[str]) -> list[tuple[str, str, bool]]:
    """``(ns key, kind, due)`` for every scope the reach and kinds admit that holds items, in order.

    ``due`` is True when items were written past its watermark, or a build of it stopped before its commit
    (``commit_build``: its pending beliefs and staged changes wait for the next build). Four index probes per
    scope, no lock.
    """
    if not kinds:
        return []
    sql, params = reach_sql(reach, "s.ns", kinds=kinds, kind_col="s.kind")
    pending = [f"{PENDING}{s.value}" for s in BeliefStatus]
    rows = conn.execute(
        "SELECT s.ns, s.kind, EXISTS (SELECT 1 FROM items i WHERE i.ns = s.ns AND i.kind = s.kind "
        "AND i.seq > s.built_seq) OR EXISTS (SELECT 1 FROM belief_staged g WHERE g.ns = s.ns "
        "AND g.from_kind = s.kind) OR EXISTS (SELECT 1 FROM beliefs b WHERE b.ns = s.ns AND b.status IN "
        f"({placeholders(len(pending))}) AND b.from_kind = s.kind) FROM scopes s "
        f"WHERE ({sql}) "
        "AND EXISTS (SELECT 1 FROM items i WHERE i.ns = s.ns AND i.kind = s.kind) ORDER BY s.ns, s.kind",
        (*pending, *params),
    ).fetchall()
    return [(str(ns), str(kind), bool(due)) for ns, kind, due in rows]


def _read_round(conn: sqlite3.Connection, ns: str, kind: str, chunk: int) -> tuple[int | None, list[_Row], bool, int]:
    """The watermark (None: no such scope), the next ``chunk`` items past it, whether more remain, and an LSN.

    The LSN is the log's last in the same snapshot: every item read was written by then.
    """
    mark = conn.execute("SELECT built_seq FROM scopes WHERE ns = ? AND kind = ?", (ns, kind)).fetchone()
    lsn = log.current_lsn(conn)
    if mark is None:
        return None, [], False, lsn
    rows = conn.execute(
        "SELECT i.seq, i.id, b.item FROM items i JOIN bodies b ON b.seq = i.seq "
        "WHERE i.ns = ? AND i.kind = ? AND i.seq > ? ORDER BY i.seq LIMIT ?",
        (ns, kind, int(mark[0]), chunk + 1),
    ).fetchall()
    more = len(rows) > chunk
    return int(mark[0]), [(int(seq), str(item_id), str(body)) for seq, item_id, body in rows[:chunk]], more, lsn


def _statements(rows: Sequence[_Row]) -> list[_Group]:
    """Parse and extract, and embed each statement's text for ``_vec`` (pure, run outside the write lock)."""
    sources = [SourceItem(seq=seq, id=item_id, item=parse_item(body)) for seq, item_id, body in rows]
    by_seq: dict[int, list[Statement]] = {}
    for st in extract(sources):
        by_seq.setdefault(st.seq, []).append(st)
        _vec(st.text)  # a belief reads as one of its statements: its vector is ready before the lock
    return [(src.seq, src.id, by_seq.get(src.seq, [])) for src in sources]


def _write_round(
    conn: sqlite3.Connection,
    ns: str,
    kind: str,
    mark: int,
    groups: Sequence[_Group],
    budget_s: float,
    room: int = PUBLISH_MAX,
) -> tuple[set[str], int] | None:
    """Merge ``groups`` from the start while the lock budget lasts; ``(changed ids, items done)``.

    Stops after the batch during which the transaction had held the lock ``budget_s``, after ``BUILD_TX_ITEMS``
    items, or once ``room`` beliefs have changed (the build then commits them: ``PUBLISH_MAX``); at least one
    batch. None when the watermark is no longer ``mark`` (another build got there first).
    """
    row = conn.execute("SELECT built_seq FROM scopes WHERE ns = ? AND kind = ?", (ns, kind)).fetchone()
    if row is None or int(row[0]) != mark:
        return None
    namespace = ns_of_key(ns)
    changed: set[str] = set()
    done = 0
    while done < len(groups):
        batch = groups[done : done + MERGE_BATCH]
        seqs = [seq for seq, _, sts in batch if sts]
        present = (
            {
                int(r[0])
                for r in conn.execute(
                    f"SELECT seq FROM items WHERE seq IN ({placeholders(len(seqs))}) AND status = 'live'", seqs
                )
            }
            if seqs
            else set()
        )
        statements = [st for seq, _, sts in batch if seq in present for st in sts]  # nor a forgotten or retracted one
        if statements:
            existing = _candidates(conn, ns, kind, lookup(statements))
            held = _held(conn, ns, kind, sorted({st.evidence for st in statements}))
            beliefs = merge(statements, existing.values(), held)
            _save(conn, ns, kind, beliefs, now_us())
            changed.update(belief_id(namespace, kind, b.key) for b in beliefs)
        done += len(batch)
        last = batch[-1][0]
        conn.execute(
            "UPDATE scopes SET built_seq = ?, last_build = CASE WHEN EXISTS (SELECT 1 FROM items i WHERE "
            "i.ns = scopes.ns AND i.kind = scopes.kind AND i.seq > ?) THEN last_build ELSE max(?, last_write) END "
            "WHERE ns = ? AND kind = ?",
            (last, last, now_us(), ns, kind),
        )
        tally(len(batch))
        if held_s() >= budget_s or done >= BUILD_TX_ITEMS or len(changed) >= room:
            break
    return changed, done


def build_scope(
    db: Database,
    ns: str,
    kind: str,
    *,
    chunk: int = BUILD_CHUNK,
    budget_s: float = LOCK_BUDGET_S,
    gap_s: float = LOCK_GAP_S,
) -> set[str]:
    """Build scope ``(ns key, kind)`` up to its newest item (module docstring); ids of beliefs created or changed.

    Args:
        db: The engine's database.
        ns: The scope's namespace key (``rows.ns_key``).
        kind: The scope's item kind.
        chunk: Most items read and extracted per round.
        budget_s: A write transaction commits once it has held the lock this long, seconds.
        gap_s: Pause between two write transactions of one round, seconds (``LOCK_GAP_S``).

    The beliefs it creates are published by ``commit_build``: one log transaction of their ``put`` records,
    naming the LSN its inputs were written by, at its end or whenever it has changed ``PUBLISH_MAX`` beliefs
    since its last commit (so every commit's transaction is bounded; what a commit publishes is everything built
    from the scope's items up to the watermark). A build that stops midway publishes none of what it changed
    since its last commit (the next build of the scope that changes a belief publishes them).

    Raises:
        EngineUnavailable: the file stayed locked (``Database.run``).
    """
    changed: set[str] = set()
    unpublished: set[str] = set()
    inputs = 0
    while True:
        mark, rows, more, lsn = db.run(partial(_read_round, ns=ns, kind=kind, chunk=chunk))
        inputs = max(inputs, lsn)
        if mark is None or not rows:
            break
        groups = _statements(rows)
        done = 0
        while done < len(groups):
            room = max(1, PUBLISH_MAX - len(unpublished))
            step = partial(
                _write_round, ns=ns, kind=kind, mark=mark, groups=groups[done:], budget_s=budget_s, room=room
            )
            result = db.run(step, write=True, background=True, kind="build")
            if result is None:
                break  # another build moved the watermark: read again from it
            ids, n = result
            changed |= ids
            unpublished |= ids
            done += n
            mark = groups[done - 1][0]
            if len(unpublished) >= PUBLISH_MAX:
                _publish(db, ns, kind, inputs)
                unpublished.clear()
            if done < len(groups):
                time.sleep(gap_s)  # let a waiting writer in before taking the lock again
        else:
            if not more:
                break
    commit: bool = bool(unpublished) or db.run(partial(_unpublished, ns=ns, kind=kind))  # a stopped build's too
    if commit:
        _publish(db, ns, kind, inputs)
    return changed


def _publish(db: Database, ns: str, kind: str, inputs: int) -> None:
    db.run(partial(commit_build, ns=ns, kind=kind, inputs=inputs), write=True, background=True, kind="publish")


def _unpublished(conn: sqlite3.Connection, ns: str, kind: str) -> bool:
    """Whether a build of the scope left work uncommitted (it stopped midway): two index probes."""
    pending = [f"{PENDING}{s.value}" for s in BeliefStatus]
    row = conn.execute(
        f"SELECT EXISTS (SELECT 1 FROM beliefs WHERE ns = ? AND status IN ({placeholders(len(pending))}) "
        "AND from_kind = ?) OR EXISTS (SELECT 1 FROM belief_staged WHERE ns = ? AND from_kind = ?)",
        (ns, *pending, kind, ns, kind),
    ).fetchone()
    return bool(row[0])


def commit_build(conn: sqlite3.Connection, ns: str, kind: str, inputs: int) -> int:
    """Publish the scope's pending beliefs: their ``put`` records in one log transaction; how many there were.

    Args:
        conn: In a write transaction.
        ns: The scope's namespace key.
        kind: The scope's item kind.
        inputs: The LSN the build's inputs were written by (named in each record's reason).
    """
    pending = [f"{PENDING}{s.value}" for s in BeliefStatus]
    rows = conn.execute(
        f"SELECT bid, id, status FROM beliefs WHERE ns = ? AND status IN ({placeholders(len(pending))}) "
        "AND from_kind = ? ORDER BY bid",
        (ns, *pending, kind),
    ).fetchall()
    staged = conn.execute(
        "SELECT s.bid, s.state, s.restore, b.state, b.status, b.id FROM belief_staged s JOIN beliefs b "
        "ON b.bid = s.bid WHERE s.ns = ? AND s.from_kind = ? ORDER BY s.bid",
        (ns, kind),
    ).fetchall()
    if not rows and not staged:
        return 0
    tally(len(rows) + len(staged))
    version = bump_version(conn)
    why = f"built from {ns_of_key(ns)}#{kind} up to LSN {inputs}"
    for bid, hid, status in rows:
        conn.execute(
            "UPDATE beliefs SET status = ?, version = ? WHERE bid = ?", (str(status)[len(PENDING) :], version, bid)
        )
        log.put(conn, str(hid), Tier.LONG, why)
    for bid, state, restore, old_state, status, hid in staged:
        new = _parsed(state)
        _update(conn, ns, kind, int(bid), _parsed(old_state), new, str(state), version)
        if str(status) in _NOT_HOLDING:
            if restore:  # it did not hold when the build wrote it again: rule 4
                log.append(conn, RecordOp.RESTORE, str(hid), Held(MemoryStatus.LIVE, Tier.LONG), why)
            else:  # it stopped holding after the build wrote it: it stays so
                conn.execute("UPDATE beliefs SET status = ? WHERE bid = ?", (str(status), bid))
    conn.execute(
        "INSERT OR IGNORE INTO belief_evidence (bid, item_id) SELECT e.bid, e.item_id FROM belief_staged_evidence e "
        "JOIN belief_staged s ON s.bid = e.bid WHERE s.ns = ? AND s.from_kind = ?",
        (ns, kind),
    )
    _unstage(
        conn,
        [int(r[0]) for r in conn.execute("SELECT bid FROM belief_staged WHERE ns = ? AND from_kind = ?", (ns, kind))],
    )
    return len(rows) + len(staged)


def retract(conn: sqlite3.Connection, removed_ids: Sequence[str]) -> int:
    """Rebuild or delete the beliefs derived from ``removed_ids``, in the caller's transaction.

    Called after the items are deleted: each affected belief is rebuilt from the evidence rows left
    (``memory_core.beliefs.rebuild``), and a subject whose active belief was touched re-picks its newest member.

    Returns:
        How many beliefs were deleted.
    """
    removed = list(dict.fromkeys(removed_ids))
    affected: dict[tuple[str, str], dict[int, Belief]] = {}
    for chunk in chunks(removed):
        for bid, ns, from_kind, state in conn.execute(
            "SELECT b.bid, b.ns, b.from_kind, b.state FROM beliefs b WHERE b.bid IN "
            f"(SELECT bid FROM belief_evidence WHERE item_id IN ({placeholders(len(chunk))}))",
            chunk,
        ):
            affected.setdefault((str(ns), str(from_kind)), {})[int(bid)] = _parsed(state)
        conn.execute(f"DELETE FROM belief_evidence WHERE item_id IN ({placeholders(len(chunk))})", chunk)
        dropped = [
            int(r[0])
            for r in conn.execute(
                f"SELECT bid FROM belief_staged_evidence WHERE item_id IN ({placeholders(len(chunk))})", chunk
            )
        ]
        _unstage(conn, dropped)
    _unstage(conn, [bid for beliefs in affected.values() for bid in beliefs])
    deleted = 0
    for (ns, from_kind), beliefs in sorted(affected.items()):
        survivors = {b.key: _survivors(conn, bid) for bid, b in beliefs.items()}
        others: list[Belief] = []
        for subject in sorted({b.subject for b in beliefs.values() if b.status is BeliefStatus.ACTIVE}):
            row = conn.execute(
                "SELECT state FROM beliefs WHERE ns = ? AND from_kind = ? AND subject = ? AND status = ? "
                f"AND bid NOT IN ({placeholders(len(beliefs))}) ORDER BY {_NEWEST} LIMIT 1",
                (ns, from_kind, subject, BeliefStatus.SUPERSEDED.value, *beliefs),
            ).fetchone()
            if row is not None:
                others.append(_parsed(row[0]))
        changed, gone = retract_beliefs(list(beliefs.values()), survivors, others)
        _delete(conn, ns, from_kind, gone)
        _save(conn, ns, from_kind, changed, now_us(), restore=False)
        deleted += len(gone)
    return deleted


def _survivors(conn: sqlite3.Connection, bid: int) -> list[SourceItem]:
    rows = conn.execute(
        "SELECT i.seq, i.id, b.item FROM belief_evidence e JOIN items i ON i.id = e.item_id "
        "JOIN bodies b ON b.seq = i.seq WHERE e.bid = ? ORDER BY i.seq",
        (bid,),
    ).fetchall()
    return [SourceItem(seq=int(seq), id=str(item_id), item=parse_item(body)) for seq, item_id, body in rows]

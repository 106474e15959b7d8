"""Moving up: copy a SQLite store (items, beliefs, build state) into a PostgreSQL database.

``copy_sqlite`` reads the SQLite file in write order and writes PostgreSQL in batches, one transaction each:

1. **Items** keep their write order (``seq``) and write time, so every belief's ``first_seq``/``last_seq`` and
   every recency stays true. Each batch commits with a progress mark (``meta['migrate:<instance>']``, the last
   SQLite ``seq`` copied, keyed by the SQLite file's ``instance`` id), so an interrupted copy resumes after its
   last batch; a batch copied twice replays (``ON CONFLICT DO NOTHING``): the copy is idempotent.
2. **Beliefs** with their evidence and anchors, by belief id (a belief already there is kept).
3. **Log state** (memory as a log, seed 002): each copied item got its ``put`` as it was written and each
   copied belief one as it was copied (reason ``migrated``); then every memory whose status or tier differs on
   SQLite (retracted, stale, archived) takes it in one transaction of records (``log_state``). A belief SQLite
   holds unpublished (a build stopped before its commit) is published, as SQLite's next build would. The
   SQLite log's history itself is not copied: ``as_of`` on PostgreSQL reaches back to the migration.
4. **Build state**: each scope's ``last_write``/``last_build``; a scope SQLite had built through its newest
   item gets a watermark past everything copied, a scope it had not gets none (the next build reads it all;
   evidence already recorded is skipped, so that build only adds what SQLite had not built yet).

A target holding items that did not come from this source is refused: write orders would collide.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from memory_core.beliefs import Belief
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.engines.sqlite.rows import META_COLUMN_NAMES, now_us
from memory_core.errors import Conflict
from memory_core.items import parse_item
from memory_core.memory_log import Held, MemoryStatus, RecordOp, Tier
from memory_core.scoring import embed, tokenize

from . import log, log_ops
from .driver import Conn
from .engine import PostgresEngine
from .schema import SCHEMA
from .writes import insert, prepare

__all__ = ["BATCH", "MigrateReport", "build_status", "copy_sqlite", "log_state"]

BATCH: Final = 500
"""Items per PostgreSQL transaction (and per progress report)."""
Progress = Callable[[str, int, int], None]
"""``(stage, done, total)`` after each batch: ``items``, then ``beliefs``, then ``scopes``."""
_BELIEF_COLUMNS = (
    "id", "ns", "from_kind", "key", "subject", "status", "text", "learning_kind", "confidence", "state", "meta",
    *META_COLUMN_NAMES, "last_seq", "updated_at",
)  # fmt: skip


@dataclass(frozen=True)
class MigrateReport:
    """What one ``copy_sqlite`` run did.

    Attributes:
        items: Items in the source.
        copied: Items written by this run (the rest were there already: a resumed or repeated run).
        beliefs: Beliefs written by this run.
        scopes: Scopes whose build state was copied.
        resumed_after: The source ``seq`` this run resumed after (0: from the start).
    """

    items: int
    copied: int
    beliefs: int
    scopes: int
    resumed_after: int


def _read(path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return list(conn.execute(sql, params))
    finally:
        conn.close()


def _mark_key(instance: str) -> str:
    return f"migrate:{instance}"


def _start(conn: Conn, key: str) -> int:
    """The seq to resume after; refuses a target holding items of another origin."""
    row = conn.execute(f"SELECT value FROM {SCHEMA}.meta WHERE key = %s", (key,)).fetchone()
    if row is not None:
        return int(row[0])
    others = conn.execute(f"SELECT count(*) FROM {SCHEMA}.items").fetchone()
    if others is not None and int(others[0]) > 0:
        raise Conflict(
            f"the target already holds {int(others[0])} items that did not come from this SQLite file; "
            "migrate into an empty database"
        )
    return 0


def _copy_items(conn: Conn, rows: list[tuple[Any, ...]], key: str) -> int:
    prepared = [prepare(parse_item(body)) for _, _, body in rows]
    created = insert(conn, prepared, now_us(), seqs=[int(r[0]) for r in rows], times=[int(r[1]) for r in rows])
    conn.execute(
        f"INSERT INTO {SCHEMA}.meta (key, value) VALUES (%s, %s) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, str(int(rows[-1][0]))),
    )
    conn.execute(
        f"SELECT setval(pg_get_serial_sequence('{SCHEMA}.items', 'seq'), "
        f"greatest((SELECT max(seq) FROM {SCHEMA}.items), 1))"
    )
    return sum(created)


_PENDING: Final = "pending:"
"""SQLite's ``beliefs.status`` prefix of a belief a build has not published (``beliefs_store.PENDING``)."""
_NOT_HOLDING: Final = frozenset({MemoryStatus.STALE.value, MemoryStatus.RETRACTED.value})


def build_status(status: str, state: str) -> str:
    """A SQLite belief's build status (``active``, ``superseded``) from its ``beliefs.status`` (pure).

    SQLite keeps the log status of a belief that does not hold (``stale``, ``retracted``) and the mark of an
    unpublished one (``pending:…``) in that column; PostgreSQL keeps them apart (``beliefs.log_status``).
    """
    if status.startswith(_PENDING):
        return status[len(_PENDING) :]
    if status in _NOT_HOLDING:
        return Belief.from_state(json.loads(state)).status.value
    return status


def _copy_beliefs(conn: Conn, beliefs: list[tuple[Any, ...]], evidence: dict[str, list[str]]) -> int:
    written = 0
    marks = ", ".join("%s" for _ in range(len(_BELIEF_COLUMNS) + 2))
    copied: list[str] = []
    for row in beliefs:
        text = str(row[6])
        values = (*row[:5], build_status(str(row[5]), str(row[9])), *row[6:])
        got = conn.execute(
            f"INSERT INTO {SCHEMA}.beliefs ({', '.join(_BELIEF_COLUMNS)}, words, vec) VALUES ({marks}) "
            "ON CONFLICT DO NOTHING RETURNING bid",
            (*values, " ".join(tokenize(text)), [float(v) for v in embed(text)]),
        ).fetchone()
        if got is None:
            continue
        written += 1
        copied.append(str(row[0]))
        bid = int(got[0])
        conn.cursor().executemany(
            f"INSERT INTO {SCHEMA}.belief_evidence (bid, item_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            [(bid, item_id) for item_id in evidence.get(str(row[0]), [])],
        )
        belief = Belief.from_state(json.loads(str(row[9])))
        if belief.free and belief.anchors:
            conn.cursor().executemany(
                f"INSERT INTO {SCHEMA}.belief_anchors (ns, from_kind, anchor, first_seq, key, bid) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                [(row[1], row[2], a, belief.first_seq, row[3], bid) for a in belief.anchors],
            )
    log_ops.publish(conn, copied, "migrated")
    return written


def log_state(conn: Conn, source: list[tuple[str, str, str]]) -> int:
    """Give each memory the status and tier it has on SQLite (``(id, status, tier)``): one log transaction.

    Memories not held here, or already in that state, are left alone; how many records were written.
    """
    log.lock_head(conn)
    now = log.held(conn, [i for i, _, _ in source])
    plan: list[tuple[RecordOp, str, Held, str | None]] = []
    why = "migrated from SQLite"
    for item_id, status, tier in source:
        cur = now.get(item_id)
        want = Held(MemoryStatus(status), Tier(tier))
        if cur is None or cur == want:
            continue
        if cur.tier is not want.tier:
            plan.append((RecordOp.MOVE, item_id, Held(cur.status, want.tier), why))
        if cur.status is not want.status:
            op = {MemoryStatus.LIVE: RecordOp.RESTORE, MemoryStatus.STALE: RecordOp.STALE}.get(
                want.status, RecordOp.RETRACT
            )
            plan.append((op, item_id, want, why))
    return len(log.apply(conn, plan))


def _copy_scopes(conn: Conn, scopes: list[tuple[Any, ...]], newest: dict[tuple[str, str], int]) -> int:
    horizon = conn.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())").fetchone()
    assert horizon is not None
    for ns, kind, last_write, last_build, built_seq in scopes:
        built = last_build is not None and int(built_seq) >= newest.get((str(ns), str(kind)), 0)
        conn.execute(
            f"INSERT INTO {SCHEMA}.scopes (ns, kind, last_write, last_build, built_xmin) VALUES (%s, %s, %s, %s, "
            f"CASE WHEN %s THEN %s::xid8 ELSE '0'::xid8 END) ON CONFLICT (ns, kind) DO UPDATE SET "
            "last_write = excluded.last_write, last_build = excluded.last_build, built_xmin = excluded.built_xmin",
            (ns, kind, int(last_write), last_build, built, str(horizon[0])),
        )
    return len(scopes)


def copy_sqlite(source: Path, target: PostgresEngine, progress: Progress | None = None) -> MigrateReport:
    """Copy the SQLite store at ``source`` into ``target`` (module docstring); resumable and idempotent.

    Args:
        source: The SQLite file (opened once through ``SQLiteEngine`` so its schema is checked).
        target: The PostgreSQL engine to copy into.
        progress: Called after each batch with ``(stage, done, total)``.

    Raises:
        Conflict: the target holds items of another origin, or the source's schema is newer than this code's.
        EngineUnavailable: either store stopped answering (run again to resume).
    """
    SQLiteEngine(source).close()  # checks (and migrates) the source's schema
    instance = str(_read(source, "SELECT value FROM meta WHERE key = 'instance'")[0][0])
    key = _mark_key(instance)
    after = target._run(lambda conn: _start(conn, key))
    total = int(_read(source, "SELECT count(*) FROM items")[0][0])
    done = int(_read(source, "SELECT count(*) FROM items WHERE seq <= ?", (after,))[0][0])
    copied = 0
    cursor = after
    while True:
        rows = _read(
            source,
            "SELECT i.seq, i.stored_at, b.item FROM items i JOIN bodies b ON b.seq = i.seq WHERE i.seq > ? "
            "ORDER BY i.seq LIMIT ?",
            (cursor, BATCH),
        )
        if not rows:
            break
        copied += target._run(lambda conn, rows=rows: _copy_items(conn, rows, key))  # type: ignore[misc]
        cursor = int(rows[-1][0])
        done += len(rows)
        if progress is not None:
            progress("items", done, total)
    beliefs = _read(source, f"SELECT {', '.join(_BELIEF_COLUMNS)} FROM beliefs ORDER BY bid")
    evidence: dict[str, list[str]] = {}
    for belief, item_id in _read(
        source, "SELECT b.id, e.item_id FROM belief_evidence e JOIN beliefs b ON b.bid = e.bid ORDER BY e.bid"
    ):
        evidence.setdefault(str(belief), []).append(str(item_id))
    written = target._run(lambda conn: _copy_beliefs(conn, beliefs, evidence))
    if progress is not None:
        progress("beliefs", len(beliefs), len(beliefs))
    states = [
        (str(i), str(s), str(t))
        for i, s, t in _read(
            source,
            "SELECT id, status, tier FROM items WHERE status != 'live' OR tier != 'short' UNION ALL "
            "SELECT id, status, 'long' FROM beliefs WHERE status IN ('stale', 'retracted')",
        )
    ]
    target._run(lambda conn: log_state(conn, states))
    newest = {(str(ns), str(kind)): int(seq) for ns, kind, seq in _read(
        source, "SELECT ns, kind, max(seq) FROM items GROUP BY ns, kind"
    )}  # fmt: skip
    scopes = _read(source, "SELECT ns, kind, last_write, last_build, built_seq FROM scopes ORDER BY ns, kind")
    count = target._run(lambda conn: _copy_scopes(conn, scopes, newest))
    if progress is not None:
        progress("scopes", count, count)
    return MigrateReport(items=total, copied=copied, beliefs=written, scopes=count, resumed_after=after)

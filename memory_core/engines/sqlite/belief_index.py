"""Belief reads: ranking, evidence, and a per-process copy of the active beliefs' ranking data.

``rank`` serves ``beliefs()`` and ``fetch(beliefs=N)``; ``evidence_of`` names each belief's items. The copy
(``BeliefIndex``) exists so a ranked read does not re-read every vector. A belief's ``derived_from`` is its
``belief_evidence`` rows joined to ``items``, in write order (``seq``).

Every ranked read of a pack asks for beliefs (``FetchRequest.beliefs``; a lifecycle pack's four fetch sections
all do), and ranking them needs every admitted active belief's vector, time and confidence. Read from SQL that is
one row and a 256-byte blob per belief per read: with ~1 belief per conversation turn it grows with the history
and, after a few hundred turns and a brain of passages, dominates ``pre_turn`` (measured: see the report of
issue 4/6). Beliefs change only when a build or a forget writes them, so the arrays are kept per process and
reloaded when they change.

**Invalidation.** Every transaction that inserts, updates or deletes a belief row (``beliefs_store._save`` and
``_delete``, the only writers: builds and retractions on forget or erase) bumps ``meta.beliefs_version`` in the
same transaction and stamps the rows it writes with the new value (``beliefs.version``; a deleted belief's
``bid`` goes to ``beliefs_removed`` with it). A read compares the version its snapshot sees with the one the
arrays were loaded at:

* equal: the arrays are exactly the snapshot's active beliefs;
* the snapshot's is newer: the arrays are *refreshed*: only the rows stamped after the loaded version and the
  removals logged since are read (two index ranges), applied to a new version, and swapped in. So a build that
  writes ten beliefs costs the next read ten rows, not every active belief (issue 12). Applying them copies
  only what changed too: a version is the arrays of a *base* (the last full load or rebuild) with a mask of
  its rows still alive, plus a *delta* of the rows written since, both in ``bid`` order; a refresh copies the
  delta and the changed rows (and the one-byte-per-row mask when a base row changed), and rebuilds one base
  only when the delta outgrows ``compact_at`` (an eighth of the base). Measured on the 100k bench's file with
  its ~4k active beliefs tiled to 107k: a refresh after one build commit took 11.7 ms when every refresh
  rebuilt the arrays, 0.03 ms now (and 0.9 vs 0.03 ms at 4k), on the live read's thread. One thread of a process
  refreshes at a time; a read that finds another thread refreshing ranks from the arrays it has (the previous
  version, ``BeliefStats.stale``), reading the hits from SQL so that no belief its snapshot deleted or
  superseded is shown; a belief written since simply joins from the next read;
* the snapshot's is older (another thread of this process already loaded a newer version): the read ranks
  from SQL as before, so it never sees beliefs its snapshot does not hold.

A different database file (``meta.instance``) or a first read loads every active belief (``BeliefStats.full``,
an index range on ``status``). Filters other than a reach (and kinds) are compiled to SQL for the keys, and the
arrays give the ranking data of those keys.

The hits built for a loaded version (text, metadata parsed from JSON, evidence) are kept with it
(``BeliefRows.hits``, by ``bid``): a refresh drops only those of the beliefs it reloaded or removed, so a build
does not throw away what every pack parsed (parsing a belief's metadata was half of a ranked belief read).
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from memory_core.beliefs import BeliefStatus
from memory_core.meta import ItemKind, MetaFilter
from memory_core.namespace import Namespace, Reach
from memory_core.query import FetchMode, Hit
from memory_core.scoring import EMBED_DIM

from . import fts
from .filters import compile_filter
from .fts_counts import SharedCounts
from .ranking import bounds, survivors
from .rows import chunks, ns_of_key, placeholders
from .search import (
    COMMON_ONLY,
    CONFIDENCE_WEIGHT,
    RECENCY_WEIGHT,
    Candidates,
    FloatArray,
    IntArray,
    align,
    order,
    query_vector,
    query_words,
    score,
)

__all__ = ["VERSION_KEY", "BeliefIndex", "BeliefRows", "BeliefStats", "bump_version", "evidence_of", "rank"]

VERSION_KEY: Final = "beliefs_version"
"""The ``meta`` key counting belief writes."""
_ACTIVE: Final = "active"
_REACH_CACHE: Final = 64
"""Reaches whose admitted-namespace arrays are kept (least recently used dropped first)."""
LOAD_PAGE: Final = 20_000
"""Rows per page of a full load (``BeliefIndex._full``)."""
COMPACT_MIN: Final = 1024
"""Rows a refresh's ``delta`` may always hold before the arrays are rebuilt (``compact_at``)."""
_COLUMNS: Final = "bid, vec, coalesce(observed_at, updated_at), confidence, ns"
_LOAD_SQL: Final = f"SELECT {_COLUMNS} FROM beliefs WHERE status = ? ORDER BY bid"
_CHANGED_SQL: Final = f"SELECT {_COLUMNS}, status FROM beliefs WHERE version > ? AND version <= ?"
_REMOVED_SQL: Final = "SELECT bid FROM beliefs_removed WHERE version > ? AND version <= ?"
BoolArray = npt.NDArray[np.bool_]
F32Array = npt.NDArray[np.float32]


def bump_version(conn: sqlite3.Connection) -> int:
    """Count one more belief write (call inside the writing transaction); the new version, to stamp rows with."""
    row = conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, '1') "
        "ON CONFLICT(key) DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT) RETURNING value",
        (VERSION_KEY,),
    ).fetchone()
    return int(row[0])


def _read_version(conn: sqlite3.Connection) -> tuple[str, int]:
    rows = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('instance', ?)", (VERSION_KEY,)).fetchall())
    return str(rows.get("instance", "")), int(rows.get(VERSION_KEY, 0))


@dataclass(frozen=True)
class BeliefRows:
    """Active beliefs a filter admits, with their ranking data (parallel arrays, ascending ``bid``).

    ``hits`` caches the hits (score 0) of the version these rows come from, by ``bid``; None for rows read from
    SQL.
    """

    keys: IntArray
    vectors: F32Array
    when_us: IntArray
    confidence: FloatArray
    hits: dict[int, Hit] | None = None


@dataclass(frozen=True)
class _Part:
    """Ranking data of some beliefs: parallel arrays in ascending ``bid``."""

    keys: IntArray
    vectors: F32Array
    when_us: IntArray
    confidence: FloatArray
    ns_code: npt.NDArray[np.int32]

    def take(self, index: IntArray | BoolArray) -> _Part:
        """The rows ``index`` selects (a mask, or positions in ascending order), as a new part."""
        return _Part(
            self.keys[index], self.vectors[index], self.when_us[index], self.confidence[index], self.ns_code[index]
        )

    @staticmethod
    def join(first: _Part, second: _Part) -> _Part:
        """The rows of both parts (no ``bid`` in both), in ascending ``bid``."""
        if not len(second.keys):
            return first
        if not len(first.keys):
            return second
        keys = np.concatenate([first.keys, second.keys])
        order_ = np.argsort(keys, kind="stable")  # two sorted runs: a merge
        return _Part(
            keys[order_],
            np.concatenate([first.vectors, second.vectors])[order_],
            np.concatenate([first.when_us, second.when_us])[order_],
            np.concatenate([first.confidence, second.confidence])[order_],
            np.concatenate([first.ns_code, second.ns_code])[order_],
        )


@dataclass(frozen=True)
class _Loaded:
    """One version's active beliefs: ``base`` rows still ``alive``, plus the ``delta`` written since ``base``.

    A refresh copies only ``delta`` and, when a row of ``base`` changed, the ``alive`` mask (one byte per row);
    ``base`` is rebuilt (compacted) once ``delta`` outgrows ``compact_at(len(base))``, so its cost is spread
    over the refreshes before it (module docstring). A ``bid`` is in at most one of the two.
    """

    instance: str
    version: int
    base: _Part
    alive: BoolArray | None
    delta: _Part
    namespaces: tuple[Namespace, ...]
    codes: dict[str, int]
    hits: dict[int, Hit]

    @property
    def active(self) -> int:
        """How many active beliefs this version holds."""
        dead = 0 if self.alive is None else int((~self.alive).sum())
        return len(self.base.keys) - dead + len(self.delta.keys)

    def select(self, base_mask: BoolArray, delta_mask: BoolArray) -> _Part:
        """The rows the masks admit (``base_mask`` over ``base``, ``delta_mask`` over ``delta``), ascending ``bid``."""
        if self.alive is not None:
            base_mask = base_mask & self.alive
        return _Part.join(self.base.take(base_mask), self.delta.take(delta_mask))


@dataclass
class BeliefStats:
    """What one ``BeliefIndex`` has loaded (counts since it was made).

    Attributes:
        full: Loads of every active belief (the first read, or another file).
        refreshes: Incremental refreshes (only the rows changed since the loaded version).
        rows: Belief rows read by loads and refreshes together.
        stale: Reads that ranked from the previous version while another thread refreshed.
        compactions: Refreshes that rebuilt the whole arrays (``compact_at``); the others copied only what
            changed since the last one.
        copied: Belief rows refreshes copied into new arrays (compactions included).
    """

    full: int = 0
    refreshes: int = 0
    rows: int = 0
    stale: int = 0
    compactions: int = 0
    copied: int = 0


def compact_at(base: int) -> int:
    """Rows ``delta`` may hold over a ``base`` of this many rows before a refresh rebuilds the arrays.

    An eighth of ``base`` (at least ``COMPACT_MIN``): a refresh copies at most that many rows plus a byte per row
    of ``base``, and a rebuild, which copies every row, comes after at least that many rows were written, so
    the copying per belief written stays bounded whatever the number of beliefs (issue 12: rebuilding 107k
    beliefs' arrays took ~12 ms, on the live read, after every build commit).
    """
    return max(COMPACT_MIN, base // 8)


def _arrays(rows: Sequence[Any], codes: dict[str, int]) -> _Part:
    """The ``_COLUMNS`` rows as a part (in the rows' order); new namespace keys join ``codes``."""
    n = len(rows)
    for r in rows:
        codes.setdefault(str(r[4]), len(codes))
    return _Part(
        np.fromiter((r[0] for r in rows), dtype=np.int64, count=n),
        np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(n, EMBED_DIM),
        np.fromiter((r[2] for r in rows), dtype=np.int64, count=n),
        np.fromiter((r[3] for r in rows), dtype=np.float64, count=n),
        np.fromiter((codes[str(r[4])] for r in rows), dtype=np.int32, count=n),
    )


class BeliefIndex:
    """Per-process arrays over the active beliefs (see the module docstring); safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loading = threading.Lock()
        self._loaded: _Loaded | None = None
        self._reaches: OrderedDict[Reach, BoolArray] = OrderedDict()
        self.stats = BeliefStats()
        self.fts_counts = SharedCounts()
        """Query words' document counts in ``beliefs_fts`` per index state (``fts_counts``; reads only)."""

    def rows(self, conn: sqlite3.Connection, flt: MetaFilter) -> BeliefRows | None:
        """The snapshot's active beliefs ``flt`` admits, or None when this copy cannot serve the snapshot.

        Call inside the read's transaction. None means the snapshot is older than the copy (rank from SQL).
        Rows without cached hits (``hits`` None) come from the previous version while another thread refreshes.
        """
        instance, version = _read_version(conn)
        with self._lock:
            loaded = self._loaded
        stale = False
        if loaded is None or loaded.instance != instance or loaded.version < version:
            current = loaded if loaded is not None and loaded.instance == instance else None
            if current is not None and not self._loading.acquire(blocking=False):
                loaded, stale = current, True  # another thread is refreshing: keep reading the previous version
                with self._lock:
                    self.stats.stale += 1
            else:
                if current is None:
                    self._loading.acquire()
                try:
                    loaded = self._load(conn, instance, version)
                finally:
                    self._loading.release()
        elif loaded.version > version:
            return None
        base, delta = loaded.base, loaded.delta
        if not flt.admits_kind(ItemKind.LEARNING):
            no = np.zeros(len(base.keys), dtype=bool)
            return _select(loaded, no, np.zeros(len(delta.keys), dtype=bool), stale)
        if MetaFilter(reach=flt.reach, kinds=flt.kinds) == flt:
            admitted = self._admitted(loaded, flt.effective_reach())
            return _select(loaded, admitted[base.ns_code], admitted[delta.ns_code], stale)
        where = compile_filter(flt, "b", beliefs=True)
        where.add("b.status = ?", _ACTIVE)
        found = conn.execute(f"SELECT b.bid FROM beliefs b WHERE {where.sql} ORDER BY b.bid", where.params).fetchall()
        keys = np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found))
        in_base = np.isin(base.keys, keys, assume_unique=True)
        return _select(loaded, in_base, np.isin(delta.keys, keys, assume_unique=True), stale)

    def _load(self, conn: sqlite3.Connection, instance: str, version: int) -> _Loaded:
        """The arrays at ``version``: refreshed from the held ones when they are of this file, else loaded whole.

        Call holding ``_loading``; the result is swapped in unless a newer version already was.
        """
        with self._lock:
            held = self._loaded
        if held is not None and held.instance == instance and held.version >= version:
            return held  # another thread got there while this one waited
        if held is None or held.instance != instance:
            loaded = self._full(conn, instance, version)
        else:
            loaded = self._refresh(conn, held, version)
        with self._lock:
            current = self._loaded
            if current is None or current.instance != instance or current.version < version:
                grew = current is None or len(loaded.namespaces) != len(current.namespaces)
                self._loaded = loaded
                if grew or current is None or current.instance != instance:
                    self._reaches.clear()  # an admitted-namespace array covers the codes it was made for
        return loaded

    def _full(self, conn: sqlite3.Connection, instance: str, version: int) -> _Loaded:
        """Every active belief, read ``LOAD_PAGE`` rows at a time into arrays.

        At most one page of rows is held as Python objects (at 1M beliefs the row tuples alone would be ~0.5 GB).
        """
        cursor = conn.execute(_LOAD_SQL, (_ACTIVE,))
        codes: dict[str, int] = {}
        parts: list[_Part] = []
        while rows := cursor.fetchmany(LOAD_PAGE):
            parts.append(_arrays(rows, codes))
        empty = _arrays([], codes)
        if not parts:
            parts.append(empty)
        base = _Part(
            np.concatenate([p.keys for p in parts]),
            np.concatenate([p.vectors for p in parts]),
            np.concatenate([p.when_us for p in parts]),
            np.concatenate([p.confidence for p in parts]),
            np.concatenate([p.ns_code for p in parts]),
        )
        with self._lock:
            self.stats.full += 1
            self.stats.rows += len(base.keys)
        return _Loaded(
            instance=instance,
            version=version,
            base=base,
            alive=None,
            delta=empty,
            namespaces=tuple(ns_of_key(key) for key in codes),
            codes=codes,
            hits={},
        )

    def _refresh(self, conn: sqlite3.Connection, held: _Loaded, version: int) -> _Loaded:
        """``held`` with the rows written and removed after its version (up to ``version``) applied.

        Copies the changed rows and ``held``'s delta (and the ``alive`` mask when a row of its base changed);
        the whole arrays only once the delta outgrows ``compact_at`` (``BeliefStats.compactions``).
        """
        changed = conn.execute(_CHANGED_SQL, (held.version, version)).fetchall()
        removed = [int(r[0]) for r in conn.execute(_REMOVED_SQL, (held.version, version))]
        gone = np.array(sorted({int(r[0]) for r in changed} | set(removed)), dtype=np.int64)
        codes = dict(held.codes)
        fresh = _arrays([r for r in changed if r[5] == _ACTIVE], codes)
        base, alive = held.base, held.alive
        at = np.searchsorted(base.keys, gone)
        inside = at < len(base.keys)
        hit = at[inside][base.keys[at[inside]] == gone[inside]]
        if len(hit):
            alive = np.ones(len(base.keys), dtype=bool) if alive is None else alive.copy()
            alive[hit] = False
        kept = held.delta.take(~np.isin(held.delta.keys, gone, assume_unique=True))
        delta = _Part.join(kept, fresh.take(np.argsort(fresh.keys, kind="stable")))
        copied = len(delta.keys)
        compacted = len(delta.keys) > compact_at(len(base.keys))
        if compacted:
            base = _Part.join(base if alive is None else base.take(alive), delta)
            alive, delta, copied = None, delta.take(np.zeros(0, dtype=np.int64)), len(base.keys)
        dropped = set(gone.tolist())
        with self._lock:
            self.stats.refreshes += 1
            self.stats.rows += len(changed) + len(removed)
            self.stats.compactions += int(compacted)
            self.stats.copied += copied
            hits = {bid: hit for bid, hit in held.hits.items() if bid not in dropped}
        return _Loaded(
            instance=held.instance,
            version=version,
            base=base,
            alive=alive,
            delta=delta,
            namespaces=(*held.namespaces, *(ns_of_key(key) for key in list(codes)[len(held.codes) :])),
            codes=codes,
            hits=hits,
        )

    def _admitted(self, loaded: _Loaded, reach: Reach) -> BoolArray:
        with self._lock:
            if self._loaded is loaded:
                held = self._reaches.get(reach)
                if held is not None:
                    self._reaches.move_to_end(reach)
                    return held
        out = np.fromiter((reach.admits(ns) for ns in loaded.namespaces), dtype=bool, count=len(loaded.namespaces))
        with self._lock:
            if self._loaded is loaded:
                self._reaches[reach] = out
                if len(self._reaches) > _REACH_CACHE:
                    self._reaches.popitem(last=False)
        return out


def _select(loaded: _Loaded, base_mask: BoolArray, delta_mask: BoolArray, stale: bool = False) -> BeliefRows:
    part = loaded.select(base_mask, delta_mask)
    return BeliefRows(part.keys, part.vectors, part.when_us, part.confidence, None if stale else loaded.hits)


def _evidence(conn: sqlite3.Connection, bids: Sequence[int]) -> dict[int, tuple[str, ...]]:
    """``bid → ids of the items it was derived from``, in write order."""
    out: dict[int, list[str]] = {}
    for chunk in chunks(list(bids)):
        for bid, item_id in conn.execute(
            "SELECT e.bid, i.id FROM belief_evidence e JOIN items i ON i.id = e.item_id "
            f"WHERE e.bid IN ({placeholders(len(chunk))}) ORDER BY e.bid, i.seq",
            chunk,
        ):
            out.setdefault(int(bid), []).append(str(item_id))
    return {bid: tuple(ids) for bid, ids in out.items()}


def evidence_of(conn: sqlite3.Connection, belief_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """``belief id → ids of the items it was derived from`` in write order (unknown ids left out)."""
    by_bid: dict[int, str] = {}
    for chunk in chunks(list(dict.fromkeys(belief_ids))):
        for bid, hid in conn.execute(f"SELECT bid, id FROM beliefs WHERE id IN ({placeholders(len(chunk))})", chunk):
            by_bid[int(bid)] = str(hid)
    evidence = _evidence(conn, sorted(by_bid))
    return {hid: evidence.get(bid, ()) for bid, hid in by_bid.items()}


# reads --------------------------------------------------------------------------------------------------
_HIT_COLUMNS = "b.bid, b.id, b.text, b.meta, b.confidence"


def _hits(
    conn: sqlite3.Connection, ranked: Sequence[tuple[int, float]], cache: dict[int, Hit] | None = None
) -> list[Hit]:
    """The ranked beliefs as hits, best first; ``cache`` (``BeliefRows.hits``) holds and keeps built ones."""
    if not ranked:
        return []
    rows: dict[int, Hit] = {}
    missing = [bid for bid, _ in ranked if cache is None or bid not in cache]
    evidence = _evidence(conn, missing)
    for chunk in chunks(missing):
        for bid, hid, text, meta, conf in conn.execute(
            f"SELECT {_HIT_COLUMNS} FROM beliefs b WHERE b.bid IN ({placeholders(len(chunk))}) AND b.status = ?",
            (*chunk, _ACTIVE),
        ):
            rows[int(bid)] = Hit.of_belief(str(hid), str(text), meta, float(conf), evidence.get(int(bid), ()))
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
    cos = None
    if mode is not FetchMode.KEYWORD:
        cos = (held.vectors @ query_vector(query)).astype(np.float64)
    matches = None
    if mode is not FetchMode.VECTOR:
        counts = index.fts_counts.counts(conn, "beliefs_fts") if index is not None else None
        matches = _matches(conn, held, cos, query, mode, limit, counts)
    empty = (keys[:0], np.zeros(0))
    cands = Candidates.build(keys, when, conf, cos, matches or empty)
    if mode is FetchMode.KEYWORD:
        keep = cands.matched
        cands = Candidates(keys[keep], when[keep], conf[keep], None, cands.lexical[keep], cands.matched[keep])
    hit_keys, scores = score(cands, mode)
    return _hits(conn, order(hit_keys, scores, limit), held.hits)


def _matches(
    conn: sqlite3.Connection,
    held: BeliefRows,
    cos: FloatArray | None,
    query: str,
    mode: FetchMode,
    limit: int,
    counts: dict[tuple[str, str, int], int] | None,
) -> tuple[IntArray, FloatArray]:
    """The ``beliefs_fts`` matches ranking the best ``limit`` of ``held`` needs, as ``fts.fts_matches`` gives them.

    Rows holding a rare word come with their BM25, as ``fts_matches`` reads them. A row matched by common words
    only (relevance ``COMMON_ONLY``) is looked up only when it could still reach the top ``limit``, by the bounds
    ``ranking`` uses for items (``ranking.bounds``, ``survivors``: exact, see there): the other beliefs holding
    a common word are left unread, where ``fts_matches`` read every one in the table (issue 12: a big agent's
    build adds thousands of beliefs holding "the", and every pack of every agent read them all). The top
    ``limit`` is the one ``fts_matches`` gives.

    Rare words are BM25-scored over rowid ranges covering ``held`` (``fts.bm25_rows`` with ``near``), not over
    the whole table: FTS5 takes BM25's statistics from the whole table whatever range a statement reads, so the
    values are the same, and a small agent's read no longer scores every belief another agent's build wrote
    holding one of its words (issue 12 §4, "no section's cost grows with the whole store").
    """
    n = len(held.keys)
    total = _table_rows(conn, n)
    words = fts.classify(conn, "beliefs_fts", query_words(query), fts.common_cutoff(n), counts)
    keys, values = fts.bm25_rows(conn, "beliefs_fts", words, held.keys, total)
    if not words.common:
        return keys, values
    lex, rare = align(held.keys, keys, values)
    w_lo = (1.0 - RECENCY_WEIGHT - CONFIDENCE_WEIGHT) + CONFIDENCE_WEIGHT * held.confidence
    sure_lb_ub = bounds(rare, np.maximum(lex, 0.0), cos, w_lo, w_lo + RECENCY_WEIGHT, mode, True, None)
    keep = survivors(*sure_lb_ub, limit)
    unknown = ~rare if keep is None else ~rare & keep
    if not unknown.any():
        return keys, values
    targets = held.keys[unknown]
    only = targets[fts.matching(conn, "beliefs_fts", words.common, targets, total)]
    keys = np.concatenate([keys, only])
    values = np.concatenate([values, np.full(len(only), COMMON_ONLY)])
    order_ = np.argsort(keys, kind="stable")
    return keys[order_], values[order_]


def _table_rows(conn: sqlite3.Connection, held: int) -> int:
    """About how many rows ``beliefs_fts`` holds: the highest ``bid``, at least ``held``.

    What a whole-table FTS5 statement would read, against which ``fts.plan_ranges`` weighs the ranges covering
    the held rows.
    """
    top = conn.execute("SELECT coalesce(max(bid), 0) FROM beliefs").fetchone()[0]
    return max(held, int(top))


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

"""``ItemIndex``: a process-local copy of what ranking reads per item, kept in step with the file.

A stored item's vector, time, confidence, namespace and kind never change, and seqs are never reused, so the
copy only grows: ``refresh`` appends rows indexed since the last call (in seq order, up to the lowest
still-pending seq) and marks rows deleted since then (from the ``deleted`` log). A changed ``meta.instance``
(the file was replaced) empties it.

For the filters the live turn uses (a reach and kinds only), ``select`` picks the candidate rows from these
arrays without touching SQLite; any other filter goes through SQL (``item_keys``).
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Final

import numpy as np
import numpy.typing as npt

from memory_core.meta import ItemKind, MetaFilter
from memory_core.query import FetchMode
from memory_core.scoring import EMBED_DIM

from .filters import compile_filter
from .rows import ns_of_key
from .search import Candidates, FloatArray, IntArray, fts_matches

__all__ = ["ItemIndex", "item_candidates"]

_KINDS: Final = {k.value: i for i, k in enumerate(ItemKind.all())}


def _simple(flt: MetaFilter) -> bool:
    """True when the filter sets nothing but a reach and kinds."""
    return MetaFilter(reach=flt.reach, kinds=flt.kinds) == flt


class ItemIndex:
    """Per-process arrays over the indexed items, by ascending ``seq`` (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._instance: str | None = None
        self._reset()

    def _reset(self) -> None:
        self.upto = 0
        self.deleted_upto = 0
        self.seqs: IntArray = np.zeros(0, dtype=np.int64)
        self.vectors: npt.NDArray[np.float32] = np.zeros((0, EMBED_DIM), dtype=np.float32)
        self.when_us: IntArray = np.zeros(0, dtype=np.int64)
        self.confidence: FloatArray = np.zeros(0)
        self.ns_code: npt.NDArray[np.int32] = np.zeros(0, dtype=np.int32)
        self.kind_code: npt.NDArray[np.int8] = np.zeros(0, dtype=np.int8)
        self.alive: npt.NDArray[np.bool_] = np.zeros(0, dtype=bool)
        self.ns_keys: list[str] = []
        self._ns_codes: dict[str, int] = {}

    def _code(self, key: str) -> int:
        code = self._ns_codes.get(key)
        if code is None:
            code = self._ns_codes[key] = len(self.ns_keys)
            self.ns_keys.append(key)
        return code

    def refresh(self, conn: sqlite3.Connection) -> None:
        """Take in rows indexed and deleted since the last refresh (call inside the read's snapshot)."""
        instance_row = conn.execute("SELECT value FROM meta WHERE key = 'instance'").fetchone()
        instance = str(instance_row[0]) if instance_row else None
        bound = int(
            conn.execute(
                "SELECT coalesce((SELECT min(seq) - 1 FROM pending), (SELECT max(seq) FROM items), 0)"
            ).fetchone()[0]
            or 0
        )
        with self._lock:
            if instance != self._instance:
                self._reset()
                self._instance = instance
            if bound > self.upto:
                self._append(conn, bound)
            gone = conn.execute("SELECT n, seq FROM deleted WHERE n > ? ORDER BY n", (self.deleted_upto,)).fetchall()
            if gone:
                self.deleted_upto = int(gone[-1][0])
                dead = np.fromiter((g[1] for g in gone), dtype=np.int64, count=len(gone))
                if len(self.seqs):
                    pos = np.minimum(np.searchsorted(self.seqs, dead), len(self.seqs) - 1)
                    alive = self.alive.copy()
                    alive[pos[self.seqs[pos] == dead]] = False
                    self.alive = alive

    def _append(self, conn: sqlite3.Connection, bound: int) -> None:
        rows = conn.execute(
            "SELECT seq, vec, coalesce(observed_at, stored_at), coalesce(confidence, 0.5), ns, kind FROM items "
            "WHERE seq > ? AND seq <= ? AND vec IS NOT NULL ORDER BY seq",
            (self.upto, bound),
        ).fetchall()
        self.upto = bound
        if not rows:
            return
        n = len(rows)
        self.seqs = np.concatenate([self.seqs, np.fromiter((r[0] for r in rows), dtype=np.int64, count=n)])
        vecs = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(n, EMBED_DIM)
        self.vectors = np.concatenate([self.vectors, vecs])
        self.when_us = np.concatenate([self.when_us, np.fromiter((r[2] for r in rows), dtype=np.int64, count=n)])
        self.confidence = np.concatenate(
            [self.confidence, np.fromiter((r[3] for r in rows), dtype=np.float64, count=n)]
        )
        codes = np.fromiter((self._code(str(r[4])) for r in rows), dtype=np.int32, count=n)
        self.ns_code = np.concatenate([self.ns_code, codes])
        kinds = np.fromiter((_KINDS[str(r[5])] for r in rows), dtype=np.int8, count=n)
        self.kind_code = np.concatenate([self.kind_code, kinds])
        self.alive = np.concatenate([self.alive, np.ones(n, dtype=bool)])

    def select(self, flt: MetaFilter, snapshot: int) -> IntArray | None:
        """Seqs of live indexed rows at or below ``snapshot`` that ``flt`` admits; None unless ``_simple(flt)``."""
        if not _simple(flt):
            return None
        with self._lock:
            seqs, ns_code, kind_code, alive, ns_keys = self.seqs, self.ns_code, self.kind_code, self.alive, self.ns_keys
            reach = flt.effective_reach()
            admitted = np.fromiter((reach.admits(ns_of_key(k)) for k in ns_keys), dtype=bool, count=len(ns_keys))
        kinds = np.zeros(len(_KINDS), dtype=bool)
        for kind in flt.kinds or ItemKind.all():
            kinds[_KINDS[kind.value]] = True
        n = len(seqs)
        mask: npt.NDArray[np.bool_] = alive[:n] & (seqs <= snapshot) & kinds[kind_code[:n]] & admitted[ns_code[:n]]
        selected: IntArray = seqs[mask]
        return selected

    def size(self) -> int:
        """How many live indexed rows the index holds."""
        return int(self.alive.sum())

    def take(self, keys: IntArray, conn: sqlite3.Connection) -> tuple[npt.NDArray[np.float32], IntArray, FloatArray]:
        """Vectors, times and confidences of ``keys`` (indexed rows); rows past the loaded bound come from ``conn``."""
        with self._lock:
            seqs, vecs, when, conf = self.seqs, self.vectors, self.when_us, self.confidence
        if len(seqs):
            pos = np.minimum(np.searchsorted(seqs, keys), len(seqs) - 1)
            found = seqs[pos] == keys
        else:
            pos, found = np.zeros(len(keys), dtype=np.int64), np.zeros(len(keys), dtype=bool)
        if found.all():
            return vecs[pos], when[pos], conf[pos]
        out_v = np.zeros((len(keys), EMBED_DIM), dtype=np.float32)
        out_w = np.zeros(len(keys), dtype=np.int64)
        out_c = np.full(len(keys), 0.5)
        out_v[found], out_w[found], out_c[found] = vecs[pos[found]], when[pos[found]], conf[pos[found]]
        missing = [int(k) for k in keys[~found]]
        extra: dict[int, tuple[bytes, int, float]] = {}
        for start in range(0, len(missing), 500):
            chunk = missing[start : start + 500]
            marks = ", ".join("?" for _ in chunk)
            for seq, vec, at, c in conn.execute(
                "SELECT seq, vec, coalesce(observed_at, stored_at), coalesce(confidence, 0.5) FROM items "
                f"WHERE seq IN ({marks}) AND vec IS NOT NULL",
                chunk,
            ):
                extra[int(seq)] = (vec, int(at), float(c))
        for i in np.flatnonzero(~found):
            row = extra.get(int(keys[i]))
            if row is not None:
                out_v[i] = np.frombuffer(row[0], dtype="<f4")
                out_w[i], out_c[i] = row[1], row[2]
        return out_v, out_w, out_c


def item_keys(conn: sqlite3.Connection, flt: MetaFilter, snapshot: int) -> IntArray:
    """Seqs of indexed rows at or below ``snapshot`` that ``flt`` admits, through SQL (any filter)."""
    where = compile_filter(flt, "i")
    where.add("i.seq <= ?", snapshot)
    where.add("i.vec IS NOT NULL")
    rows = conn.execute(f"SELECT i.seq FROM items i WHERE {where.sql} ORDER BY i.seq", where.params).fetchall()
    return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))


def item_candidates(
    conn: sqlite3.Connection, index: ItemIndex, flt: MetaFilter, snapshot: int, query: str, mode: FetchMode
) -> Candidates:
    """The items ``flt`` admits with their ranking data (``index`` refreshed in this snapshot)."""
    keys = index.select(flt, snapshot)
    if keys is None:
        keys = item_keys(conn, flt, snapshot)
    if mode is FetchMode.VECTOR:
        matches: tuple[IntArray, FloatArray] = (keys[:0], np.zeros(0))
    else:
        matches = fts_matches(conn, "items_fts", query, index.size())
    if mode is FetchMode.KEYWORD:
        keys = np.intersect1d(keys, matches[0], assume_unique=True)
    vectors, when, conf = index.take(keys, conn)
    return Candidates.build(keys, when, conf, None if mode is FetchMode.KEYWORD else vectors, matches)

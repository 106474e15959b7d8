"""A per-process copy of the active beliefs' ranking data, so a ranked read does not re-read every vector.

Every ranked read of a pack asks for beliefs (``FetchRequest.beliefs``; a lifecycle pack's four fetch sections
all do), and ranking them needs every admitted active belief's vector, time and confidence. Read from SQL that is
one row and a 256-byte blob per belief per read: with ~1 belief per conversation turn it grows with the history
and, after a few hundred turns and a brain of passages, dominates ``pre_turn`` (measured: see the report of
issue 4/6). Beliefs change only when a build or a forget writes them, so the arrays are kept per process and
reloaded when they change.

**Invalidation.** Every transaction that inserts, updates or deletes a belief row (``beliefs_store._save`` and
``_delete``, the only writers: builds and retractions on forget or erase) bumps ``meta.beliefs_version`` in the
same transaction. A read compares the version its snapshot sees with the one the arrays were loaded at:

* equal: the arrays are exactly the snapshot's active beliefs;
* the snapshot's is newer: this read reloads them (all active beliefs, one statement) and swaps them in;
* the snapshot's is older (another thread of this process already loaded a newer version): the read ranks
  from SQL as before, so it never sees beliefs its snapshot does not hold.

A different database file (``meta.instance``) resets the copy. Filters other than a reach (and kinds) are
compiled to SQL for the keys, and the arrays give the ranking data of those keys.

The hits built for a loaded version (text, metadata parsed from JSON, evidence) are kept with it
(``BeliefRows.hits``, by ``bid``), since a version's rows never change: parsing a belief's metadata was half of
a ranked belief read.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from memory_core.meta import ItemKind, MetaFilter
from memory_core.namespace import Namespace, Reach
from memory_core.query import Hit
from memory_core.scoring import EMBED_DIM

from .filters import compile_filter
from .rows import ns_of_key
from .search import FloatArray, IntArray

__all__ = ["VERSION_KEY", "BeliefIndex", "BeliefRows", "bump_version"]

VERSION_KEY: Final = "beliefs_version"
"""The ``meta`` key counting belief writes."""
_ACTIVE: Final = "active"
_REACH_CACHE: Final = 64
"""Reaches whose admitted-namespace arrays are kept (least recently used dropped first)."""
_LOAD_SQL: Final = (
    "SELECT bid, vec, coalesce(observed_at, updated_at), confidence, ns FROM beliefs WHERE status = ? ORDER BY bid"
)
BoolArray = npt.NDArray[np.bool_]
F32Array = npt.NDArray[np.float32]


def bump_version(conn: sqlite3.Connection) -> None:
    """Count one more belief write (call inside the writing transaction)."""
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, '1') "
        "ON CONFLICT(key) DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)",
        (VERSION_KEY,),
    )


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
class _Loaded:
    instance: str
    version: int
    keys: IntArray
    vectors: F32Array
    when_us: IntArray
    confidence: FloatArray
    ns_code: npt.NDArray[np.int32]
    namespaces: tuple[Namespace, ...]
    hits: dict[int, Hit]


class BeliefIndex:
    """Per-process arrays over the active beliefs (see the module docstring); safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded: _Loaded | None = None
        self._reaches: OrderedDict[Reach, BoolArray] = OrderedDict()

    def rows(self, conn: sqlite3.Connection, flt: MetaFilter) -> BeliefRows | None:
        """The snapshot's active beliefs ``flt`` admits, or None when this copy cannot serve the snapshot.

        Call inside the read's transaction. None means the snapshot is older than the copy (rank from SQL).
        """
        instance, version = _read_version(conn)
        with self._lock:
            loaded = self._loaded
        if loaded is None or loaded.instance != instance or loaded.version < version:
            loaded = self._load(conn, instance, version)
        elif loaded.version > version:
            return None
        if not flt.admits_kind(ItemKind.LEARNING):
            return _select(loaded, np.zeros(len(loaded.keys), dtype=bool))
        if MetaFilter(reach=flt.reach, kinds=flt.kinds) == flt:
            admitted = self._admitted(loaded, flt.effective_reach())
            return _select(loaded, admitted[loaded.ns_code])
        where = compile_filter(flt, "b", beliefs=True)
        where.add("b.status = ?", _ACTIVE)
        found = conn.execute(f"SELECT b.bid FROM beliefs b WHERE {where.sql} ORDER BY b.bid", where.params).fetchall()
        keys = np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found))
        return _select(loaded, np.isin(loaded.keys, keys, assume_unique=True))

    def _load(self, conn: sqlite3.Connection, instance: str, version: int) -> _Loaded:
        rows = conn.execute(_LOAD_SQL, (_ACTIVE,)).fetchall()
        n = len(rows)
        codes: dict[str, int] = {}
        for r in rows:
            codes.setdefault(str(r[4]), len(codes))
        loaded = _Loaded(
            instance=instance,
            version=version,
            keys=np.fromiter((r[0] for r in rows), dtype=np.int64, count=n),
            vectors=np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(n, EMBED_DIM),
            when_us=np.fromiter((r[2] for r in rows), dtype=np.int64, count=n),
            confidence=np.fromiter((r[3] for r in rows), dtype=np.float64, count=n),
            ns_code=np.fromiter((codes[str(r[4])] for r in rows), dtype=np.int32, count=n),
            namespaces=tuple(ns_of_key(key) for key in codes),
            hits={},
        )
        with self._lock:
            current = self._loaded
            if current is None or current.instance != instance or current.version < version:
                self._loaded = loaded
                self._reaches.clear()
        return loaded

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


def _select(loaded: _Loaded, mask: BoolArray) -> BeliefRows:
    return BeliefRows(
        loaded.keys[mask], loaded.vectors[mask], loaded.when_us[mask], loaded.confidence[mask], loaded.hits
    )

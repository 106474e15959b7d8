"""``ItemIndex``: a process-local copy of what ranking reads per item, kept in step with the file.

A stored item's vector, time, confidence, namespace and kind never change, and seqs are never reused, so the
copy only grows: ``refresh`` appends rows indexed since the last call (in seq order, up to the lowest
still-pending seq) and marks rows deleted since then (from the ``deleted`` log, which every process's delete
writes in the same transaction). A changed ``meta.instance`` (the file was replaced) empties it. So a read in
any process sees every other process's committed writes and deletes, through its own read snapshot.

Storage: parallel arrays by ascending seq in buffers that grow by doubling (an append copies nothing already
held, amortised), vectors in one contiguous float32 matrix. A reader takes an ``IndexView`` (the first ``n``
rows) under the lock and then works without it: appends write past ``n`` or into new buffers, and a delete
replaces the ``alive`` array rather than editing it, so a view never changes under its reader.

For the filters the live turn uses (a reach and kinds only), ``candidates`` picks rows from these arrays
without touching SQLite: each distinct namespace key is parsed once, and the namespaces a reach admits are
kept per reach as a boolean array over namespace codes. Any other filter goes through SQL (``item_keys``).
Each row's ``meta.agent_id`` is held as a code too, so a read that leaves one agent out (a pack's Team
section, ``FetchRequest.exclude_agent_id``) drops its rows before ranking. Rows indexed above the loaded bound
(the lowest pending seq, when another process indexed past it) are read from SQL for that call, so the
candidates are exactly the snapshot's indexed rows the filter admits.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from memory_core.meta import ItemKind, MetaFilter
from memory_core.namespace import Namespace, Reach
from memory_core.scoring import EMBED_DIM

from .filters import compile_filter
from .rows import chunks, ns_of_key, placeholders
from .search import FloatArray, IntArray

__all__ = ["CandidateRows", "IndexView", "ItemIndex", "item_keys"]

_KINDS: Final = {k.value: i for i, k in enumerate(ItemKind.all())}
_REACH_CACHE: Final = 256
"""Reaches whose admitted-namespace arrays are kept per index (least recently used dropped first)."""
_FULL_PRODUCT: Final = 8
"""Score every held row with one matrix product when the candidates are at least 1/8 of them (cheaper than
gathering their vectors first); else gather, then multiply."""
BoolArray = npt.NDArray[np.bool_]
F32Array = npt.NDArray[np.float32]
_ROW_SQL: Final = (
    "SELECT seq, vec, coalesce(observed_at, stored_at), coalesce(confidence, 0.5), ns, kind, agent_id FROM items "
)
LOAD_PAGE: Final = 20_000
"""Rows one refresh query reads (memory-core choice: the arrays grow by pages, so the Python tuples a first read
of a big file holds at once are bounded: ~20k rows ≈ 10 MB, whatever the file's size)."""
_NO_AGENT: Final = -1
"""The agent code of a row without ``meta.agent_id``."""


def _simple(flt: MetaFilter) -> bool:
    """True when the filter sets nothing but a reach and kinds."""
    return MetaFilter(reach=flt.reach, kinds=flt.kinds) == flt


def _kind_mask(flt: MetaFilter) -> BoolArray:
    mask = np.zeros(len(_KINDS), dtype=bool)
    for kind in flt.kinds or ItemKind.all():
        mask[_KINDS[kind.value]] = True
    return mask


@dataclass(frozen=True)
class IndexView:
    """The first ``n`` rows of an ``ItemIndex``, fixed when taken (arrays by ascending seq, length ``n``)."""

    seqs: IntArray
    vectors: F32Array
    when_us: IntArray
    confidence: FloatArray
    ns_code: npt.NDArray[np.int32]
    kind_code: npt.NDArray[np.int8]
    alive: BoolArray
    agent_code: npt.NDArray[np.int32]

    @property
    def n(self) -> int:
        """How many rows the view holds (live or deleted)."""
        return len(self.seqs)


@dataclass(frozen=True)
class CandidateRows:
    """Rows a filter admits, with their ranking data: held rows by position in a view, plus rows read from SQL.

    Attributes:
        keys: Seqs, ascending (held rows first: every held seq is below every row read from SQL).
        when_us: ``observed_at``, else the write time, µs.
        confidence: A learning's confidence, 0.5 for other kinds.
        view: The view the held rows come from.
        pos: Positions of the held rows in ``view``.
        extra_vectors: Vectors of the rows read from SQL (the last ``len(extra_vectors)`` keys).
        ns_keys: The index's namespace keys by code (append-only: every code in ``view`` is below its length).
        extra_ns: Namespace keys of the rows read from SQL.
    """

    keys: IntArray
    when_us: IntArray
    confidence: FloatArray
    view: IndexView
    pos: IntArray
    extra_vectors: F32Array
    ns_keys: list[str]
    extra_ns: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.keys)

    def namespaces(self) -> list[str]:
        """Each row's namespace key, in row order."""
        held = self.view.ns_code[self.pos]
        return [self.ns_keys[int(c)] for c in held] + list(self.extra_ns)

    def subset(self, keep: BoolArray) -> CandidateRows:
        """The rows where ``keep`` (one flag per row) is set, in order."""
        held = len(self.pos)
        extra = keep[held:]
        return CandidateRows(
            keys=self.keys[keep],
            when_us=self.when_us[keep],
            confidence=self.confidence[keep],
            view=self.view,
            pos=self.pos[keep[:held]],
            extra_vectors=self.extra_vectors[extra],
            ns_keys=self.ns_keys,
            extra_ns=tuple(ns for ns, k in zip(self.extra_ns, extra, strict=True) if k),
        )

    def cosines(self, q: F32Array) -> FloatArray:
        """Cosine of each row's stored vector with the unit query vector ``q`` (float32 products, as float64)."""
        held = self.view.vectors
        if len(self.pos) == 0:
            part = np.zeros(0, dtype=np.float32)
        elif len(self.pos) == len(held):  # every held row: positions 0..n-1
            part = held @ q
        elif len(self.pos) * _FULL_PRODUCT >= len(held):
            part = (held @ q)[self.pos]
        else:
            part = held[self.pos] @ q
        if len(self.extra_vectors):
            part = np.concatenate([part, self.extra_vectors @ q])
        out: FloatArray = part.astype(np.float64)
        return out


class ItemIndex:
    """Per-process arrays over the indexed items, by ascending ``seq`` (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._instance: str | None = None
        self._reset()

    def _reset(self) -> None:
        self.loads = 0
        self.upto = 0
        self.deleted_upto = 0
        self._n = 0
        self._live = 0
        self._seqs: IntArray = np.zeros(0, dtype=np.int64)
        self._vectors: F32Array = np.zeros((0, EMBED_DIM), dtype=np.float32)
        self._when: IntArray = np.zeros(0, dtype=np.int64)
        self._conf: FloatArray = np.zeros(0)
        self._ns: npt.NDArray[np.int32] = np.zeros(0, dtype=np.int32)
        self._kind: npt.NDArray[np.int8] = np.zeros(0, dtype=np.int8)
        self._alive: BoolArray = np.zeros(0, dtype=bool)
        self._agent: npt.NDArray[np.int32] = np.zeros(0, dtype=np.int32)
        self._agent_codes: dict[str, int] = {}
        self._ns_keys: list[str] = []
        self._ns_of: list[Namespace] = []
        self._ns_codes: dict[str, int] = {}
        self._reaches: OrderedDict[Reach, BoolArray] = OrderedDict()

    # keeping in step -------------------------------------------------------------------------------------
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
            while bound > self.upto:  # in pages: a first read of a big file never holds every row as tuples
                rows = conn.execute(
                    f"{_ROW_SQL} WHERE seq > ? AND seq <= ? AND vec IS NOT NULL ORDER BY seq LIMIT ?",
                    (self.upto, bound, LOAD_PAGE),
                ).fetchall()
                self._append(rows)
                self.loads += 1
                self.upto = bound if len(rows) < LOAD_PAGE else int(rows[-1][0])
            gone = conn.execute("SELECT n, seq FROM deleted WHERE n > ? ORDER BY n", (self.deleted_upto,)).fetchall()
            if gone:
                self.deleted_upto = int(gone[-1][0])
                self._mark_deleted(np.fromiter((g[1] for g in gone), dtype=np.int64, count=len(gone)))

    def _grow(self, need: int) -> None:
        cap = len(self._seqs)
        if need <= cap:
            return
        new_cap = max(need, 2 * cap, 1024)

        def grown(old: npt.NDArray[Any]) -> npt.NDArray[Any]:
            out = np.zeros((new_cap, *old.shape[1:]), dtype=old.dtype)
            out[: self._n] = old[: self._n]
            return out

        self._seqs, self._vectors, self._when = grown(self._seqs), grown(self._vectors), grown(self._when)
        self._conf, self._ns, self._kind = grown(self._conf), grown(self._ns), grown(self._kind)
        self._alive, self._agent = grown(self._alive), grown(self._agent)

    def _code(self, key: str) -> int:
        code = self._ns_codes.get(key)
        if code is None:
            code = self._ns_codes[key] = len(self._ns_keys)
            self._ns_keys.append(key)
            self._ns_of.append(ns_of_key(key))
        return code

    def _agent_code(self, agent: str | None) -> int:
        if agent is None:
            return _NO_AGENT
        code = self._agent_codes.get(agent)
        if code is None:
            code = self._agent_codes[agent] = len(self._agent_codes)
        return code

    def _append(self, rows: list[Any]) -> None:
        if not rows:
            return
        k = len(rows)
        start, end = self._n, self._n + k
        self._grow(end)
        self._seqs[start:end] = np.fromiter((r[0] for r in rows), dtype=np.int64, count=k)
        self._vectors[start:end] = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(k, EMBED_DIM)
        self._when[start:end] = np.fromiter((r[2] for r in rows), dtype=np.int64, count=k)
        self._conf[start:end] = np.fromiter((r[3] for r in rows), dtype=np.float64, count=k)
        self._ns[start:end] = np.fromiter((self._code(str(r[4])) for r in rows), dtype=np.int32, count=k)
        self._kind[start:end] = np.fromiter((_KINDS[str(r[5])] for r in rows), dtype=np.int8, count=k)
        self._alive[start:end] = True
        self._agent[start:end] = np.fromiter((self._agent_code(r[6]) for r in rows), dtype=np.int32, count=k)
        self._n = end
        self._live += k

    def _mark_deleted(self, dead: IntArray) -> None:
        n = self._n
        if n == 0:
            return
        seqs = self._seqs[:n]
        pos = np.minimum(np.searchsorted(seqs, dead), n - 1)
        pos = pos[(seqs[pos] == dead) & self._alive[pos]]
        if len(pos):
            alive = self._alive.copy()  # a view taken earlier keeps the old array
            alive[pos] = False
            self._alive = alive
            self._live -= len(np.unique(pos))

    # reading ---------------------------------------------------------------------------------------------
    def _view(self) -> IndexView:
        n = self._n
        return IndexView(
            self._seqs[:n], self._vectors[:n], self._when[:n], self._conf[:n], self._ns[:n], self._kind[:n],
            self._alive[:n], self._agent[:n],
        )  # fmt: skip

    def size(self) -> int:
        """How many live indexed rows the index holds."""
        return self._live

    def _admitted(self, reach: Reach) -> BoolArray:
        """``admitted[code]``: whether ``reach`` admits namespace ``code`` (call under the lock)."""
        held = self._reaches.get(reach)
        codes = len(self._ns_of)
        if held is not None and len(held) == codes:
            self._reaches.move_to_end(reach)
            return held
        done = 0 if held is None else len(held)
        fresh = np.fromiter((reach.admits(ns) for ns in self._ns_of[done:]), dtype=bool, count=codes - done)
        out = fresh if held is None else np.concatenate([held, fresh])
        self._reaches[reach] = out
        self._reaches.move_to_end(reach)
        if len(self._reaches) > _REACH_CACHE:
            self._reaches.popitem(last=False)
        return out

    def candidates(
        self, conn: sqlite3.Connection, flt: MetaFilter, snapshot: int, exclude_agent: str | None = None
    ) -> CandidateRows:
        """The snapshot's indexed rows at or below ``snapshot`` that ``flt`` admits (index refreshed in it).

        Rows whose ``meta.agent_id`` is ``exclude_agent`` are left out (``FetchRequest.exclude_agent_id``).
        """
        simple = _simple(flt)
        with self._lock:
            view = self._view()
            upto = self.upto
            admitted = self._admitted(flt.effective_reach()) if simple else None
            excluded = None if exclude_agent is None else self._agent_codes.get(exclude_agent, _NO_AGENT - 1)
        n = view.n
        if admitted is not None:
            mask = view.alive & (view.seqs <= snapshot) & _kind_mask(flt)[view.kind_code] & admitted[view.ns_code]
            if excluded is not None:
                mask &= view.agent_code != excluded
            pos: IntArray = np.flatnonzero(mask).astype(np.int64)
            extra = conn.execute(
                f"{_ROW_SQL} WHERE seq > ? AND seq <= ? AND vec IS NOT NULL ORDER BY seq", (upto, snapshot)
            ).fetchall()
            if extra:
                kinds = {k.value for k in flt.kinds or ItemKind.all()}
                reach = flt.effective_reach()
                extra = [r for r in extra if str(r[5]) in kinds and reach.admits(ns_of_key(str(r[4])))]
            if exclude_agent is not None:
                extra = [r for r in extra if r[6] != exclude_agent]
        else:
            keys = item_keys(conn, flt, snapshot, exclude_agent)
            at = np.minimum(np.searchsorted(view.seqs, keys), max(n - 1, 0))
            held = (view.seqs[at] == keys) if n else np.zeros(len(keys), dtype=bool)
            pos = at[held].astype(np.int64)
            missing = [int(k) for k in keys[~held]]
            extra = []
            for chunk in chunks(missing):
                marks = placeholders(len(chunk))
                extra.extend(conn.execute(f"{_ROW_SQL} WHERE seq IN ({marks}) ORDER BY seq", chunk).fetchall())
            extra.sort(key=lambda r: int(r[0]))
        k = len(extra)
        every = len(pos) == n  # every held row: the view's own arrays, no gathering

        def part(held: npt.NDArray[Any], column: int, dtype: type) -> npt.NDArray[Any]:
            mine = held if every else held[pos]
            if not k:
                return mine
            return np.concatenate([mine, np.fromiter((r[column] for r in extra), dtype=dtype, count=k)])

        return CandidateRows(
            keys=part(view.seqs, 0, np.int64),
            when_us=part(view.when_us, 2, np.int64),
            confidence=part(view.confidence, 3, np.float64),
            view=view,
            pos=pos,
            extra_vectors=np.frombuffer(b"".join(r[1] for r in extra), dtype="<f4").reshape(k, EMBED_DIM),
            ns_keys=self._ns_keys,
            extra_ns=tuple(str(r[4]) for r in extra),
        )


def item_keys(conn: sqlite3.Connection, flt: MetaFilter, snapshot: int, exclude_agent: str | None = None) -> IntArray:
    """Seqs of indexed rows at or below ``snapshot`` that ``flt`` admits, through SQL (any filter).

    Rows of ``exclude_agent`` (their ``meta.agent_id``) are left out.
    """
    where = compile_filter(flt, "i")
    where.add("i.seq <= ?", snapshot)
    if exclude_agent is not None:
        where.add("(i.agent_id IS NULL OR i.agent_id <> ?)", exclude_agent)
    where.add("i.vec IS NOT NULL")
    rows = conn.execute(f"SELECT i.seq FROM items i WHERE {where.sql} ORDER BY i.seq", where.params).fetchall()
    return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

"""``ItemIndex``: a process-local copy of what ranking reads per item, for the scopes reads touched.

A stored item's vector, time, confidence, namespace and kind never change, and seqs are never reused. The copy
holds rows by **scope** (a namespace and a kind, as the ``scopes`` table lists them) and loads a scope only when
a read admits it (issue 12, "memory at scale"): a first read learns the scopes (one read of ``scopes``) and
loads nothing else, then each read loads the scopes its reach and kinds admit that are not yet held, one indexed
range read per scope (``items_ns_kind``), in pages of ``LOAD_PAGE`` rows. A ``max_scopes`` read (the pack's
History, Team and Brain sections) passes ``window``: its conversation scopes are loaded only as far back as
their newest ``window`` turns, widened (twice as many, then twice again) until each has ``window`` candidates
the read serves or is held whole, so a scope of 1M turns costs such a read its newest few thousand rows. So what
a process holds follows what it reads, not the file's size.

Held scopes stay in step with the file: ``refresh`` reads rows indexed since the last call (in seq order, up to
the lowest still-pending seq) and keeps those of held scopes (a scope first seen then is held whole: it had no
older rows), and marks rows deleted since then (from the ``deleted`` log, which every process's delete writes in
the same transaction). A changed ``meta.instance`` (the file was replaced) empties it. A scope is loaded only
in a snapshot that sees exactly the held state (same ``upto`` and deleted-log position: rows at or below
``upto`` change only by deletion); a read whose snapshot is older is served from a private copy loaded in its
own snapshot (``private_reads``). So a read in any process sees every other process's committed writes and
deletes, through its own read snapshot.

Storage: parallel arrays by ascending seq, vectors in one contiguous float32 matrix (~290 bytes a row). Rows
indexed later append into buffers that grow by doubling; a loaded scope's rows are merged in by building new
arrays. A reader takes an ``IndexView`` (the first ``n`` rows) under the lock and then works without it: appends
write past ``n`` or into new buffers, a merge builds new ones, and a delete replaces the ``alive`` array rather
than editing it, so a view never changes under its reader.

For the filters the live turn uses (a reach and kinds only), ``candidates`` picks rows from these arrays
without touching SQLite: each distinct namespace key is parsed once, and the namespaces a reach admits are
kept per reach as a boolean array over namespace codes. Any other filter goes through SQL (``item_keys``), its
held rows taken from the arrays. Each row's ``meta.agent_id`` is held as a code too, so a read that leaves one
agent out (a pack's Team section, ``FetchRequest.exclude_agent_id``) drops its rows before ranking. Rows indexed
above the loaded bound (the lowest pending seq, when another process indexed past it) are read from SQL for that
call, so the candidates are exactly the snapshot's indexed rows the filter admits.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from memory_core.engines.reference import scope_order
from memory_core.meta import ItemKind, MetaFilter
from memory_core.namespace import Namespace, Reach
from memory_core.scoring import EMBED_DIM

from .filters import compile_filter
from .read_memo import ReadMemo
from .rows import chunks, ns_of_key, placeholders
from .search import FloatArray, IntArray

__all__ = ["Bounded", "CandidateRows", "IndexView", "ItemIndex", "item_keys"]

_KINDS: Final = {k.value: i for i, k in enumerate(ItemKind.all())}
_KIND_NAMES: Final = [k.value for k in ItemKind.all()]
_CONVERSATION: Final = _KINDS[ItemKind.CONVERSATION.value]
_UNLOADED: Final = -1
"""A scope's ``lo`` while none of its rows is held."""
_ALL: Final = 0
"""A scope's ``lo`` once every row is held; above 0, the lowest seq held (every newer row of it is held)."""
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
"""Rows one load query reads (memory-core choice: rows are read in pages, so the Python tuples a load holds at
once are bounded: ~20k rows ≈ 10 MB, whatever the scope's size)."""
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


@dataclass(frozen=True)
class _Snapshot:
    """What a read snapshot sees of the index's sources: the file's instance, the indexed bound, the deleted log."""

    instance: str | None
    bound: int
    deleted: int


def _snapshot(conn: sqlite3.Connection) -> _Snapshot:
    """The snapshot ``conn``'s transaction reads (three indexed lookups)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'instance'").fetchone()
    bound = conn.execute(
        "SELECT coalesce((SELECT min(seq) - 1 FROM pending), (SELECT max(seq) FROM items), 0)"
    ).fetchone()[0]
    deleted = conn.execute("SELECT coalesce(max(n), 0) FROM deleted").fetchone()[0]
    return _Snapshot(None if row is None else str(row[0]), int(bound or 0), int(deleted))


@dataclass(frozen=True)
class _Page:
    """Rows read from SQL as columns (codes assigned by the index that read them)."""

    seqs: IntArray
    vectors: F32Array
    when: IntArray
    conf: FloatArray
    ns: npt.NDArray[np.int32]
    kind: npt.NDArray[np.int8]
    agent: npt.NDArray[np.int32]

    def columns(self) -> Iterator[tuple[str, npt.NDArray[Any]]]:
        """``(ItemIndex attribute, column)`` for every column."""
        yield from (("_seqs", self.seqs), ("_vectors", self.vectors), ("_when", self.when), ("_conf", self.conf))
        yield from (("_ns", self.ns), ("_kind", self.kind), ("_agent", self.agent))

    @staticmethod
    def concat(pages: list[_Page]) -> _Page:
        """The rows of ``pages``, in order."""
        return _Page(*(np.concatenate([getattr(p, f) for p in pages]) for f in _PAGE_FIELDS))


_PAGE_FIELDS: Final = ("seqs", "vectors", "when", "conf", "ns", "kind", "agent")


@dataclass(frozen=True)
class Bounded:
    """A ``max_scopes`` read, as the index loads for it (``FetchRequest.max_scopes``, ``scoped``).

    Attributes:
        query: The fetch query (scopes it names come first: ``reference.scope_order``).
        max_scopes: N: the read ranks at most N scopes (reference §1.3).
        window: A scope's newest conversation turns it ranks (``scoped.SCOPE_WINDOW``).
    """

    query: str
    max_scopes: int
    window: int


class ItemIndex:
    """Per-process arrays over the indexed items of the scopes reads touched, by ascending ``seq`` (module docstring).

    Attributes:
        loads: Load queries run (pages of new rows, scope loads and widenings).
        rows_read: Rows those queries returned (new rows of scopes not held are read, then dropped).
        private_reads: Reads served from a private copy, their snapshot being older than the shared one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._instance: str | None = None
        self.private_reads = 0
        self._reset()

    def _reset(self) -> None:
        self.loads = 0
        self.rows_read = 0
        self.upto = 0
        self.deleted_upto = 0
        self._synced = False
        self._deleted_total = 0
        self._n = 0
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
        self._pair_of: dict[tuple[int, int], int] = {}
        self._pair_ns: npt.NDArray[np.int32] = np.zeros(0, dtype=np.int32)
        self._pair_kind: npt.NDArray[np.int8] = np.zeros(0, dtype=np.int8)
        self._pair_lo: IntArray = np.zeros(0, dtype=np.int64)
        self._tail: dict[int, int] = {}
        self._no_others: dict[tuple[int, str], int] = {}

    # keeping in step -------------------------------------------------------------------------------------
    def refresh(self, conn: sqlite3.Connection) -> None:
        """Take in rows indexed and deleted since the last refresh (call inside the read's snapshot)."""
        snap = _snapshot(conn)
        with self._lock:
            self._sync(conn, snap)

    def _sync(self, conn: sqlite3.Connection, snap: _Snapshot) -> None:
        """Bring the held scopes up to ``snap`` when it is newer (under the lock)."""
        if snap.instance != self._instance:
            self._reset()
            self._instance = snap.instance
        if not self._synced:  # a first read: learn the scopes, load none of them
            known = [
                (self._code(str(ns)), _KINDS[str(k)])
                for ns, k in conn.execute("SELECT ns, kind FROM scopes")
                if k in _KINDS
            ]
            self._pair_of = {pair: pid for pid, pair in enumerate(known)}
            self._pair_ns = np.array([code for code, _ in known], dtype=np.int32)
            self._pair_kind = np.array([kind for _, kind in known], dtype=np.int8)
            self._pair_lo = np.full(len(known), _UNLOADED, dtype=np.int64)
            self._deleted_total = int(conn.execute("SELECT count(*) FROM deleted").fetchone()[0])
            self.upto, self.deleted_upto, self._synced = snap.bound, snap.deleted, True
            return
        while snap.bound > self.upto:  # in pages: a big batch of new rows is never held as tuples at once
            rows = conn.execute(
                f"{_ROW_SQL} WHERE seq > ? AND seq <= ? AND vec IS NOT NULL ORDER BY seq LIMIT ?",
                (self.upto, snap.bound, LOAD_PAGE),
            ).fetchall()
            self.loads += 1
            self.rows_read += len(rows)
            self._append([r for r in rows if self._held_pair(r)])
            self.upto = snap.bound if len(rows) < LOAD_PAGE else int(rows[-1][0])
        if snap.deleted > self.deleted_upto:
            gone = conn.execute("SELECT n, seq FROM deleted WHERE n > ? ORDER BY n", (self.deleted_upto,)).fetchall()
            if gone:
                self.deleted_upto = int(gone[-1][0])
                self._deleted_total += len(gone)
                self._mark_deleted(np.fromiter((g[1] for g in gone), dtype=np.int64, count=len(gone)))

    def _pair(self, ns_code: int, kind_code: int, lo: int) -> int:
        """The id of scope ``(ns_code, kind_code)``, registered with coverage ``lo`` when new."""
        pid = self._pair_of.get((ns_code, kind_code))
        if pid is None:
            pid = self._pair_of[(ns_code, kind_code)] = len(self._pair_of)
            self._pair_ns = np.append(self._pair_ns, np.int32(ns_code))
            self._pair_kind = np.append(self._pair_kind, np.int8(kind_code))
            self._pair_lo = np.append(self._pair_lo, np.int64(lo))
        return pid

    def _held_pair(self, row: Any) -> bool:
        """Whether a new row (above ``upto``) belongs to a held scope; a scope first seen now is held whole."""
        kind = _KINDS[str(row[5])]
        pid = self._pair(self._code(str(row[4])), kind, _ALL)
        return bool(self._pair_lo[pid] != _UNLOADED)

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

    def _page(self, rows: list[Any]) -> _Page:
        k = len(rows)
        return _Page(
            seqs=np.fromiter((r[0] for r in rows), dtype=np.int64, count=k),
            vectors=np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(k, EMBED_DIM),
            when=np.fromiter((r[2] for r in rows), dtype=np.int64, count=k),
            conf=np.fromiter((r[3] for r in rows), dtype=np.float64, count=k),
            ns=np.fromiter((self._code(str(r[4])) for r in rows), dtype=np.int32, count=k),
            kind=np.fromiter((_KINDS[str(r[5])] for r in rows), dtype=np.int8, count=k),
            agent=np.fromiter((self._agent_code(r[6]) for r in rows), dtype=np.int32, count=k),
        )

    def _append(self, rows: list[Any]) -> None:
        """Append rows whose seqs are above every held one, in ascending order."""
        if not rows:
            return
        page = self._page(rows)
        start, end = self._n, self._n + len(rows)
        self._grow(end)
        for name, column in page.columns():
            getattr(self, name)[start:end] = column
        self._alive[start:end] = True
        self._n = end

    def _merge(self, pages: list[_Page]) -> None:
        """Put rows of newly loaded scopes (none held yet, any order) in seq order among the held ones.

        New arrays are built (copy on write), so a view taken earlier keeps its own.
        """
        pages = [p for p in pages if len(p.seqs)]
        if not pages:
            return
        fresh = _Page.concat(pages)
        order = np.argsort(fresh.seqs, kind="stable")
        n, k = self._n, len(order)
        total = n + k
        at_new = np.searchsorted(self._seqs[:n], fresh.seqs[order]) + np.arange(k)
        old = np.ones(total, dtype=bool)
        old[at_new] = False
        at_old = np.flatnonzero(old)
        cap = total + max(1024, total // 8)  # room for the rows later refreshes append
        for name, column in fresh.columns():
            held = getattr(self, name)
            out = np.zeros((cap, *held.shape[1:]), dtype=held.dtype)
            out[at_new] = column[order]
            out[at_old] = held[:n]
            setattr(self, name, out)
        alive = np.zeros(cap, dtype=bool)
        alive[at_new] = True
        alive[at_old] = self._alive[:n]
        self._alive = alive
        self._n = total

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

    # loading scopes ---------------------------------------------------------------------------------------
    def _below(self, conn: sqlite3.Connection, pid: int, below: int, limit: int) -> list[Any]:
        """Up to ``limit`` rows of scope ``pid`` with seqs below ``below``, newest first (one indexed range read)."""
        ns, kind = self._ns_keys[int(self._pair_ns[pid])], _KIND_NAMES[int(self._pair_kind[pid])]
        rows = conn.execute(
            f"{_ROW_SQL} WHERE ns = ? AND kind = ? AND seq < ? AND vec IS NOT NULL ORDER BY seq DESC LIMIT ?",
            (ns, kind, below, limit),
        ).fetchall()
        self.loads += 1
        self.rows_read += len(rows)
        return rows

    def _load(self, conn: sqlite3.Connection, whole: IntArray, tails: IntArray, window: int) -> None:
        """Hold every row of scopes ``whole`` and the newest ``window`` of scopes ``tails``.

        Called under the lock, in a snapshot equal to the held state.
        """
        pages: list[_Page] = []
        for pid in tails.tolist():
            rows = self._below(conn, pid, self.upto + 1, window)
            pages.append(self._page(rows))
            self._tail[pid] = window
            self._pair_lo[pid] = _ALL if len(rows) < window else int(rows[-1][0])
        for pid in whole.tolist():
            lo = int(self._pair_lo[pid])
            below = self.upto + 1 if lo == _UNLOADED else lo
            while True:  # in pages: the Python rows held at once stay bounded
                rows = self._below(conn, pid, below, LOAD_PAGE)
                pages.append(self._page(rows))
                if len(rows) < LOAD_PAGE:
                    break
                below = int(rows[-1][0])
            self._pair_lo[pid] = _ALL
        self._merge(pages)

    def _widen(self, conn: sqlite3.Connection, pids: list[int]) -> None:
        """Hold twice as many of each scope's older rows (under the lock, in a snapshot equal to the held state)."""
        pages: list[_Page] = []
        for pid in pids:
            lo, limit = int(self._pair_lo[pid]), self._tail[pid]
            rows = self._below(conn, pid, lo, limit)
            pages.append(self._page(rows))
            self._tail[pid] = 2 * limit
            self._pair_lo[pid] = _ALL if len(rows) < limit else int(rows[-1][0])
        self._merge(pages)

    def _others_below(self, conn: sqlite3.Connection, pid: int, agent: str) -> bool:
        """Whether scope ``pid`` holds, below its held rows, a row whose ``meta.agent_id`` is not ``agent``."""
        lo = int(self._pair_lo[pid])
        if self._no_others.get((pid, agent)) == lo:
            return False
        ns, kind = self._ns_keys[int(self._pair_ns[pid])], _KIND_NAMES[int(self._pair_kind[pid])]
        found = conn.execute(
            "SELECT 1 FROM items WHERE ns = ? AND kind = ? AND seq < ? AND vec IS NOT NULL "
            "AND (agent_id IS NULL OR agent_id <> ?) LIMIT 1",
            (ns, kind, lo, agent),
        ).fetchone()
        if found is None:  # rows below ``lo`` never change but by deletion: true until ``lo`` moves
            self._no_others[(pid, agent)] = lo
        return found is not None

    # reading ---------------------------------------------------------------------------------------------
    def _view(self) -> IndexView:
        n = self._n
        return IndexView(
            self._seqs[:n], self._vectors[:n], self._when[:n], self._conf[:n], self._ns[:n], self._kind[:n],
            self._alive[:n], self._agent[:n],
        )  # fmt: skip

    def size(self) -> int:
        """About how many live indexed rows the file holds (held or not): seqs up to ``upto`` less deletions."""
        return max(0, self.upto - self._deleted_total)

    def held(self) -> int:
        """How many rows the process holds (live or deleted)."""
        return self._n

    def nbytes(self) -> int:
        """Bytes the held arrays take, their spare capacity included (~290 bytes a row; the scope table aside)."""
        columns = (self._seqs, self._vectors, self._when, self._conf, self._ns, self._kind, self._alive, self._agent)
        return sum(c.nbytes for c in columns)

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

    def _scopes_of(self, flt: MetaFilter) -> IntArray:
        """Ids of the known scopes ``flt`` (a reach and kinds) admits (under the lock)."""
        admitted = self._admitted(flt.effective_reach())
        sel = admitted[self._pair_ns] & _kind_mask(flt)[self._pair_kind]
        return np.flatnonzero(sel).astype(np.int64)

    def candidates(
        self,
        conn: sqlite3.Connection,
        flt: MetaFilter,
        snapshot: int,
        exclude_agent: str | None = None,
        *,
        bounded: Bounded | None = None,
        served: Callable[[IntArray], BoolArray | None] | None = None,
        memo: ReadMemo | None = None,
    ) -> CandidateRows:
        """The snapshot's indexed rows at or below ``snapshot`` that ``flt`` admits (index refreshed in it).

        Args:
            conn: A connection inside the read's transaction.
            flt: The read's filter.
            snapshot: The highest seq the read sees.
            exclude_agent: Rows whose ``meta.agent_id`` is this are left out (``FetchRequest.exclude_agent_id``).
            bounded: For a ``max_scopes`` read: only the scopes it can rank are loaded (in ``scope_order``, until
                N of them have candidates), and of each its conversations only as far back as its newest
                ``window`` candidates. The rows still hold every scope ``choose_scopes`` would keep over all
                candidates, and each one's newest ``window``, so ranking them gives the same answer. None loads
                every admitted scope whole.
            served: Which of the rows' seqs the read serves (``log_view.served_mask``; None: every one); the
                rows it drops are left out.
            memo: The transaction's shared values: the snapshot's three lookups are read once per transaction.
        """
        if not _simple(flt):
            return _keep(self._by_sql(conn, flt, snapshot, exclude_agent), served)
        snap = _snapshot(conn) if memo is None else memo.once("index.snapshot", lambda: _snapshot(conn))
        with self._lock:
            self._sync(conn, snap)
            pids = self._scopes_of(flt)
            if bounded is None:
                order: list[tuple[int, IntArray]] = []
                loaded = self._ensure(conn, pids, None, snap)
            else:
                order = self._order(conn, flt, pids, bounded.query, memo)
                loaded = self._ensure(conn, _pids(order[: bounded.max_scopes]), bounded.window, snap)
        if not loaded:
            return self._private(conn, flt, snapshot, exclude_agent, bounded, served)
        taken = 0 if bounded is None else bounded.max_scopes
        while True:
            rows = _keep(self._held_rows(conn, flt, snapshot, exclude_agent), served)
            if bounded is None:
                return rows
            with self._lock:
                short = self._short(conn, rows, pids, bounded.window, exclude_agent)
                if short:
                    loaded = self._at(snap)
                    if loaded:
                        self._widen(conn, short)
                else:
                    missing = bounded.max_scopes - self._with_rows(rows, order[:taken])
                    if missing <= 0 or taken >= len(order):
                        return rows
                    loaded = self._ensure(conn, _pids(order[taken : taken + missing]), bounded.window, snap)
                    taken += missing
            if not loaded:
                return self._private(conn, flt, snapshot, exclude_agent, bounded, served)

    def _order(
        self, conn: sqlite3.Connection, flt: MetaFilter, pids: IntArray, query: str, memo: ReadMemo | None = None
    ) -> list[tuple[int, IntArray]]:
        """The namespaces of scopes ``pids``, as ``(code, their scope ids)`` in ``scope_order`` (under the lock).

        A namespace's last write is its scopes' latest (``scopes.last_write``, read in the read's snapshot: once
        per transaction with ``memo``, which the pack's sections share); a scope the table does not list (none
        should) was written last of all. Each section looks up its own scopes, not every row of the table.
        """
        read = "SELECT ns, kind, last_write FROM scopes"

        def table() -> dict[tuple[str, str], int]:
            return {(str(ns), str(kind)): int(at or 0) for ns, kind, at in conn.execute(read)}

        written = table() if memo is None else memo.once(read, table)
        last: dict[int, int] = {}
        codes, kinds = self._pair_ns[pids].tolist(), self._pair_kind[pids].tolist()
        for code, kind in zip(codes, kinds, strict=True):
            at = written.get((self._ns_keys[code], _KIND_NAMES[kind]), 0)
            last[code] = max(last.get(code, 0), at)
        by_ns = {self._ns_of[code]: code for code in last}
        ranked = scope_order(query, {ns: last[code] for ns, code in by_ns.items()}, flt.effective_reach())
        # each namespace's scope ids in ``pids`` order, as slices of one stable sort by the namespace's place
        ordered = [by_ns[ns] for ns in ranked]
        place = {code: i for i, code in enumerate(ordered)}
        places = np.fromiter((place[code] for code in codes), dtype=np.int64, count=len(codes))
        by_place = np.argsort(places, kind="stable")
        grouped, bounds = pids[by_place], np.searchsorted(places[by_place], np.arange(len(ordered) + 1))
        return [(code, grouped[bounds[i] : bounds[i + 1]]) for i, code in enumerate(ordered)]

    def _with_rows(self, rows: CandidateRows, order: list[tuple[int, IntArray]]) -> int:
        """How many of the namespaces ``order`` lists hold at least one of ``rows`` (under the lock)."""
        present = set(np.unique(rows.view.ns_code[rows.pos]).tolist())
        present |= {self._ns_codes[ns] for ns in rows.extra_ns if ns in self._ns_codes}
        return sum(1 for code, _ in order if code in present)

    def _at(self, snap: _Snapshot) -> bool:
        """Whether the held state is the one ``snap`` sees (only then are scopes loaded in it: they stay exact)."""
        return (snap.instance, snap.bound, snap.deleted) == (self._instance, self.upto, self.deleted_upto)

    def _private(
        self,
        conn: sqlite3.Connection,
        flt: MetaFilter,
        snapshot: int,
        exclude_agent: str | None,
        bounded: Bounded | None,
        served: Callable[[IntArray], BoolArray | None] | None,
    ) -> CandidateRows:
        """A read whose snapshot is older than the held state: served from a copy loaded in its own snapshot."""
        self.private_reads += 1
        return ItemIndex().candidates(conn, flt, snapshot, exclude_agent, bounded=bounded, served=served)

    def _ensure(self, conn: sqlite3.Connection, pids: IntArray, window: int | None, snap: _Snapshot) -> bool:
        """Load what a read of scopes ``pids`` needs and is not held (under the lock).

        Returns:
            False when something is missing and the held state is not the one ``snap`` sees (nothing loaded: the
            read goes to a private copy); True otherwise.
        """
        lo = self._pair_lo[pids]
        if window is None:
            whole, tails = pids[lo != _ALL], pids[:0]
        else:
            conversation = self._pair_kind[pids] == _CONVERSATION
            whole = pids[~conversation & (lo != _ALL)]
            tails = pids[conversation & (lo == _UNLOADED)]
        if not len(whole) and not len(tails):
            return True  # all held: the view serves any snapshot (rows above it are filtered by seq)
        if not self._at(snap):
            return False
        self._load(conn, whole, tails, window or 0)
        return True

    def _short(
        self, conn: sqlite3.Connection, rows: CandidateRows, pids: IntArray, window: int, exclude_agent: str | None
    ) -> list[int]:
        """Conversation scopes held in part with fewer than ``window`` candidates and older rows the read can take.

        Called under the lock.
        """
        partial = pids[(self._pair_kind[pids] == _CONVERSATION) & (self._pair_lo[pids] > 0)]
        if not len(partial):
            return []
        codes = rows.view.ns_code[rows.pos][rows.view.kind_code[rows.pos] == _CONVERSATION]
        counts = np.bincount(codes, minlength=len(self._ns_keys))
        out = []
        for pid in partial.tolist():
            if counts[int(self._pair_ns[pid])] >= window:
                continue
            if exclude_agent is not None and not self._others_below(conn, pid, exclude_agent):
                continue
            out.append(pid)
        return out

    def _held_rows(
        self, conn: sqlite3.Connection, flt: MetaFilter, snapshot: int, exclude_agent: str | None
    ) -> CandidateRows:
        """The candidates of a reach-and-kinds filter: held rows picked by array masks, newer ones from SQL."""
        with self._lock:
            view = self._view()
            upto = self.upto
            admitted = self._admitted(flt.effective_reach())
            excluded = None if exclude_agent is None else self._agent_codes.get(exclude_agent, _NO_AGENT - 1)
            ns_keys = self._ns_keys
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
        return _rows(view, pos, extra, ns_keys)

    def _by_sql(
        self, conn: sqlite3.Connection, flt: MetaFilter, snapshot: int, exclude_agent: str | None
    ) -> CandidateRows:
        """The candidates of any other filter: keys from SQL, held rows from the arrays, the rest read from SQL.

        The rows are gathered into a view of their own (held rows can sit anywhere among the others).
        """
        self.refresh(conn)
        with self._lock:
            view = self._view()
        n = view.n
        keys = item_keys(conn, flt, snapshot, exclude_agent)
        at = np.minimum(np.searchsorted(view.seqs, keys), max(n - 1, 0))
        held = (view.seqs[at] == keys) & view.alive[at] if n else np.zeros(len(keys), dtype=bool)
        pos = at[held]
        missing = [int(k) for k in keys[~held]]
        extra: list[Any] = []
        for chunk in chunks(missing):
            marks = placeholders(len(chunk))
            extra.extend(conn.execute(f"{_ROW_SQL} WHERE seq IN ({marks})", chunk).fetchall())
        with self._lock:
            page = self._page(extra)
            ns_keys = self._ns_keys
        seqs = np.concatenate([view.seqs[pos], page.seqs])
        order = np.argsort(seqs, kind="stable")

        def both(mine: npt.NDArray[Any], theirs: npt.NDArray[Any]) -> npt.NDArray[Any]:
            out: npt.NDArray[Any] = np.concatenate([mine[pos], theirs])[order]
            return out

        gathered = IndexView(
            seqs[order], both(view.vectors, page.vectors), both(view.when_us, page.when),
            both(view.confidence, page.conf), both(view.ns_code, page.ns), both(view.kind_code, page.kind),
            np.ones(len(seqs), dtype=bool), both(view.agent_code, page.agent),
        )  # fmt: skip
        return _rows(gathered, np.arange(len(seqs), dtype=np.int64), [], ns_keys)


def _pids(order: list[tuple[int, IntArray]]) -> IntArray:
    """The scope ids of the namespaces ``order`` lists."""
    return np.concatenate([p for _, p in order]) if order else np.zeros(0, dtype=np.int64)


def _keep(rows: CandidateRows, served: Callable[[IntArray], BoolArray | None] | None) -> CandidateRows:
    """``rows`` less those ``served`` drops."""
    if served is None or not len(rows):
        return rows
    mask = served(rows.keys)
    return rows if mask is None else rows.subset(mask)


def _rows(view: IndexView, pos: IntArray, extra: list[Any], ns_keys: list[str]) -> CandidateRows:
    """Candidate rows: held rows at ``pos`` in ``view``, then ``extra`` (rows read from SQL, above every held one)."""
    k = len(extra)
    every = len(pos) == view.n  # every held row: the view's own arrays, no gathering

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
        ns_keys=ns_keys,
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

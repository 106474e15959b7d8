"""``PooledIndex``: a process-local copy of the model's pooled item vectors, for the dense candidate source.

The copy holds only the rows reads asked about (issue 12, "memory at scale"): ``nearest`` is given a fetch's
candidates (``index.ItemIndex.candidates``: the scopes the read admits, a conversation scope of a ``max_scopes``
read only as far back as its bounded window), and the seqs among them the copy has not seen yet are read by
primary key, embedded or not (a seq without a row of the model is remembered as not embedded). So a first
hybrid read of a small scope reads that scope's pooled rows, not the file's, and what a process holds follows
what it reads, as the item index does.

Held seqs stay in step with the file: ``item_vectors`` rows are numbered in write order (``n``,
``vectors.NUMBERED``), so ``refresh`` reads only the rows written since its last call, whichever process wrote
them: one statement reads the file's instance and the last ``n``, and an indexed range read follows only when
rows were written since, in pages of ``PAGE`` rows, without their vectors. A held seq among them has its vector
read by key (a row of another model makes it not embedded); a seq not held is passed over (it is read when a read
asks for it). A changed ``meta.instance`` (the file was replaced), model or dimension empties the copy. Seqs are
loaded into the shared copy only in a snapshot that sees exactly its state (the same last ``n``); a read whose
snapshot is older reads its missing seqs for itself (``private_reads``), so no row written between the two
snapshots is ever missed. Deleted items are never removed: ``nearest`` only looks at the seqs the fetch's
candidates hold, and the candidates are the snapshot's live rows.

Storage: float32 rows (``retrieval.dense``: 1,536 bytes per 384-dimension item) in buffers that grow by
doubling, and the held seqs as two sorted arrays (seq, row; row -1: not embedded). When the candidates are at
least an eighth of the rows held, every row is multiplied and the candidates' cosines picked (cheaper than
gathering their rows first); else their rows are gathered. The sections of a pack ask with the same query
vector (one encoding per query text, ``queries``): the last full product is kept with the query array and the
generation of the rows it covers, so the pack's other sections pick from it.

Where the candidates sit in the copy (``Layout``: which are embedded, their rows, their previous turns and their
window neighbours) does not depend on the query, so the last one is kept while the candidates are equal and the
held seqs, rows and previous turns unchanged (a version bumped by every change to them). A whole-store fetch of
a 100k-item file so looks its candidates up once per change of the copy, not twice per fetch (issue 14 §6:
four 100k-key binary searches and a scatter per fetch, about a fifth of its ranking CPU, ``docs/retrieval.md``).
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Final

import numpy as np

from memory_core.retrieval.dense import F32, IntArray, top
from memory_core.retrieval.window_dense import neighbours

from .rows import chunks, placeholders

__all__ = ["Layout", "PooledIndex", "Scored"]

_FULL_PRODUCT: Final = 8
"""Multiply every held row when the candidates are at least 1/8 of them (as ``index.ItemIndex`` does)."""
_STATE: Final = "SELECT (SELECT value FROM meta WHERE key = 'instance'), (SELECT coalesce(max(n), 0) FROM item_vectors)"
_NONE: Final = -1
"""The row of a held seq with no vector of the model."""
PAGE: Final = 20_000
"""New ``item_vectors`` rows one refresh statement reads (their numbers, seqs and models, ~20k rows ≈ 2 MB of
tuples; memory-core choice, as ``index.LOAD_PAGE``): a backlog embedded meanwhile is never held at once."""


@dataclass(frozen=True)
class Layout:
    """Where a fetch's candidates sit in the copy: which are embedded, their rows and previous turns.

    It depends on the candidates and the held seqs only, not on the query, so ``PooledIndex.scored`` keeps the
    last one and reuses it while the candidates are equal and the held seqs, rows and previous turns unchanged
    (``PooledIndex.layouts``): a whole-store fetch of a 100k-item file otherwise looks its 100k keys up again
    on every call, and again in each source of the same fetch.

    Attributes:
        asked: ``(n,)`` the candidates asked about, ascending.
        version: The copy's layout version it was computed at.
        keys: ``(e,)`` the embedded ones among them, ascending.
        rows: ``(e,)`` each one's row in the copy's vectors.
        prev: ``(e,)`` each one's previous turn as embedded (-1: none).
    """

    asked: IntArray
    version: int
    keys: IntArray
    rows: IntArray
    prev: IntArray

    @cached_property
    def neighbours(self) -> tuple[IntArray, IntArray]:
        """``retrieval.window_dense.neighbours`` of ``keys``: each one's previous and next turn among them."""
        return neighbours(self.keys, self.prev)

    def same(self, keys: IntArray, version: int) -> bool:
        """Whether this layout answers for candidates ``keys`` at the copy's layout ``version``."""
        if version != self.version:
            return False
        return len(keys) == len(self.asked) and bool(np.array_equal(keys, self.asked))


@dataclass(frozen=True)
class Scored:
    """A fetch's embedded candidates as the copy holds them (``PooledIndex.scored``).

    Attributes:
        keys: ``(n,)`` their seqs, ascending.
        cos: ``(n,)`` their pooled vectors' cosines with the query.
        prev: ``(n,)`` each one's previous turn as embedded (``item_vectors.prev``; -1: none).
        held: The pooled vectors ``rows`` index (read only), then ``extra``'s.
        rows: ``(n,)`` each key's row in ``held`` (from ``len(held)`` on: in ``extra``).
        extra: Vectors an older snapshot read for itself (``private_reads``).
        layout: The ``Layout`` ``keys``, ``rows`` and ``prev`` come from; None with ``extra``.
    """

    keys: IntArray
    cos: F32
    prev: IntArray
    held: F32
    rows: IntArray
    extra: F32 | None = None
    layout: Layout | None = None

    def neighbours(self) -> tuple[IntArray, IntArray]:
        """Each key's previous and next turn among ``keys`` (``retrieval.window_dense.neighbours``), positions.

        Kept with the layout, so the fetches that ask about the same candidates compute them once.
        """
        if self.layout is not None:
            return self.layout.neighbours
        return neighbours(self.keys, self.prev)

    def vectors(self, at: IntArray) -> F32:
        """``(len(at), d)``: the pooled vectors of the keys at positions ``at``."""
        rows = self.rows[at]
        if self.extra is None:
            out: F32 = self.held[rows]
            return out
        mine = rows >= len(self.held)
        out = np.empty((len(rows), self.held.shape[1]), dtype=np.float32)
        out[~mine] = self.held[rows[~mine]]
        out[mine] = self.extra[rows[mine] - len(self.held)]
        return out


class PooledIndex:
    """The current model's pooled vectors of the seqs reads asked about (see the module docstring).

    Attributes:
        rows_read: Pooled vectors read from the file (of held seqs written since, and of seqs loaded on demand).
        private_reads: Reads whose snapshot was older than the copy's, their missing seqs read for themselves.
        products: Full products computed (for tests).
        layouts: ``Layout``s computed, each looking every candidate up among the held seqs (for tests: a run of
            fetches over the same candidates computes one).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = 0
        """Bumped whenever the held vectors change (``_product`` is of one generation): a vector row written, or
        seqs held with vectors; seqs held as not embedded add no row."""
        self._version = 0
        """Bumped whenever the held seqs, their rows or previous turns change (a ``Layout`` is of one version)."""
        self.products = 0
        self.rows_read = 0
        self.private_reads = 0
        self.layouts = 0
        self._reset("", "", 0, 0)

    def _reset(self, instance: str, model: str, dims: int, after: int) -> None:
        self._instance, self._model, self._dims = instance, model, dims
        self._after = after
        """The last ``n`` the held state reflects (rows of held seqs written up to it are taken in)."""
        self._count = 0
        self._vectors: F32 = np.zeros((0, dims), dtype=np.float32)
        self._known: IntArray = np.zeros(0, dtype=np.int64)
        """Held seqs, ascending."""
        self._row: IntArray = np.zeros(0, dtype=np.int64)
        """Each held seq's row in ``_vectors`` (``_NONE``: not embedded by the model)."""
        self._prev: IntArray = np.zeros(0, dtype=np.int64)
        """Each held seq's previous turn as embedded (``item_vectors.prev``; ``_NONE``: none, or not embedded)."""
        self._generation += 1
        self._version += 1
        self._layout: Layout | None = None
        """The last ``Layout`` computed."""
        self._product: tuple[F32, int, F32] | None = None
        """The last full product: ``(query, generation of the rows, cosines)``."""
        self._scored: tuple[F32, IntArray, int, Scored] | None = None
        """The last ``scored`` answer: ``(query, keys, generation, answer)``: a fetch's pooled and window sources
        ask with the same arrays."""

    def held(self) -> int:
        """How many seqs the copy holds (embedded or not)."""
        return len(self._known)

    def nbytes(self) -> int:
        """Bytes the held arrays take, their spare capacity included."""
        return self._vectors.nbytes + self._known.nbytes + self._row.nbytes + self._prev.nbytes

    def refresh(self, conn: sqlite3.Connection, model: str, dims: int) -> int:
        """Take in the rows of held seqs written since the last call (inside the reader's transaction).

        Returns:
            The last ``n`` the reader's snapshot sees.
        """
        instance_value, top_value = conn.execute(_STATE).fetchone()
        instance, top = str(instance_value), int(top_value)
        with self._lock:
            if (instance, model, dims) != (self._instance, self._model, self._dims):
                self._reset(instance, model, dims, top)  # nothing held: true as of any n
            while top > self._after:  # in pages of numbers and seqs; vectors read for held seqs only
                rows = conn.execute(
                    "SELECT n, seq, model FROM item_vectors WHERE n > ? AND n <= ? ORDER BY n LIMIT ?",
                    (self._after, top, PAGE),
                ).fetchall()
                self._update(conn, [(int(seq), str(m)) for _, seq, m in rows])
                self._after = top if len(rows) < PAGE else int(rows[-1][0])
        return top

    def _update(self, conn: sqlite3.Connection, rows: list[tuple[int, str]]) -> None:
        """Take in new rows ``(seq, model)`` of the held seqs among them (under the lock, in the reader's snapshot).

        A seq has one row (its latest: ``INSERT OR REPLACE``), so its vector is read by key.
        """
        if not rows or not len(self._known):
            return
        seqs = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        at = np.minimum(np.searchsorted(self._known, seqs), len(self._known) - 1)
        hit = np.flatnonzero(self._known[at] == seqs)
        if not len(hit):
            return
        blobs = self._read(conn, np.unique(seqs[hit]), self._model)
        self._row, self._prev = self._row.copy(), self._prev.copy()  # a reader's arrays never change under it
        for i in hit.tolist():
            pos, read = int(at[i]), blobs.get(int(seqs[i]))
            if read is None:  # another model's row, or not a vector of this size
                self._row[pos] = self._prev[pos] = _NONE
                continue
            blob, self._prev[pos] = read
            row = int(self._row[pos])
            if row == _NONE:
                row = self._room(1)
                self._row[pos] = row
            self._vectors[row] = np.frombuffer(blob, dtype="<f4")
        self._generation += 1
        self._version += 1

    def _room(self, k: int) -> int:
        """The first of ``k`` new rows in ``_vectors``, grown by doubling (under the lock)."""
        start = self._count
        need = start + k
        if need > len(self._vectors):
            grown = np.zeros((max(need, 2 * len(self._vectors), 1024), self._dims), np.float32)
            grown[:start] = self._vectors[:start]
            self._vectors = grown
        self._count = need
        return start

    def _read(self, conn: sqlite3.Connection, seqs: IntArray, model: str) -> dict[int, tuple[bytes, int]]:
        """``seq → (pooled blob, previous turn or _NONE)`` of the ``seqs`` with a row of ``model`` (by primary key)."""
        out: dict[int, tuple[bytes, int]] = {}
        for chunk in chunks(seqs.tolist()):
            for seq, blob, prev in conn.execute(
                f"SELECT seq, pooled, prev FROM item_vectors WHERE seq IN ({placeholders(len(chunk))}) AND model = ?",
                (*chunk, model),
            ):
                if len(blob) == 4 * self._dims:
                    out[int(seq)] = (bytes(blob), _NONE if prev is None else int(prev))
        self.rows_read += len(out)
        return out

    def _hold(self, seqs: IntArray, blobs: dict[int, tuple[bytes, int]]) -> None:
        """Hold ``seqs`` (ascending, none held), with the vectors of those in ``blobs`` (under the lock)."""
        rows = np.full(len(seqs), _NONE, dtype=np.int64)
        prevs = np.array([blobs[s][1] if s in blobs else _NONE for s in seqs.tolist()], dtype=np.int64)
        embedded = [i for i, s in enumerate(seqs.tolist()) if s in blobs]
        if embedded:
            start = self._room(len(embedded))
            joined = b"".join(blobs[int(seqs[i])][0] for i in embedded)
            self._vectors[start : start + len(embedded)] = np.frombuffer(joined, dtype="<f4").reshape(-1, self._dims)
            rows[embedded] = np.arange(start, start + len(embedded))
        known = np.concatenate([self._known, seqs])
        order = np.argsort(known, kind="stable")
        self._known, self._row = known[order], np.concatenate([self._row, rows])[order]
        self._prev = np.concatenate([self._prev, prevs])[order]
        self._version += 1
        if embedded:  # seqs held as not embedded leave every vector row, and so the last product, as they were
            self._generation += 1

    def nearest(self, conn: sqlite3.Connection, model: str, keys: IntArray, query: F32, n: int) -> list[int]:
        """The seqs among ``keys`` (ascending) whose pooled vectors of ``model`` are nearest ``query``, best first.

        Refreshes the copy and loads the ``keys`` it does not hold, inside the reader's transaction.

        Args:
            conn: A connection inside the read's transaction.
            model: The embedder's model name (rows of other models count as not embedded).
            keys: The fetch's candidate seqs, ascending.
            query: The query's ``(dims,)`` unit pooled vector.
            n: At most this many.
        """
        scored = self.scored(conn, model, keys, query)
        best, _ = top(scored.cos, n)
        return [int(s) for s in scored.keys[best]]

    def scored(self, conn: sqlite3.Connection, model: str, keys: IntArray, query: F32) -> Scored:
        """The embedded seqs among ``keys`` (ascending) with their cosines to ``query``, previous turns and vectors.

        Refreshes the copy and loads the ``keys`` it does not hold, inside the reader's transaction (``nearest``).
        """
        q = np.asarray(query, dtype=np.float32)
        top_n = self.refresh(conn, model, int(q.shape[-1]))
        own: dict[int, tuple[bytes, int]] = {}
        private = False
        with self._lock:
            layout = self._layout
            if layout is None or not layout.same(keys, self._version):
                layout = None
                missing = self._missing(keys)
                if len(missing):
                    if top_n == self._after:  # the snapshot sees the held state: load into the shared copy
                        self._hold(missing, self._read(conn, missing, model))
                    else:  # an older snapshot: rows written since may be missing from it
                        self.private_reads += 1
                        private = True
                        own = self._read(conn, missing, model)
            held, pos, prevs, version = self._known, self._row, self._prev, self._version
            vectors = self._vectors[: self._count]
            product, generation, last = self._product, self._generation, self._scored
        if not own and last is not None and last[0] is q and last[1] is keys and last[2] == generation:
            return last[3]  # the same query over the same candidates and rows: this fetch's other source
        if len(keys) == 0:
            return Scored(keys[:0], np.zeros(0, dtype=np.float32), keys[:0], vectors[:0], keys[:0])
        if layout is None:
            layout = self._locate(keys, held, pos, prevs, version)
            with self._lock:
                self.layouts += 1
                if not private and self._version == version:  # every key held: it answers until the state changes
                    self._layout = layout
        chosen, prev, rows = layout.keys, layout.prev, layout.rows
        if len(rows) == 0:
            cos: F32 = np.zeros(0, dtype=np.float32)
        elif product is not None and product[0] is q and product[1] == generation:  # this query's, same rows
            cos = product[2][rows]
        elif len(rows) * _FULL_PRODUCT >= len(vectors):
            full: F32 = vectors @ q
            with self._lock:
                if self._generation == generation:
                    self._product = (q, generation, full)
                self.products += 1
            cos = full[rows]
        else:
            cos = vectors[rows] @ q
        if own:  # seqs an older snapshot read for itself: rows after the held ones, in the order of ``mine``
            mine = np.array(sorted(own), dtype=np.int64)
            theirs = np.frombuffer(b"".join(own[int(s)][0] for s in mine), dtype="<f4").reshape(len(mine), -1)
            chosen = np.concatenate([chosen, mine])
            cos = np.concatenate([cos, theirs @ q])
            prev = np.concatenate([prev, np.array([own[int(s)][1] for s in mine], dtype=np.int64)])
            rows = np.concatenate([rows, len(vectors) + np.arange(len(mine))])
            order = np.argsort(chosen, kind="stable")  # ties by seq, as over one array
            chosen, cos, prev, rows = chosen[order], cos[order], prev[order], rows[order]
            return Scored(chosen, cos, prev, vectors, rows, theirs)
        answer = Scored(chosen, cos, prev, vectors, rows, layout=layout)
        with self._lock:
            if self._generation == generation:
                self._scored = (q, keys, generation, answer)
        return answer

    @staticmethod
    def _locate(keys: IntArray, held: IntArray, pos: IntArray, prevs: IntArray, version: int) -> Layout:
        """The ``Layout`` of ``keys`` (ascending) among held seqs ``held`` (rows ``pos``, previous turns ``prevs``)."""
        at = np.minimum(np.searchsorted(held, keys), max(len(held) - 1, 0))
        found = (held[at] == keys) if len(held) else np.zeros(len(keys), dtype=bool)
        rows = pos[at[found]]
        keep = rows != _NONE
        found[np.flatnonzero(found)[~keep]] = False
        return Layout(keys.copy(), version, keys[found], rows[keep], prevs[at[found]])

    def _missing(self, keys: IntArray) -> IntArray:
        """The ``keys`` (ascending) not held (under the lock)."""
        if not len(self._known):
            return keys
        at = np.minimum(np.searchsorted(self._known, keys), len(self._known) - 1)
        out: IntArray = keys[self._known[at] != keys]
        return out

"""``PooledIndex``: a process-local copy of the model's pooled item vectors, for the dense candidate source.

``item_vectors`` rows are numbered in write order (``n``, schema version 6), so ``refresh`` reads only the rows
written since its last call, whichever process wrote them: one statement reads the file's instance and the last
``n``, and an indexed range read follows only when rows were written since. Only the current model's rows are
held. A changed ``meta.instance`` (the file was replaced) empties the copy. Deleted
items are never removed from it: ``nearest`` only looks at the seqs the fetch's candidates hold, and the
candidates are the snapshot's live rows (``index.ItemIndex``).

Storage: float32 rows (``retrieval.dense``: 1,536 bytes per 384-dimension item) in buffers that grow by
doubling. When the candidates are at least an eighth of the rows held, every row is multiplied and the
candidates' cosines picked (cheaper than gathering their rows first); else their rows are gathered. The
sections of a pack ask with the same query vector (one encoding per query text, ``queries``): the last full
product is kept with the query array and the row count it covers, so the pack's other sections pick from it.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Final

import numpy as np

from memory_core.retrieval.dense import F32, IntArray, top

__all__ = ["PooledIndex"]

_FULL_PRODUCT: Final = 8
"""Multiply every held row when the candidates are at least 1/8 of them (as ``index.ItemIndex`` does)."""
_STATE: Final = "SELECT (SELECT value FROM meta WHERE key = 'instance'), (SELECT coalesce(max(n), 0) FROM item_vectors)"


class PooledIndex:
    """The current model's pooled vectors by seq (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = 0
        """Bumped whenever the held rows change (``_product`` is of one generation)."""
        self.products = 0
        """Full products computed (for tests)."""
        self._reset("", "", 0)

    def _reset(self, instance: str, model: str, dims: int) -> None:
        self._instance, self._model, self._dims = instance, model, dims
        self._after = 0
        self._count = 0
        self._vectors: F32 = np.zeros((0, dims), dtype=np.float32)
        self._seqs: IntArray = np.zeros(0, dtype=np.int64)
        self._at: dict[int, int] = {}
        self._sorted: tuple[IntArray, IntArray] | None = None
        self._generation += 1
        self._product: tuple[F32, int, F32] | None = None
        """The last full product: ``(query, generation of the rows, cosines)``."""

    def refresh(self, conn: sqlite3.Connection, model: str, dims: int) -> None:
        """Load the rows of ``model`` written since the last call (inside the reader's transaction)."""
        instance_value, top_value = conn.execute(_STATE).fetchone()
        instance, top = str(instance_value), int(top_value)
        with self._lock:
            if (instance, model, dims) != (self._instance, self._model, self._dims):
                self._reset(instance, model, dims)
            after = self._after
        if top <= after:  # nothing written since
            return
        rows = conn.execute(
            "SELECT n, seq, pooled FROM item_vectors WHERE n > ? AND n <= ? AND model = ? ORDER BY n",
            (after, top, model),
        ).fetchall()
        with self._lock:
            if self._after != after:  # another thread refreshed meanwhile
                return
            self._append([(int(seq), bytes(blob)) for _, seq, blob in rows if len(blob) == 4 * dims])
            self._after = top

    def _append(self, rows: list[tuple[int, bytes]]) -> None:
        if not rows:
            return
        vectors = np.frombuffer(b"".join(blob for _, blob in rows), dtype="<f4").reshape(len(rows), self._dims)
        need = self._count + len(rows)
        if need > len(self._vectors):
            size = max(need, 2 * len(self._vectors), 1024)
            grown = np.zeros((size, self._dims), np.float32)
            grown[: self._count] = self._vectors[: self._count]
            self._vectors = grown
            self._seqs = np.concatenate([self._seqs[: self._count], np.zeros(size - self._count, np.int64)])
        for i, (seq, _) in enumerate(rows):
            at = self._at.get(seq)
            if at is None:
                at = self._count
                self._at[seq] = at
                self._seqs[at] = seq
                self._count += 1
            self._vectors[at] = vectors[i]
        self._sorted = None
        self._generation += 1

    def nearest(self, keys: IntArray, query: F32, n: int) -> list[int]:
        """The seqs among ``keys`` (ascending) whose pooled vectors are nearest ``query``, best first, at most ``n``."""
        with self._lock:
            count = self._count
            if self._sorted is None:
                order = np.argsort(self._seqs[:count], kind="stable")
                self._sorted = (self._seqs[:count][order], order.astype(np.int64))
            held, pos = self._sorted
            vectors = self._vectors[:count]
            product, generation = self._product, self._generation
        if count == 0 or len(keys) == 0:
            return []
        at = np.minimum(np.searchsorted(held, keys), len(held) - 1)
        found = held[at] == keys
        rows = pos[at[found]]
        q = np.asarray(query, dtype=np.float32)
        if product is not None and product[0] is q and product[1] == generation:  # this query's, same rows
            cos = product[2][rows]
        elif len(rows) * _FULL_PRODUCT >= count:
            full: F32 = vectors @ q
            with self._lock:
                if self._generation == generation:
                    self._product = (q, generation, full)
                self.products += 1
            cos = full[rows]
        else:
            cos = vectors[rows] @ q
        best, _ = top(cos, n)
        return [int(s) for s in keys[found][best]]

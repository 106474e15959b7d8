"""``PooledIndex``: a process-local copy of the model's pooled item vectors, for the dense candidate source.

``item_vectors`` rows are numbered in write order (``n``, schema version 6), so ``refresh`` reads only the rows
written since its last call (one indexed range read; nothing when none was), whichever process wrote them. Only
the current model's rows are held. A changed ``meta.instance`` (the file was replaced) empties the copy. Deleted
items are never removed from it: ``nearest`` only looks at the seqs the fetch's candidates hold, and the
candidates are the snapshot's live rows (``index.ItemIndex``).

Storage: int8 rows with a float32 scale each (``retrieval.dense.quantise_rows``) in buffers that grow by
doubling: 388 bytes per 384-dimension item.
"""

from __future__ import annotations

import sqlite3
import threading

import numpy as np

from memory_core.retrieval.dense import F32, I8, IntArray, nearest, quantise_rows

__all__ = ["PooledIndex"]


class PooledIndex:
    """The current model's pooled vectors by seq (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset("", "", 0)

    def _reset(self, instance: str, model: str, dims: int) -> None:
        self._instance, self._model, self._dims = instance, model, dims
        self._after = 0
        self._count = 0
        self._q: I8 = np.zeros((0, dims), dtype=np.int8)
        self._scale: F32 = np.zeros(0, dtype=np.float32)
        self._seqs: IntArray = np.zeros(0, dtype=np.int64)
        self._at: dict[int, int] = {}
        self._sorted: tuple[IntArray, IntArray] | None = None

    def refresh(self, conn: sqlite3.Connection, model: str, dims: int) -> None:
        """Load the rows of ``model`` written since the last call (inside the reader's transaction)."""
        instance = str(conn.execute("SELECT value FROM meta WHERE key = 'instance'").fetchone()[0])
        with self._lock:
            if (instance, model, dims) != (self._instance, self._model, self._dims):
                self._reset(instance, model, dims)
            after = self._after
        rows = conn.execute(
            "SELECT n, seq, pooled FROM item_vectors WHERE n > ? AND model = ? ORDER BY n", (after, model)
        ).fetchall()
        top = conn.execute("SELECT coalesce(max(n), 0) FROM item_vectors").fetchone()[0]
        with self._lock:
            if self._after != after:  # another thread refreshed meanwhile
                return
            self._append([(int(seq), bytes(blob)) for _, seq, blob in rows if len(blob) == 4 * dims])
            self._after = max(int(top), after)

    def _append(self, rows: list[tuple[int, bytes]]) -> None:
        if not rows:
            return
        vectors = np.frombuffer(b"".join(blob for _, blob in rows), dtype="<f4").reshape(len(rows), self._dims)
        q, scale = quantise_rows(vectors)
        need = self._count + len(rows)
        if need > len(self._q):
            size = max(need, 2 * len(self._q), 1024)
            self._q = np.concatenate([self._q[: self._count], np.zeros((size - self._count, self._dims), np.int8)])
            self._scale = np.concatenate([self._scale[: self._count], np.zeros(size - self._count, np.float32)])
            self._seqs = np.concatenate([self._seqs[: self._count], np.zeros(size - self._count, np.int64)])
        for i, (seq, _) in enumerate(rows):
            at = self._at.get(seq)
            if at is None:
                at = self._count
                self._at[seq] = at
                self._seqs[at] = seq
                self._count += 1
            self._q[at], self._scale[at] = q[i], scale[i]
        self._sorted = None

    def nearest(self, keys: IntArray, query: F32, n: int) -> list[int]:
        """The seqs among ``keys`` (ascending) whose pooled vectors are nearest ``query``, best first, at most ``n``."""
        with self._lock:
            count = self._count
            if self._sorted is None:
                order = np.argsort(self._seqs[:count], kind="stable")
                self._sorted = (self._seqs[:count][order], order.astype(np.int64))
            held, pos = self._sorted
            q, scale = self._q, self._scale
        if count == 0 or len(keys) == 0:
            return []
        at = np.minimum(np.searchsorted(held, keys), len(held) - 1)
        found = held[at] == keys
        rows = pos[at[found]]
        best, _ = nearest(q[rows], scale[rows], query, n)
        return [int(s) for s in keys[found][best]]

"""``PooledCache``: a process-local copy of the model's pooled item vectors, for the dense candidate source.

The PostgreSQL twin of ``engines.sqlite.pooled``. A hybrid fetch nominates up to ``retrieval.dense.DENSE_POOL``
items nearest the query's pooled vector beside the lexical candidates (issue 14); PostgreSQL here has no
pgvector index over the model's vectors, so the nearest are found in the host, as SQLite does: one BLAS
matrix-vector product over the cached float32 rows (1,536 bytes per 384-dimension item).

Keeping it current costs no round trip: ``refresh`` gives a few more columns of the statement that already opens
every ranked read (``search.Frequencies.read_with``), and ``absorb`` takes its answer. Rows are found by the writing
transaction's id (``item_vectors.tx``, schema v5), with the belief build's watermark rule (``beliefs``): the
statement's snapshot ``xmin`` is the next refresh's bound, so a row whose transaction commits after a
later-numbered one is still read; rows of transactions already absorbed at or above the bound are left out by
id, so a long-running transaction elsewhere does not make every read move the same rows again. One read takes
whole transactions, at most ``TXS_PER_READ`` of them, so a new process's copy of a large store fills over its
first reads (nominating among what it holds meanwhile). A changed ``meta.instance`` (a recreated database) or
model empties the copy.

Each row also keeps its namespace and kind, so ``nearest`` looks only at rows the fetch's reach and kinds admit
(and the scopes a bounded section kept); the rest of the filter and the log's rule are applied by the database
to the nominations (``search.candidates``), so nominations are sent with slack (``overfetch``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from memory_core.engines.sqlite.rows import ns_of_key
from memory_core.meta import MetaFilter
from memory_core.retrieval.dense import F32, IntArray, top

from .schema import SCHEMA
from .search import Extra

__all__ = ["TXS_PER_READ", "PooledCache", "Refresh"]

TXS_PER_READ: Final = 32
"""Writing transactions one refresh reads at most (an embedding batch each, ``EMBED_BATCH``: 256 rows by default,
so at most about 8,200 rows, 12.6 MB of 384-dimension vectors), so a new process's first reads of a large store
take it in parts instead of one huge row (reads running at once may each take the same part)."""
_MASKS: Final = 256
"""Reaches whose namespace masks are remembered (a new namespace makes a mask stale: it is rebuilt)."""
_SLACK: Final = 2
"""Nominations sent to the database per one wanted: the filter's other fields and the log may drop some."""


@dataclass(frozen=True)
class Refresh:
    """What a ``PooledCache`` adds to a ranked read's first statement, and the bound it read from.

    Attributes:
        extra: The columns (instance, snapshot xmin, then arrays of the new rows' transaction ids, seqs, pooled
            vectors, namespaces and kinds; NULL arrays when none) and their ``FROM`` item.
        model: The model read.
        dims: Its dimensions.
        after: The transaction-id bound read from (0: everything).
    """

    extra: Extra
    model: str
    dims: int
    after: int


class PooledCache:
    """The current model's pooled vectors by seq (see the module docstring). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset("", "", 0)

    def _reset(self, instance: str, model: str, dims: int) -> None:
        self._instance, self._model, self._dims = instance, model, dims
        self._xmin = 0
        self._absorbed: set[int] = set()
        self._count = 0
        self._vectors: F32 = np.zeros((0, dims), dtype=np.float32)
        self._seqs: IntArray = np.zeros(0, dtype=np.int64)
        self._ns: IntArray = np.zeros(0, dtype=np.int64)
        self._kind: IntArray = np.zeros(0, dtype=np.int64)
        self._at: dict[int, int] = {}
        self._ns_codes: dict[str, int] = {}
        self._kind_codes: dict[str, int] = {}
        self._masks: dict[tuple[str, bool, bool, tuple[str, ...] | None], npt.NDArray[np.bool_]] = {}

    @property
    def size(self) -> int:
        """Rows held."""
        with self._lock:
            return self._count

    def refresh(self, model: str, dims: int) -> Refresh:
        """What to add to a statement to read the rows of ``model`` this copy lacks (``Refresh``)."""
        with self._lock:
            fresh = (model, dims) == (self._model, self._dims)
            after = self._xmin if fresh else 0
            seen = sorted(self._absorbed) if fresh else []
        agg = ", ".join(
            f"array_agg({c} ORDER BY v.seq)" for c in ("v.tx::text::bigint", "v.seq", "v.pooled", "i.ns", "i.kind")
        )
        source = (  # whole transactions, the first ``TXS_PER_READ`` of those not read yet
            f"(SELECT (SELECT value FROM {SCHEMA}.meta WHERE key = 'instance'), "
            f"pg_snapshot_xmin(pg_current_snapshot())::text::bigint, {agg} "
            f"FROM {SCHEMA}.item_vectors v JOIN {SCHEMA}.items i ON i.seq = v.seq WHERE v.model = %s "
            "AND length(v.pooled) = %s AND v.tx = ANY(ARRAY(SELECT DISTINCT w.tx "
            f"FROM {SCHEMA}.item_vectors w WHERE w.tx >= %s::text::xid8 AND w.model = %s "
            f"AND NOT (w.tx::text::bigint = ANY(%s::bigint[])) ORDER BY w.tx LIMIT {TXS_PER_READ}))) AS pooled_rows"
        )
        params: list[Any] = [model, 4 * dims, str(after), model, seen]
        return Refresh(Extra("pooled_rows.*", source, params, 7), model, dims, after)

    def absorb(self, refresh: Refresh, values: Sequence[Any]) -> None:
        """Take the columns ``refresh`` added (in order) from the statement's row."""
        instance, xmin, txs, seqs, blobs, nss, kinds = values
        with self._lock:
            if (str(instance), refresh.model, refresh.dims) != (self._instance, self._model, self._dims):
                self._reset(str(instance), refresh.model, refresh.dims)
                if refresh.after:  # read past a bound of another database or model: read everything next time
                    return
            if txs:
                self._append([int(s) for s in seqs], [bytes(b) for b in blobs], list(nss), list(kinds))
            read = {int(t) for t in txs or ()}
            self._absorbed |= read
            if len(read) < TXS_PER_READ:  # every visible row past the bound is held: the snapshot's xmin is next
                self._xmin = max(self._xmin, int(xmin))
                self._absorbed = {t for t in self._absorbed if t >= self._xmin}

    def _code(self, codes: dict[str, int], value: str) -> int:
        code = codes.get(value)
        if code is None:
            code = codes[value] = len(codes)
        return code

    def _append(self, seqs: list[int], blobs: list[bytes], nss: list[str], kinds: list[str]) -> None:
        vectors = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), self._dims)
        need = self._count + len(seqs)
        if need > len(self._vectors):
            size = max(need, 2 * len(self._vectors), 1024)
            grown = np.zeros((size, self._dims), np.float32)
            grown[: self._count] = self._vectors[: self._count]
            self._vectors = grown
            pad = np.zeros(size - self._count, np.int64)
            self._seqs = np.concatenate([self._seqs[: self._count], pad])
            self._ns = np.concatenate([self._ns[: self._count], pad])
            self._kind = np.concatenate([self._kind[: self._count], pad])
        for i, seq in enumerate(seqs):
            at = self._at.get(seq)
            if at is None:
                at = self._at[seq] = self._count
                self._seqs[at] = seq
                self._count += 1
            self._vectors[at] = vectors[i]
            self._ns[at] = self._code(self._ns_codes, str(nss[i]))
            self._kind[at] = self._code(self._kind_codes, str(kinds[i]))

    def nearest(self, flt: MetaFilter, scopes: Sequence[str] | None, query: F32, n: int) -> list[int]:
        """Up to ``n`` seqs nearest ``query`` among the rows ``flt``'s reach and kinds admit, best first.

        Args:
            flt: The fetch's filter (its reach and kinds are applied here, the rest by the database).
            scopes: The namespace keys a bounded section kept (``max_scopes``), or None.
            query: The query's unit pooled vector ``(dims,)``.
            n: How many.
        """
        with self._lock:
            count = self._count
            if count == 0 or n <= 0 or query.shape != (self._dims,):
                return []
            ns_ok = self._admitted(flt, scopes)
            kinds = None if not flt.kinds else {k.value for k in flt.kinds}
            kind_ok = np.array(
                [kinds is None or k in kinds for k in sorted(self._kind_codes, key=self._kind_codes.__getitem__)],
                dtype=bool,
            )
            vectors, seqs = self._vectors[:count], self._seqs[:count]
            admitted = ns_ok[self._ns[:count]] & kind_ok[self._kind[:count]]
        rows = np.flatnonzero(admitted)
        if len(rows) == 0:
            return []
        q = np.asarray(query, dtype=np.float32)
        cos = (vectors @ q)[rows] if len(rows) * 8 >= count else vectors[rows] @ q
        best, _ = top(cos, n)
        return [int(s) for s in seqs[rows[best]]]

    def _admitted(self, flt: MetaFilter, scopes: Sequence[str] | None) -> npt.NDArray[np.bool_]:
        """Per namespace code, whether the reach (and the kept scopes) admit it; remembered per reach (locked)."""
        reach = flt.effective_reach()
        key = (str(reach.at), reach.inherit, reach.descendants, None if scopes is None else tuple(sorted(scopes)))
        held = self._masks.get(key)
        if held is not None and len(held) == len(self._ns_codes):
            return held
        kept = None if scopes is None else set(scopes)
        names = sorted(self._ns_codes, key=self._ns_codes.__getitem__)
        mask = np.array([(kept is None or n in kept) and reach.admits(ns_of_key(n)) for n in names], dtype=bool)
        if len(self._masks) >= _MASKS:
            self._masks.clear()
        self._masks[key] = mask
        return mask

    @staticmethod
    def overfetch(n: int) -> int:
        """Nominations to send for ``n`` wanted after the database's filter."""
        return _SLACK * n

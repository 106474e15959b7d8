"""``TokenCache``: the stored token vectors (and ranking fields) of embedded items, kept per process.

The rerank (``rerank``) reads its candidates' stored token vectors on every hybrid fetch: the sections of a pack
read up to 100 candidates and their previous turns each, ~14 KB of blob per item (``vectors.load``), and the
next turn asks about the same conversation. What it reads of an item never changes once the item is embedded by
a model (the vectors, the turn before it, the speaker, the time, the confidence), and seqs are never reused, so a
row is kept by ``(seq, model)`` until the byte budget pushes it out (least recently used first). Rows are kept as
stored (``late.Quantised``: int8 and a scale per token, 388 bytes a 384-dimension token, a quarter of float32),
so a hit decodes nothing and the budget holds four times the rows. A row not yet embedded (its fields, no
vectors) is kept apart, at most ``BARE_ROWS``, with the last ``item_vectors.n`` it is known to have no vectors at
(schema version 6, only grows): the host's own new turns, and a big neighbour's turns the embedding job has not
reached, wait for it and are candidates of every pack meanwhile. Once vectors were written since, a bare row is
checked before it is served: one statement per call reads which of the bare rows it would serve have vectors
now (by primary key), those are read anew and the others are served and marked as of the read's ``n`` (issue 12:
dropping every bare row whenever the worker embedded anything made a small agent's Team section re-read the
fields of its big neighbour's candidates on every pack while the worker embedded that neighbour's backlog). A
replaced file (``meta.instance``) empties the cache.

Deleted items: every delete appends its seqs to the ``deleted`` log (numbered ``n``, schema version 1), as the
item index uses it (``index.ItemIndex.refresh``). Each call reads the instance, the log's last ``n`` and the
vectors' last ``n`` in one statement; when the log grew, the kept rows of the newly deleted seqs are dropped
(one indexed range read), so a hit needs no per-row check. A read whose snapshot is older than the newest log
entry (or vectors) the cache has seen serves its hits (alive in the newer snapshot, so alive in its own: a
candidate or the turn before one is older than the snapshot) but keeps none of the rows it reads from SQL,
which a newer snapshot may have deleted (or embedded).

``stats`` counts the rows served from the cache, the rows read from SQL and the bare rows checked.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from .read_memo import ReadMemo
from .rows import chunks, placeholders
from .vectors import Stored, load

__all__ = ["BARE_ROWS", "TOKEN_CACHE_BYTES", "TokenCache", "TokenCacheStats"]

TOKEN_CACHE_BYTES: Final = 48 * 2**20
"""Stored token vectors kept per engine: ~4,900 items of the demo's ~26 tokens of 388 bytes (its 1,952: 19 MB)."""
_OVERHEAD: Final = 200
"""Bytes counted per kept row besides its vectors (the row object, the key)."""
BARE_ROWS: Final = 4096
"""Rows not embedded yet kept (their fields only), least recently used dropped first."""
_STATE: Final = (
    "SELECT (SELECT value FROM meta WHERE key = 'instance'), (SELECT coalesce(max(n), 0) FROM deleted), "
    "(SELECT coalesce(max(n), 0) FROM item_vectors)"
)


@dataclass
class TokenCacheStats:
    """Rows the rerank asked for since the engine opened.

    Attributes:
        hits: Served from the cache.
        read: Read from SQL (not cached, or not embedded yet).
        dropped: Kept rows dropped because their item was deleted.
        checked: Bare rows checked for vectors written since they were kept (``checks`` statements).
    """

    hits: int = 0
    read: int = 0
    dropped: int = 0
    checked: int = 0
    checks: int = 0


def _size(row: Stored) -> int:
    return (row.tokens.nbytes if row.tokens is not None else 0) + _OVERHEAD


class TokenCache:
    """Stored ``vectors.Stored`` rows by ``(seq, model)`` within a byte budget (module docstring).

    Args:
        budget: Bytes of token vectors kept.
    """

    def __init__(self, budget: int = TOKEN_CACHE_BYTES) -> None:
        self._budget = budget
        self._rows: OrderedDict[tuple[int, str], Stored] = OrderedDict()
        self._bare: OrderedDict[tuple[int, str], tuple[int, Stored]] = OrderedDict()
        """Rows with no vectors of the model, each with the last ``item_vectors.n`` it is known to have none at."""
        self._vectors = 0
        self._models: set[str] = set()
        self._bytes = 0
        self._instance = ""
        self._deleted = 0
        """The last ``deleted.n`` whose seqs the kept rows exclude."""
        self._lock = threading.Lock()
        self.stats = TokenCacheStats()

    def _forget_deleted(self, conn: sqlite3.Connection, instance: str, upto: int) -> None:
        """Drop the kept rows of seqs the ``deleted`` log holds after ``self._deleted``, up to ``upto``."""
        with self._lock:
            after = self._deleted
        gone = conn.execute("SELECT seq FROM deleted WHERE n > ? AND n <= ?", (after, upto)).fetchall()
        with self._lock:
            if instance != self._instance or upto <= self._deleted:
                return  # another read got there first
            for (seq,) in gone:
                for model in self._models:
                    self._bare.pop((int(seq), model), None)
                    row = self._rows.pop((int(seq), model), None)
                    if row is not None:
                        self._bytes -= _size(row)
                        self.stats.dropped += 1
            self._deleted = upto

    def _check_bare(
        self, conn: sqlite3.Connection, unsure: dict[int, Stored], model: str, at: tuple[str, int], keep: bool
    ) -> set[int]:
        """Which of the bare rows ``unsure`` have vectors in the read's snapshot (one statement a chunk).

        ``at`` is the snapshot's instance and last ``item_vectors.n``; with ``keep``, the rows found embedded are
        dropped from the cache and the others marked as having no vectors as of ``at``.
        """
        embedded = _embedded(conn, list(unsure), model)
        with self._lock:
            self.stats.checked += len(unsure)
            self.stats.checks += 1
            if keep and at[0] == self._instance:
                for seq, row in unsure.items():
                    if seq in embedded:
                        self._bare.pop((seq, model), None)
                    elif (seq, model) in self._bare:
                        self._bare[(seq, model)] = (at[1], row)  # no vectors as of this snapshot
        return embedded

    def load(
        self, conn: sqlite3.Connection, seqs: Sequence[int], model: str, dims: int, memo: ReadMemo | None = None
    ) -> dict[int, Stored]:
        """``seq → Stored`` for the ``seqs`` that exist, as ``vectors.load`` (same arguments), cached.

        ``memo``: the read's memo; the snapshot's state (instance, last ``deleted`` and ``item_vectors`` entries)
        is then read once per read transaction, not once per call (a pack's reranks call this six times).
        """

        def read_state() -> tuple[str, int, int]:
            instance, deleted, vectors = conn.execute(_STATE).fetchone()
            return str(instance), int(deleted), int(vectors)

        instance, deleted, vectors = read_state() if memo is None else memo.once(_STATE, read_state)
        with self._lock:
            if instance != self._instance:
                self._rows.clear()
                self._bare.clear()
                self._models.clear()
                self._bytes = 0
                self._instance = instance
                self._deleted = deleted
                self._vectors = vectors
            if vectors > self._vectors:  # rows embedded since: a bare row is checked before it is served
                self._vectors = vectors
            behind = deleted < self._deleted or vectors < self._vectors
            ahead = deleted > self._deleted
        if ahead:
            self._forget_deleted(conn, instance, deleted)
        out: dict[int, Stored] = {}
        missing: list[int] = []
        unsure: dict[int, Stored] = {}
        with self._lock:
            rows, bare = self._rows, self._bare
            for seq in seqs:
                key = (seq, model)
                row = rows.get(key)
                if row is not None:
                    rows.move_to_end(key)
                    out[seq] = row
                elif (kept := bare.get(key)) is not None:
                    bare.move_to_end(key)
                    if kept[0] >= vectors:
                        out[seq] = kept[1]
                    else:
                        unsure[seq] = kept[1]
                else:
                    missing.append(seq)
        if unsure:
            embedded = self._check_bare(conn, unsure, model, (instance, vectors), keep=not behind)
            missing.extend(seq for seq in unsure if seq in embedded)
            out.update((seq, row) for seq, row in unsure.items() if seq not in embedded)
        with self._lock:
            self.stats.hits += len(out)
            self.stats.read += len(missing)
        if not missing:
            return out
        read = load(conn, missing, model, dims)
        out.update(read)
        if behind:
            return out
        with self._lock:
            if instance != self._instance or deleted != self._deleted or vectors != self._vectors:
                return out  # the file was replaced, or a newer snapshot saw deletes or vectors since this one
            self._models.add(model)
            for seq, row in read.items():
                if row.tokens is None:
                    self._bare[(seq, model)] = (vectors, row)
                elif (seq, model) not in self._rows:
                    self._rows[(seq, model)] = row
                    self._bytes += _size(row)
            while len(self._bare) > BARE_ROWS:
                self._bare.popitem(last=False)
            while self._bytes > self._budget and self._rows:
                _, dropped = self._rows.popitem(last=False)
                self._bytes -= _size(dropped)
        return out

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)


def _embedded(conn: sqlite3.Connection, seqs: list[int], model: str) -> set[int]:
    """Which of ``seqs`` have vectors of ``model`` in the read's snapshot (by primary key, one statement a chunk)."""
    out: set[int] = set()
    for chunk in chunks(seqs):
        marks = placeholders(len(chunk))
        out.update(
            int(r[0])
            for r in conn.execute(f"SELECT seq FROM item_vectors WHERE model = ? AND seq IN ({marks})", (model, *chunk))
        )
    return out

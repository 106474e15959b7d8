"""What the ranked reads of one read transaction share (issue 12 "bounded sections": a pack's statements).

A pack ranks its sections for one query (``SQLiteEngine.fetch_together``), in one read transaction, so
everything that depends only on the transaction's snapshot is read once, not once per section:

* the snapshot's newest ``seq`` (a first page's frozen ranking bound), read on first use;
* the file's instance (which the per-process caches of parsed items are kept for);
* the rows a standard read does not serve (``log_view.served_mask``: the ``items_unserved`` index);
* each query word's document count in an FTS5 table, counted up to a cutoff (``fts.classify``); with the
  engine's ``fts_counts.SharedCounts``, those of the index state the snapshot sees, shared with every other read
  of that state in the process (the other sections of a pack read one by one, the next pack);
* the item index's view of the snapshot (``index.ItemIndex.candidates``: three lookups, once per pack, not once
  per section).

Every value is a function of the snapshot alone, so a read given a memo ranks exactly as one without. A memo
lives for one transaction and one thread: it is never shared across snapshots (the shared counts are keyed by
the index state, not by the memo). Only read transactions make memos.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .fts_counts import Counts, SharedCounts

__all__ = ["ReadMemo"]

_T = TypeVar("_T")


@dataclass
class ReadMemo:
    """Values of one read transaction's snapshot, filled on first use (see the module docstring).

    Attributes:
        snapshot: The newest item ``seq`` the snapshot holds (None until read).
        store: The file's ``meta.instance`` (None until read).
        unserved: ``(seq, status, tier)`` of the rows the ``items_unserved`` index holds (None until read).
        doc_counts: ``(table, word, limit) → rows of table holding word``, counted up to ``limit`` (this
            transaction's, used when ``shared`` is None).
        shared: The process's counts per index state (``fts_counts.SharedCounts``), if any.
        values: Other values of the snapshot by name (``once``).
    """

    snapshot: int | None = None
    store: str | None = None
    unserved: list[tuple[int, str, str]] | None = None
    doc_counts: Counts = field(default_factory=dict)
    shared: SharedCounts | None = None
    values: dict[str, Any] = field(default_factory=dict)
    _tables: dict[str, Counts] = field(default_factory=dict, repr=False)

    def counts(self, conn: sqlite3.Connection, table: str) -> Counts:
        """The document counts of FTS5 ``table`` for this snapshot: the shared ones of its index state, if any."""
        if self.shared is None:
            return self.doc_counts
        held = self._tables.get(table)
        if held is None:
            held = self._tables[table] = self.shared.counts(conn, table)
        return held

    def once(self, name: str, read: Callable[[], _T]) -> _T:
        """``read()``, called on the first use of ``name`` in this transaction and kept (a snapshot's value)."""
        if name not in self.values:
            self.values[name] = read()
        out: _T = self.values[name]
        return out

    def newest_seq(self, conn: sqlite3.Connection) -> int:
        """The snapshot's newest item ``seq`` (0 for an empty store), read once."""
        if self.snapshot is None:
            self.snapshot = int(conn.execute("SELECT coalesce(max(seq), 0) FROM items").fetchone()[0])
        return self.snapshot

    def instance(self, conn: sqlite3.Connection) -> str:
        """The file's ``meta.instance`` (a new one after a restore), read once."""
        if self.store is None:
            self.store = str(conn.execute("SELECT value FROM meta WHERE key = 'instance'").fetchone()[0])
        return self.store

"""Query words' FTS5 document counts, kept per process for one state of an FTS5 index (issue 12).

``fts.classify`` counts, for each query word, the rows of the FTS5 table holding it, up to a cutoff that is a
share of the whole table (``fts.common_cutoff``: 5% of the rows). Those counts walk the words' doclists, which
are the whole table's: when another agent of the layout holds 100k turns, a word the small agent's question
shares with them costs up to 5,001 doclist entries to classify, and each ranked section of a pack counted it
again in its own read transaction (a host without an executor reads the sections one fetch each). The counts
depend only on the index's content, so they are kept per process for the state they were read in, and every
read of that state (the other sections of the pack, the next pack if nothing was indexed meanwhile) takes them
from here: the same numbers, one count per word per index state.

**What identifies a state.** FTS5 rewrites its structure record (the ``<table>_data`` row of id 10, SQLite's
``FTS5_STRUCTURE_ROWID``) whenever it flushes pending rows into a segment, which every committed insert or
delete does, and the record holds a write counter that only grows (``nWriteCounter``, the leaves written to
level 0; see SQLite's ``fts5_index.c``), so two committed states with different content never have the same
record. The key is that record's bytes with the file's ``meta.instance`` (a restored file is another store).
Inside a write transaction FTS5 matches rows it has not flushed yet while the record is unchanged, so only read
transactions may use these counts (``ReadMemo`` is made by reads alone).
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Final

__all__ = ["STRUCTURE_ROWID", "Counts", "SharedCounts", "index_state"]

STRUCTURE_ROWID: Final = 10
"""Rowid of the structure record in an FTS5 table's ``_data`` table (SQLite's ``FTS5_STRUCTURE_ROWID``)."""

Counts = dict[tuple[str, str, int], int]
"""``(table, word, limit) → rows of the table holding the word``, counted up to ``limit`` (``fts.classify``)."""


def index_state(conn: sqlite3.Connection, table: str) -> tuple[str, bytes]:
    """The file's instance and FTS5 ``table``'s structure record, as the read's snapshot sees them (one statement).

    ``table`` is one of the engine's FTS5 tables (a name from the code, never from a request).
    """
    row = conn.execute(
        f"SELECT (SELECT value FROM meta WHERE key = 'instance'), "
        f"(SELECT block FROM {table}_data WHERE id = {STRUCTURE_ROWID})"
    ).fetchone()
    return str(row[0] or ""), bytes(row[1] or b"")


class SharedCounts:
    """One process's document counts per FTS5 table, for the last index state a read saw (thread-safe).

    Attributes:
        states: Index states whose counts were started afresh (a read found the table changed), per table.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, tuple[tuple[str, bytes], Counts]] = {}
        self.states: dict[str, int] = {}

    def counts(self, conn: sqlite3.Connection, table: str) -> Counts:
        """The counts kept for the state of ``table`` the read's snapshot sees (empty when it is a new state).

        Call inside a read transaction only (module docstring). The dict is shared with every read of the same
        state: ``fts.classify`` fills it, and a count two threads race to fill is the same number.
        """
        state = index_state(conn, table)
        with self._lock:
            held = self._held.get(table)
            if held is None or held[0] != state:
                held = (state, {})
                self._held[table] = held
                self.states[table] = self.states.get(table, 0) + 1
            return held[1]

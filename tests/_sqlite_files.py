"""Test helpers over SQLite files: a file as an older version of the code left it."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def downgrade_to_v1(path: Path) -> None:
    """Put a current file back in the version-1 layout (what version-1 code wrote): FTS5 over ``bodies.text``,
    no ``item_terms`` or ``item_vectors``, the version-1 beliefs table and index, no log."""
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        DROP TABLE items_fts_vocab; DROP TABLE items_fts; DROP TABLE item_terms;
        DROP TRIGGER item_vectors_gone; DROP TABLE item_vectors;
        CREATE VIRTUAL TABLE items_fts USING fts5(
            text, content='bodies', content_rowid='seq', tokenize='unicode61 remove_diacritics 0');
        CREATE VIRTUAL TABLE items_fts_vocab USING fts5vocab(items_fts, 'row');
        INSERT INTO items_fts (items_fts) VALUES ('rebuild');
        DROP INDEX beliefs_subject_newest;
        CREATE INDEX beliefs_subject ON beliefs(ns, from_kind, subject);
        DROP INDEX beliefs_version; DROP INDEX beliefs_status;
        ALTER TABLE beliefs DROP COLUMN version;
        DROP TABLE beliefs_removed;
        DROP TABLE log; DROP TABLE log_checkpoint; DROP INDEX items_unserved; DROP INDEX items_derived;
        DROP TABLE belief_staged; DROP TABLE belief_staged_evidence;
        ALTER TABLE items DROP COLUMN status; ALTER TABLE items DROP COLUMN tier;
        ALTER TABLE items DROP COLUMN derived_from;
        PRAGMA user_version = 1;
        """
    )
    conn.close()

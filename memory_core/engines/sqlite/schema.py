"""The SQLite schema, its version (``PRAGMA user_version``) and forward migrations.

``MIGRATIONS[i]`` takes a database from version ``i`` to ``i + 1``; ``migrate`` applies the missing ones in
one ``BEGIN IMMEDIATE`` transaction and re-reads the version inside it, so two processes opening a new file at
once migrate it once. A file whose version is newer than ``SCHEMA_VERSION`` is refused (never downgraded), and
a SQLite file holding foreign tables is refused as not ours.

Layout (version 1):

| table | holds |
| --- | --- |
| ``meta`` | ``instance``: a random id minted with the file, so process-local caches notice a replaced file |
| ``items`` | one row per item: ``seq`` (write order), ``id`` (fingerprint), filter columns, ``vec`` (NULL: pending) |
| ``bodies`` | the item's JSON (export returns it whole) and ``render_text()`` (the FTS content) |
| ``item_tags`` | ``(tag, seq)``, one row per tag |
| ``item_terms`` | per indexed item: its terms with its neighbours' (``fts``, ``retrieval.window``), and its speaker |
| ``item_vectors`` | per embedded item: the model's pooled and quantised token vectors (``vectors``) |
| ``items_fts`` | FTS5 over ``item_terms.text`` (external content, BM25); ``items_fts_vocab`` its document frequencies |
| ``pending`` | seqs stored ``accepted`` and not yet indexed (FTS + vector) |
| ``deleted`` | a log of deleted seqs, so each process's ``ItemIndex`` drops them |
| ``scopes`` | per ``(ns, kind)``: last write, last build, the seq watermark the build reached |
| ``beliefs`` | built beliefs, with the same filter columns as ``items``; ``status`` active or superseded |
| ``belief_evidence`` | belief → the item ids it was derived from |
| ``belief_anchors`` | belief → content words, to find near-duplicates without scanning |
| ``beliefs_fts`` | FTS5 over belief text |

Version 3 adds ``beliefs.version`` (the ``meta.beliefs_version`` a row was last written at) and
``beliefs_removed`` (``(version, bid)`` of deleted beliefs), so each process's belief index loads only what
changed (``belief_index``).

Version 6 adds ``log`` (memory as a log, seed 002: one record per change, ``log``) and the materialised
``items.status``, ``items.tier`` and ``items.derived_from``.

``ns`` is the namespace path with a trailing ``/`` (root = ``''``), so a subtree is a prefix range.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path

from memory_core.errors import Conflict

__all__ = ["FILTER_COLUMNS", "MIGRATIONS", "SCHEMA_VERSION", "migrate"]

FILTER_COLUMNS = """
    workspace   TEXT,
    folder      TEXT,
    file_path   TEXT,
    language    TEXT,
    repo        TEXT,
    commit_sha  TEXT,
    url         TEXT,
    thread_id   TEXT,
    turn_first  INTEGER,
    turn_last   INTEGER,
    agent_id    TEXT,
    tool_call   TEXT,
    source_kind TEXT NOT NULL,
    source_id   TEXT,
    observed_at INTEGER
"""
"""Columns shared by ``items`` and ``beliefs``: one per ``MetaFilter`` field (times in µs since the epoch)."""

_TOKENIZER = "unicode61 remove_diacritics 0"
"""FTS5 tokenizer: runs of letters and digits, case-folded, ``_`` a separator (as ``memory_core.scoring``)."""

_V1 = f"""
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE items (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    kind        TEXT NOT NULL,
    ns          TEXT NOT NULL,
    {FILTER_COLUMNS},
    confidence  REAL,
    stored_at   INTEGER NOT NULL,
    vec         BLOB
);
CREATE INDEX items_ns_kind ON items(ns, kind);
CREATE INDEX items_kind_ns ON items(kind, ns);
CREATE INDEX items_workspace ON items(workspace) WHERE workspace IS NOT NULL;
CREATE INDEX items_thread ON items(thread_id, turn_last) WHERE thread_id IS NOT NULL;
CREATE INDEX items_agent ON items(agent_id) WHERE agent_id IS NOT NULL;
CREATE INDEX items_source ON items(source_kind, source_id);
CREATE INDEX items_folder ON items(folder) WHERE folder IS NOT NULL;
CREATE INDEX items_file_path ON items(file_path) WHERE file_path IS NOT NULL;
CREATE INDEX items_observed ON items(observed_at) WHERE observed_at IS NOT NULL;

CREATE TABLE bodies (
    seq  INTEGER PRIMARY KEY,
    item TEXT NOT NULL,
    text TEXT NOT NULL
);

CREATE TABLE item_tags (
    tag TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (tag, seq)
) WITHOUT ROWID;
CREATE INDEX item_tags_seq ON item_tags(seq);

CREATE VIRTUAL TABLE items_fts USING fts5(
    text, content='bodies', content_rowid='seq', tokenize='{_TOKENIZER}'
);

CREATE VIRTUAL TABLE items_fts_vocab USING fts5vocab(items_fts, 'row');

CREATE TABLE pending (seq INTEGER PRIMARY KEY);

CREATE TABLE deleted (
    n   INTEGER PRIMARY KEY AUTOINCREMENT,
    seq INTEGER NOT NULL
);

CREATE TABLE scopes (
    ns         TEXT NOT NULL,
    kind       TEXT NOT NULL,
    last_write INTEGER NOT NULL,
    last_build INTEGER,
    built_seq  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (ns, kind)
) WITHOUT ROWID;

CREATE TABLE beliefs (
    bid           INTEGER PRIMARY KEY AUTOINCREMENT,
    id            TEXT NOT NULL UNIQUE,
    ns            TEXT NOT NULL,
    from_kind     TEXT NOT NULL,
    key           TEXT NOT NULL,
    subject       TEXT NOT NULL,
    status        TEXT NOT NULL,
    text          TEXT NOT NULL,
    learning_kind TEXT NOT NULL,
    confidence    REAL NOT NULL,
    state         TEXT NOT NULL,
    meta          TEXT NOT NULL,
    {FILTER_COLUMNS},
    last_seq      INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    vec           BLOB NOT NULL
);
CREATE UNIQUE INDEX beliefs_key ON beliefs(ns, from_kind, key);
CREATE INDEX beliefs_subject ON beliefs(ns, from_kind, subject);
CREATE INDEX beliefs_ns_status ON beliefs(ns, status);

CREATE TABLE belief_evidence (
    bid     INTEGER NOT NULL,
    item_id TEXT NOT NULL,
    PRIMARY KEY (bid, item_id)
) WITHOUT ROWID;
CREATE INDEX belief_evidence_item ON belief_evidence(item_id);

CREATE TABLE belief_anchors (
    ns        TEXT NOT NULL,
    from_kind TEXT NOT NULL,
    anchor    TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    key       TEXT NOT NULL,
    bid       INTEGER NOT NULL,
    PRIMARY KEY (ns, from_kind, anchor, first_seq, key)
) WITHOUT ROWID;
CREATE INDEX belief_anchors_bid ON belief_anchors(bid);

CREATE VIRTUAL TABLE beliefs_fts USING fts5(
    text, content='beliefs', content_rowid='bid', tokenize='{_TOKENIZER}'
);
CREATE VIRTUAL TABLE beliefs_fts_vocab USING fts5vocab(beliefs_fts, 'row');
"""


def _v1(conn: sqlite3.Connection) -> None:
    for statement in _V1.split(";\n"):
        if statement.strip():
            conn.execute(statement)
    conn.execute("INSERT INTO meta (key, value) VALUES ('instance', ?)", (uuid.uuid4().hex,))


def _v2(conn: sqlite3.Connection) -> None:
    """A subject's active belief, and its newest superseded one, by index (``beliefs_store``: build, retract)."""
    conn.execute(
        "CREATE INDEX beliefs_subject_newest ON beliefs(ns, from_kind, subject, status, observed_at, last_seq, key)"
    )
    conn.execute("DROP INDEX beliefs_subject")  # a prefix of the new one


def _v3(conn: sqlite3.Connection) -> None:
    """Incremental belief-index refresh (``belief_index``, issue 12).

    Adds the belief version each row was last written at, a log of deleted beliefs, and the index a process's
    first full load of the active beliefs scans.
    """
    conn.execute("ALTER TABLE beliefs ADD COLUMN version INTEGER NOT NULL DEFAULT 0")
    conn.execute("CREATE INDEX beliefs_version ON beliefs(version)")
    conn.execute("CREATE INDEX beliefs_status ON beliefs(status)")
    conn.execute("CREATE TABLE beliefs_removed (version INTEGER NOT NULL, bid INTEGER NOT NULL)")
    conn.execute("CREATE INDEX beliefs_removed_version ON beliefs_removed(version)")


def _v4(conn: sqlite3.Connection) -> None:
    """Items are indexed by their stemmed terms, a turn with its neighbours (``fts``; issue 14's lexical stage).

    ``items_fts`` moves from ``bodies.text`` to ``item_terms``, and every indexed item is indexed anew.
    """
    conn.execute("DROP TABLE items_fts_vocab")
    conn.execute("DROP TABLE items_fts")
    conn.execute("CREATE TABLE item_terms (seq INTEGER PRIMARY KEY, text TEXT NOT NULL, speaker TEXT)")
    conn.execute(
        "CREATE VIRTUAL TABLE items_fts USING fts5("
        f"text, content='item_terms', content_rowid='seq', tokenize='{_TOKENIZER}')"
    )
    conn.execute("CREATE VIRTUAL TABLE items_fts_vocab USING fts5vocab(items_fts, 'row')")
    from . import fts  # the indexing rules live there; imported here only (fts imports search, not schema)

    fts.backfill(conn)


def _v5(conn: sqlite3.Connection) -> None:
    """The model's vectors of items, written by the embedding job (``vectors``)."""
    from .vectors import SCHEMA

    for statement in SCHEMA:
        conn.execute(statement)


def _v6(conn: sqlite3.Connection) -> None:
    """Memory as a log (seed 002, issue 19): the ``log`` table, each item's status, tier and provenance (``log``)."""
    from . import log

    log.migrate(conn)


def _v7(conn: sqlite3.Connection) -> None:
    """``item_vectors.n``: rows numbered in write order, so each process's pooled index reads only new rows."""
    from .vectors import NUMBERED

    for statement in NUMBERED:
        conn.execute(statement)


def _v8(conn: sqlite3.Connection) -> None:
    """A build's changes to published beliefs, staged until its commit (``beliefs_store.STAGING``, issue 19 item 7)."""
    from .beliefs_store import STAGING

    for statement in STAGING:
        conn.execute(statement)


def _v9(conn: sqlite3.Connection) -> None:
    """``item_vectors.prev`` indexed: the turn after a candidate is found by the row that names it (``following``)."""
    from .following import INDEXED

    for statement in INDEXED:
        conn.execute(statement)


MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_v1, _v2, _v3, _v4, _v5, _v6, _v7, _v8, _v9)
"""``MIGRATIONS[i]`` upgrades version ``i`` to ``i + 1``; append, never edit, to change the schema."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this code writes and reads."""

_OURS = {
    "meta",
    "items",
    "bodies",
    "item_tags",
    "pending",
    "deleted",
    "scopes",
    "beliefs",
    "belief_evidence",
    "belief_anchors",
    "beliefs_removed",
    "item_terms",
    "item_vectors",
    "log",
    "log_checkpoint",
    "belief_staged",
    "belief_staged_evidence",
}


def _version(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def check_version(conn: sqlite3.Connection, path: Path) -> int:
    """The file's schema version, after refusing one this code cannot read.

    Raises:
        Conflict: the version is newer than ``SCHEMA_VERSION``, or the file holds tables that are not ours.
    """
    version = _version(conn)
    if version > SCHEMA_VERSION:
        raise Conflict(
            f"{path} has schema version {version}, newer than this memory-core's {SCHEMA_VERSION}; "
            "upgrade memory-core (the file is never downgraded)"
        )
    if version == 0:
        names = {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        foreign = {n for n in names if not n.startswith("sqlite_")} - _OURS
        if foreign:
            raise Conflict(f"{path} is a sqlite database of another application (tables {sorted(foreign)[:5]})")
    return version


def migrate(conn: sqlite3.Connection, path: Path) -> int:
    """Bring the schema to ``SCHEMA_VERSION`` inside the caller's ``BEGIN IMMEDIATE`` transaction.

    Returns:
        The version found before migrating.

    Raises:
        Conflict: as ``check_version``.
    """
    found = check_version(conn, path)
    for step in MIGRATIONS[found:]:
        step(conn)
    if found != SCHEMA_VERSION:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return found

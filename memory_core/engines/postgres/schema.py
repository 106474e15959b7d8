"""The PostgreSQL schema, its version and forward migrations, applied once under an advisory lock.

Everything lives in the schema ``memory_core`` (other applications' tables in the database are left alone).
``memory_core.meta`` holds ``schema_version`` and ``instance`` (a random id minted with the schema, so
process-local caches notice a recreated database).

``migrate`` runs in one transaction holding ``pg_advisory_xact_lock(MIGRATION_LOCK)``, re-reading the version
once it holds the lock: when several processes start at the same moment, one migrates and the others find the
version current (PostgreSQL docs, "Advisory Locks", §13.3.5). A schema newer than ``SCHEMA_VERSION`` is
refused, never downgraded.

Layout (version 1):

| table | holds |
| --- | --- |
| ``items`` | one row per item: ``seq``, ``id`` (unique), ``ns``, a column per ``MetaFilter`` field, ``tags``, … |
| ``scopes`` | per ``(ns, kind)``: last write, last build, and the build watermark ``built_xmin`` |
| ``beliefs`` | built beliefs with the same filter columns, ``words``/``tsv``/``vec`` for ranking |
| ``belief_evidence`` | belief → the item ids it was derived from |
| ``belief_anchors`` | belief → content words, to find near-duplicates without scanning |

``items`` also holds ``tx`` (the writing transaction's id, the build watermark's unit), ``item`` (the JSON),
``words`` (the reference tokenizer's words), ``tsv`` (a generated ``tsvector`` over ``words``, GIN) and ``vec``
(the embedding); ``tags`` is an array with a GIN index.

The ``tsvector`` GIN indexes are built with ``fastupdate = off``: a read never scans a pending list of recent
inserts (PostgreSQL docs §70.4.1), which made every full-text read cost grow with the recent writes.

Version 2 gives ranking the project's retrieval (``retrieval.terms``, ``retrieval.window``): ``items.terms``
(the item's own stemmed terms), ``items.wterms`` (a conversation turn's terms with its previous and next turn's
in its thread) and ``items.speaker``; ``tsv`` is regenerated over ``wterms``. Statement-level ``AFTER INSERT``
and ``AFTER DELETE`` triggers (transition tables) re-window the neighbours of the rows a statement wrote or
deleted, through ``items_turns`` (thread, namespace, turn): a neighbour lookup is one index probe whatever the
store's size. ``item_vectors`` holds the model's pooled and token vectors (``vectors``), deleted with the item.

``ns`` is the namespace path with a trailing ``/`` (root ``''``) in the ``C`` collation, so exact and ancestor
reaches are equality lookups and a subtree is one B-tree range ``[p, p[:-1] + '0')``.

Version 3 adds the log (memory as a log, seed 002; ``log``): ``log``, ``log_head``, the materialised
``items.status``, ``items.tier``, ``items.derived_from`` and ``beliefs.log_status``.

Version 4 plans ``rewindow``'s update on every call (``plan_cache_mode = force_custom_plan``): a generic plan
cached in a session while ``items`` was small read the whole ``items_turns`` index per write (``_v4``).

Version 5 adds ``item_vectors.tx`` (the writing transaction's id, indexed), so each host's copy of the pooled
vectors, the dense candidate source (``pooled``), reads only what was written since it last looked.

``ensure_vectors`` gives the embeddings an index once per database: a generated ``pvec vector(64)`` column
with an HNSW index when pgvector can be created, else a generated ``cube`` column with a GiST index (contrib),
else none (a scan); ``meta.vectors`` records which.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Final

from memory_core.errors import Conflict

from .driver import Conn

__all__ = ["MIGRATION_LOCK", "SCHEMA", "SCHEMA_VERSION", "VECTOR_INDEXES", "ensure_vectors", "migrate", "read_version"]

SCHEMA: Final = "memory_core"
MIGRATION_LOCK: Final = 0x6D656D636F7265
"""The advisory lock key migrations hold ("memcore" in hex)."""

_FILTER_COLUMNS = """
    workspace   text,
    folder      text COLLATE "C",
    file_path   text COLLATE "C",
    language    text,
    repo        text,
    commit_sha  text,
    url         text,
    thread_id   text,
    turn_first  bigint,
    turn_last   bigint,
    agent_id    text,
    tool_call   text,
    source_kind text NOT NULL,
    source_id   text,
    observed_at bigint
"""

_V1 = f"""
CREATE TABLE {SCHEMA}.meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
CREATE TABLE {SCHEMA}.items (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id          text NOT NULL UNIQUE,
    kind        text NOT NULL,
    ns          text COLLATE "C" NOT NULL,
    {_FILTER_COLUMNS},
    tags        text[] NOT NULL DEFAULT '{{}}',
    confidence  double precision,
    stored_at   bigint NOT NULL,
    tx          xid8 NOT NULL DEFAULT pg_current_xact_id(),
    item        text NOT NULL,
    words       text NOT NULL,
    tsv         tsvector GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, words)) STORED,
    vec         real[] NOT NULL
);
CREATE INDEX items_kind_ns ON {SCHEMA}.items (kind, ns);
CREATE INDEX items_ns_kind_seq ON {SCHEMA}.items (ns, kind, seq);
CREATE INDEX items_ns_kind_tx ON {SCHEMA}.items (ns, kind, tx);
CREATE INDEX items_tsv ON {SCHEMA}.items USING gin (tsv) WITH (fastupdate = off);
CREATE INDEX items_tags ON {SCHEMA}.items USING gin (tags);
CREATE INDEX items_workspace ON {SCHEMA}.items (workspace) WHERE workspace IS NOT NULL;
CREATE INDEX items_thread ON {SCHEMA}.items (thread_id, turn_last) WHERE thread_id IS NOT NULL;
CREATE INDEX items_agent ON {SCHEMA}.items (agent_id) WHERE agent_id IS NOT NULL;
CREATE INDEX items_source ON {SCHEMA}.items (source_kind, source_id);
CREATE INDEX items_folder ON {SCHEMA}.items (folder) WHERE folder IS NOT NULL;
CREATE INDEX items_file_path ON {SCHEMA}.items (file_path) WHERE file_path IS NOT NULL;
CREATE INDEX items_observed ON {SCHEMA}.items (observed_at) WHERE observed_at IS NOT NULL;
CREATE INDEX items_language ON {SCHEMA}.items (language) WHERE language IS NOT NULL;
CREATE INDEX items_repo ON {SCHEMA}.items (repo, commit_sha) WHERE repo IS NOT NULL;
CREATE INDEX items_url ON {SCHEMA}.items (url) WHERE url IS NOT NULL;
CREATE INDEX items_tool ON {SCHEMA}.items (tool_call) WHERE tool_call IS NOT NULL;

CREATE TABLE {SCHEMA}.scopes (
    ns         text COLLATE "C" NOT NULL,
    kind       text NOT NULL,
    last_write bigint NOT NULL,
    last_build bigint,
    built_xmin xid8 NOT NULL DEFAULT '0',
    PRIMARY KEY (ns, kind)
);

CREATE TABLE {SCHEMA}.beliefs (
    bid           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id            text NOT NULL UNIQUE,
    ns            text COLLATE "C" NOT NULL,
    from_kind     text NOT NULL,
    key           text NOT NULL,
    subject       text NOT NULL,
    status        text NOT NULL,
    text          text NOT NULL,
    learning_kind text NOT NULL,
    confidence    double precision NOT NULL,
    state         text NOT NULL,
    meta          text NOT NULL,
    {_FILTER_COLUMNS},
    last_seq      bigint NOT NULL,
    updated_at    bigint NOT NULL,
    words         text NOT NULL,
    tsv           tsvector GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, words)) STORED,
    vec           real[] NOT NULL,
    UNIQUE (ns, from_kind, key)
);
CREATE INDEX beliefs_subject ON {SCHEMA}.beliefs (ns, from_kind, subject, status, observed_at, last_seq, key);
CREATE INDEX beliefs_ns_status ON {SCHEMA}.beliefs (ns, status);
CREATE INDEX beliefs_tsv ON {SCHEMA}.beliefs USING gin (tsv) WITH (fastupdate = off);

CREATE TABLE {SCHEMA}.belief_evidence (
    bid     bigint NOT NULL REFERENCES {SCHEMA}.beliefs (bid) ON DELETE CASCADE,
    item_id text NOT NULL,
    PRIMARY KEY (bid, item_id)
);
CREATE INDEX belief_evidence_item ON {SCHEMA}.belief_evidence (item_id);

CREATE TABLE {SCHEMA}.belief_anchors (
    ns        text COLLATE "C" NOT NULL,
    from_kind text NOT NULL,
    anchor    text NOT NULL,
    first_seq bigint NOT NULL,
    key       text NOT NULL,
    bid       bigint NOT NULL REFERENCES {SCHEMA}.beliefs (bid) ON DELETE CASCADE,
    PRIMARY KEY (ns, from_kind, anchor, first_seq, key)
);
CREATE INDEX belief_anchors_bid ON {SCHEMA}.belief_anchors (bid);
"""


def _v1(conn: Conn) -> None:
    for statement in _V1.split(";\n"):
        if statement.strip():
            conn.execute(statement)  # DDL built from constants only
    conn.execute(f"INSERT INTO {SCHEMA}.meta (key, value) VALUES ('instance', %s)", (uuid.uuid4().hex,))


_NEIGHBOUR = (
    "(SELECT {col} FROM {s}.items p WHERE p.thread_id = x.thread_id AND p.turn_last {op} x.{bound} AND p.ns = x.ns "
    "AND p.kind = 'conversation' ORDER BY p.turn_last {dir}, p.seq {dir} LIMIT 1)"
)
_PREV_TERMS = _NEIGHBOUR.format(col="p.terms", s=SCHEMA, op="<", bound="turn_first", dir="DESC")
_NEXT_TERMS = _NEIGHBOUR.format(col="p.terms", s=SCHEMA, op=">", bound="turn_last", dir="ASC")
_PREV_SEQ = _NEIGHBOUR.format(col="p.seq", s=SCHEMA, op="<", bound="turn_first", dir="DESC")
_NEXT_SEQ = _NEIGHBOUR.format(col="p.seq", s=SCHEMA, op=">", bound="turn_last", dir="ASC")
_TURN = "x.kind = 'conversation' AND x.thread_id IS NOT NULL AND x.turn_first IS NOT NULL"

_V2 = f"""
ALTER TABLE {SCHEMA}.items ADD COLUMN terms text NOT NULL DEFAULT '';
--
ALTER TABLE {SCHEMA}.items ADD COLUMN wterms text NOT NULL DEFAULT '';
--
ALTER TABLE {SCHEMA}.items ADD COLUMN speaker text;
--
ALTER TABLE {SCHEMA}.items DROP COLUMN tsv;
--
ALTER TABLE {SCHEMA}.items ADD COLUMN tsv tsvector
    GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, wterms)) STORED;
--
CREATE INDEX items_tsv ON {SCHEMA}.items USING gin (tsv) WITH (fastupdate = off);
--
CREATE TABLE {SCHEMA}.item_vectors (
    seq    bigint PRIMARY KEY REFERENCES {SCHEMA}.items (seq) ON DELETE CASCADE,
    model  text NOT NULL,
    prev   bigint,
    pooled bytea NOT NULL,
    tokens bytea NOT NULL
);
--
CREATE INDEX items_turns ON {SCHEMA}.items (thread_id, ns, turn_last, seq)
    WHERE kind = 'conversation' AND thread_id IS NOT NULL;
--
CREATE FUNCTION {SCHEMA}.rewindow(seqs bigint[]) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE {SCHEMA}.items i SET wterms = w.text
    FROM (SELECT x.seq, concat_ws(' ', nullif(x.terms, ''), nullif({_PREV_TERMS}, ''), nullif({_NEXT_TERMS}, ''))
          AS text FROM {SCHEMA}.items x WHERE x.seq = ANY(seqs) AND {_TURN}) w
    WHERE i.seq = w.seq AND i.wterms IS DISTINCT FROM w.text;
END $$;
--
CREATE FUNCTION {SCHEMA}.items_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {SCHEMA}.rewindow(ARRAY(
        SELECT s FROM (SELECT x.seq AS a, {_PREV_SEQ} AS b, {_NEXT_SEQ} AS c FROM new_rows x WHERE {_TURN}) n,
        LATERAL unnest(ARRAY[n.a, n.b, n.c]) AS s WHERE s IS NOT NULL));
    RETURN NULL;
END $$;
--
CREATE FUNCTION {SCHEMA}.items_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM {SCHEMA}.rewindow(ARRAY(
        SELECT s FROM (SELECT {_PREV_SEQ} AS b, {_NEXT_SEQ} AS c FROM old_rows x WHERE {_TURN}) n,
        LATERAL unnest(ARRAY[n.b, n.c]) AS s WHERE s IS NOT NULL));
    RETURN NULL;
END $$;
--
CREATE TRIGGER items_window_insert AFTER INSERT ON {SCHEMA}.items REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {SCHEMA}.items_inserted();
--
CREATE TRIGGER items_window_delete AFTER DELETE ON {SCHEMA}.items REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {SCHEMA}.items_deleted()
"""


_BACKFILL_BATCH: Final = 5_000
"""Items a version-1 database's terms are computed for per statement when it migrates to version 2."""


def _v2(conn: Conn) -> None:
    """Stemmed, windowed terms (``retrieval.terms``, ``retrieval.window``) and the model's token vectors.

    A v1 database's items get their terms here (computed in Python: the Snowball stemmer is the project's),
    then their windows in one statement.
    """
    from .writes import own_terms  # the writes module imports this one

    for statement in _V2.split(";\n--\n"):
        if statement.strip():
            conn.execute(statement)  # DDL built from constants only
    after = 0
    while True:  # in batches: a large store is never held in memory at once
        rows = conn.execute(
            f"SELECT seq, item FROM {SCHEMA}.items WHERE seq > %s ORDER BY seq LIMIT %s", (after, _BACKFILL_BATCH)
        ).fetchall()
        if not rows:
            break
        values = [own_terms(str(body)) for _, body in rows]
        conn.execute(
            f"UPDATE {SCHEMA}.items i SET terms = u.terms, wterms = u.terms, speaker = u.speaker "
            "FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS u(seq, terms, speaker) WHERE i.seq = u.seq",
            ([int(r[0]) for r in rows], [v[0] for v in values], [v[1] for v in values]),
        )
        after = int(rows[-1][0])
    conn.execute(  # every turn's window, once all terms are in
        f"SELECT {SCHEMA}.rewindow(ARRAY(SELECT seq FROM {SCHEMA}.items WHERE kind = 'conversation'))"
    )


def _v3(conn: Conn) -> None:
    """Memory as a log (seed 002, issue 19): ``log``, its head row, each item's status, tier and provenance."""
    from . import log

    log.migrate(conn)


_V4: Final = f"ALTER FUNCTION {SCHEMA}.rewindow(bigint[]) SET plan_cache_mode = force_custom_plan"


def _v4(conn: Conn) -> None:
    """The window update planned on every call, never from a cached generic plan.

    PL/pgSQL keeps a statement's plan for the session (PostgreSQL docs §43.11.2) and, after five calls, may
    keep a generic plan made without the parameter's values; nothing replans it until the table is analysed.
    ``rewindow``'s generic plan made while ``items`` was small read the whole ``items_turns`` partial index
    (its predicate matches the turn filter) and intersected it with the primary key, so every later write in
    that session read every stored turn: a store's cost grew with the store. ``plan_cache_mode =
    force_custom_plan`` (docs §20.7.4) plans it with the call's ``seq`` values and the table's current size:
    a primary-key probe per row.
    """
    conn.execute(_V4)  # DDL built from constants only


_V5: Final = f"""
ALTER TABLE {SCHEMA}.item_vectors ADD COLUMN tx xid8 NOT NULL DEFAULT pg_current_xact_id();
--
CREATE INDEX item_vectors_tx ON {SCHEMA}.item_vectors (tx, model)
"""


def _v5(conn: Conn) -> None:
    """``item_vectors.tx``: the writing transaction's id (indexed), for the hosts' copies of the pooled vectors.

    A host's copy (``pooled``) reads only the rows written since its last read, with the belief build's
    watermark rule.
    """
    for statement in _V5.split(";\n--\n"):
        if statement.strip():
            conn.execute(statement)  # DDL built from constants only


MIGRATIONS: tuple[Callable[[Conn], None], ...] = (_v1, _v2, _v3, _v4, _v5)
"""``MIGRATIONS[i]`` upgrades version ``i`` to ``i + 1``; append, never edit, to change the schema."""

SCHEMA_VERSION: Final = len(MIGRATIONS)
"""The schema version this code writes and reads."""


def read_version(conn: Conn) -> int:
    """The database's schema version (0: no ``memory_core`` schema yet)."""
    # a plain catalog scan sees what committed before this statement; ``to_regclass`` reads the syscache, which
    # an advisory lock does not refresh, so a process that waited for another's migration could miss its tables
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = 'meta')",
        (SCHEMA,),
    ).fetchone()
    if row is None or not row[0]:
        return 0
    found = conn.execute(f"SELECT value FROM {SCHEMA}.meta WHERE key = 'schema_version'").fetchone()
    return 0 if found is None else int(found[0])


def _refuse_newer(version: int, where: str) -> None:
    if version > SCHEMA_VERSION:
        raise Conflict(
            f"{where}: the database has memory-core schema version {version}, newer than this memory-core's "
            f"{SCHEMA_VERSION}; upgrade memory-core (a schema is never downgraded)"
        )


def migrate(conn: Conn, where: str) -> int:
    """Bring the schema to ``SCHEMA_VERSION`` inside the caller's transaction, holding the migration lock.

    Args:
        conn: A connection inside a transaction.
        where: How messages name the database (the masked URL).

    Returns:
        The version found before migrating.

    Raises:
        Conflict: the database's schema is newer than this code's.
    """
    if read_version(conn) == SCHEMA_VERSION:  # the common case: no lock taken
        return SCHEMA_VERSION
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
    found = read_version(conn)
    _refuse_newer(found, where)
    if found == 0:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    for step in MIGRATIONS[found:]:
        step(conn)
    if found != SCHEMA_VERSION:
        conn.execute(
            f"INSERT INTO {SCHEMA}.meta (key, value) VALUES ('schema_version', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(SCHEMA_VERSION),),
        )
    return found


VECTOR_INDEXES: Final = ("pgvector", "cube", "scan")
"""How vector candidates are found, best first (``ensure_vectors``)."""


def _add_pgvector(conn: Conn) -> None:
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    for table in ("items", "beliefs"):
        conn.execute(
            f"ALTER TABLE {SCHEMA}.{table} ADD COLUMN pvec vector(64) GENERATED ALWAYS AS (vec::vector(64)) STORED"
        )
        conn.execute(f"CREATE INDEX {table}_pvec ON {SCHEMA}.{table} USING hnsw (pvec vector_ip_ops)")


def _add_cube(conn: Conn) -> None:
    conn.execute("CREATE EXTENSION IF NOT EXISTS cube")
    for table in ("items", "beliefs"):
        conn.execute(
            f"ALTER TABLE {SCHEMA}.{table} ADD COLUMN cvec cube GENERATED ALWAYS AS (cube(vec::float8[])) STORED"
        )
        conn.execute(f"CREATE INDEX {table}_cvec ON {SCHEMA}.{table} USING gist (cvec)")


def ensure_vectors(conn: Conn) -> str:
    """Give the embeddings an index, once per database; which one is in use (``VECTOR_INDEXES``).

    pgvector (an HNSW index, inner product) when the ``vector`` extension can be created; else ``cube``
    (PostgreSQL's contrib, on every standard server: a GiST index whose distance ordering is computed in C, and
    for unit vectors Euclidean order is cosine order); else ``scan`` (cosines computed in SQL over the reach).
    Runs under the migration lock; the choice is recorded in ``meta.vectors``. A refused ``CREATE EXTENSION``
    (no privilege) falls through to the next option.
    """
    row = conn.execute(f"SELECT value FROM {SCHEMA}.meta WHERE key = 'vectors'").fetchone()
    if row is not None:
        return str(row[0])
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
    row = conn.execute(f"SELECT value FROM {SCHEMA}.meta WHERE key = 'vectors'").fetchone()
    if row is not None:
        return str(row[0])
    available = {
        str(r[0])
        for r in conn.execute("SELECT name FROM pg_available_extensions WHERE name IN ('vector', 'cube')").fetchall()
    }
    used = "scan"
    for name, extension, add in (("pgvector", "vector", _add_pgvector), ("cube", "cube", _add_cube)):
        if extension not in available:
            continue
        try:
            with conn.transaction():  # a savepoint: a refused CREATE EXTENSION leaves the rest intact
                add(conn)
            used = name
            break
        except Exception:  # no privilege or an old version: try the next option
            continue
    conn.execute(f"INSERT INTO {SCHEMA}.meta (key, value) VALUES ('vectors', %s)", (used,))
    return used


def check_newer(conn: Conn, where: str) -> None:
    """Refuse a database whose schema is newer than this code's (before any migration).

    Raises:
        Conflict: as ``migrate``.
    """
    _refuse_newer(read_version(conn), where)

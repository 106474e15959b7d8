"""Forward schema migrations: a file written by version 1 opens under the current steps plus a test-only last
step with its data intact, and two processes opening it at once apply each step once."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _sqlite_files import downgrade_to_v1

from memory_core import (
    BeliefsRequest,
    ConsolidateRequest,
    Conversation,
    Document,
    FetchRequest,
    Learning,
    ListRequest,
    MemoryMeta,
    Namespace,
    Reach,
    Role,
    Turn,
)
from memory_core.engines.sqlite import SQLiteEngine, belief_index, schema
from memory_core.engines.sqlite import engine as engine_module

REAL_MIGRATIONS = schema.MIGRATIONS
FAKE_VERSION = len(schema.MIGRATIONS) + 1
"""The version the test-only step below upgrades to (after every real step)."""


def _v2(conn: sqlite3.Connection) -> None:
    """A fake last step: a new column and index, and a row naming the process that applied it."""
    conn.execute("ALTER TABLE items ADD COLUMN note TEXT")
    conn.execute("CREATE INDEX items_note ON items(note) WHERE note IS NOT NULL")
    conn.execute("INSERT INTO meta (key, value) VALUES (?, 'v2')", (f"v2-applied-by-{os.getpid()}",))


@pytest.fixture
def v2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema, "MIGRATIONS", (*schema.MIGRATIONS, _v2))
    monkeypatch.setattr(schema, "SCHEMA_VERSION", len(schema.MIGRATIONS))


def _version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def _applied(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [str(r[0]) for r in conn.execute("SELECT key FROM meta WHERE key LIKE 'v2-applied-by-%'")]
    finally:
        conn.close()


def _v1_file(path: Path) -> dict[str, Any]:
    """A version-1 file holding items of each kind and a built belief; what a reader should see again."""
    at = Namespace.agent("ann")
    items = [
        Document.of("Refunds take five business days.", MemoryMeta(namespace=at)),
        Conversation(
            turns=(Turn(role=Role.USER, text="I moved to Lisbon last spring and I love the trams."),),
            meta=MemoryMeta(namespace=at),
        ),
        Learning(text="Ann prefers tea over coffee.", confidence=0.8, meta=MemoryMeta(namespace=at)),
    ]
    with pytest.MonkeyPatch.context() as undo:  # written by the current code (without the test-only step) …
        undo.setattr(schema, "MIGRATIONS", REAL_MIGRATIONS)
        undo.setattr(schema, "SCHEMA_VERSION", len(REAL_MIGRATIONS))
        with SQLiteEngine(path) as engine:
            engine.store_many(items)
            engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
            seen = _seen(engine)
    downgrade_to_v1(path)  # … then put back in the layout version-1 code wrote
    return seen


def _seen(engine: SQLiteEngine) -> dict[str, Any]:
    return {
        "export": [(e.id, e.item) for e in engine.export(ListRequest()).items],
        "fetch": [h.id for h in engine.fetch(FetchRequest(query="refunds tea Lisbon", limit=10)).hits],
        "beliefs": [(h.id, h.text) for h in engine.beliefs(BeliefsRequest(reach=Reach.subtree(), limit=50))],
        # a version-1 file holds no model vectors: after migrating, its items wait for the embedding job
        "stats": {k: v for k, v in engine.stats().items() if k != "embedding_wait"},
    }


def test_a_version_1_file_migrates_forward_and_keeps_its_data(tmp_path: Path, v2: None) -> None:
    path = tmp_path / "memory.db"
    before = _v1_file(path)
    assert _version(path) == 1 and before["beliefs"]
    with SQLiteEngine(path) as engine:
        assert _seen(engine) == before
        engine.store(Document.of("written after the migration", MemoryMeta()))
    assert _version(path) == FAKE_VERSION
    assert len(_applied(path)) == 1
    with SQLiteEngine(path) as engine:  # reopening at the current version runs no step
        assert len(engine.export(ListRequest()).items) == 4
    assert len(_applied(path)) == 1
    conn = sqlite3.connect(path)
    assert "note" in {str(r[1]) for r in conn.execute("PRAGMA table_info(items)")}
    conn.close()


def test_step_3_stamps_beliefs_and_indexes_the_full_load(tmp_path: Path) -> None:
    """Version 3 (issue 12): existing beliefs get version 0, new writes are stamped, and a first full load of the
    active beliefs reads an index on ``status`` rather than scanning the table."""
    path = tmp_path / "memory.db"
    before = _v1_file(path)
    with SQLiteEngine(path) as engine:
        assert _seen(engine) == before  # the beliefs written before the step still rank and list
        engine.store(
            Conversation(
                turns=(Turn(role=Role.USER, text="I adopted a rescue dog named Max yesterday."),),
                meta=MemoryMeta(namespace=Namespace.agent("bob")),
            )
        )
        engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
    assert _version(path) == schema.SCHEMA_VERSION >= 3
    conn = sqlite3.connect(path)
    try:
        versions = [int(r[0]) for r in conn.execute("SELECT version FROM beliefs ORDER BY bid")]
        assert versions[0] == 0 and versions[-1] > 0
        plan = " ".join(str(r[3]) for r in conn.execute(f"EXPLAIN QUERY PLAN {belief_index._LOAD_SQL}", ("active",)))
        assert "USING INDEX beliefs_status" in plan, plan
    finally:
        conn.close()


def _open_together(path: str, barrier: Any, results: Any) -> None:
    """A child process: pass the read-only schema probe (version 1), wait for the other child to pass it too,
    then open for writing. Reports the version ``migrate`` found."""
    real_check: Callable[..., int] = engine_module.check_version
    real_migrate: Callable[..., int] = engine_module.migrate
    found: list[int] = []

    def check_then_wait(conn: sqlite3.Connection, p: Path) -> int:
        version = real_check(conn, p)
        barrier.wait(timeout=60)
        return version

    def migrate(conn: sqlite3.Connection, p: Path) -> int:
        found.append(real_migrate(conn, p))
        return found[-1]

    engine_module.check_version = check_then_wait  # type: ignore[assignment]
    engine_module.migrate = migrate  # type: ignore[assignment]
    try:
        with SQLiteEngine(path) as engine:
            results.put((found, len(engine.export(ListRequest()).items)))
    except BaseException as exc:
        results.put(f"{type(exc).__name__}: {exc}")


def test_two_processes_migrating_at_once_apply_the_step_once(tmp_path: Path, v2: None) -> None:
    path = tmp_path / "memory.db"
    _v1_file(path)
    ctx = multiprocessing.get_context("fork")  # the children inherit the patched MIGRATIONS
    barrier, results = ctx.Barrier(2), ctx.Queue()
    children = [ctx.Process(target=_open_together, args=(str(path), barrier, results)) for _ in range(2)]
    for child in children:
        child.start()
    outcomes = [results.get(timeout=120) for _ in children]
    for child in children:
        child.join(timeout=60)
    assert all(isinstance(o, tuple) for o in outcomes), outcomes
    assert sorted(o[0][0] for o in outcomes) == [1, FAKE_VERSION]  # one applied the steps; the other found them done
    assert [o[1] for o in outcomes] == [3, 3]
    assert len(_applied(path)) == 1
    assert _version(path) == FAKE_VERSION

"""A damaged SQLite file that still opens: ``health()`` reports it ``down``, naming the file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memory_core import Document, EngineError, FetchMode, FetchRequest, HealthState, ListRequest, MemoryMeta
from memory_core.engines.sqlite import SQLiteEngine


def _filled(path: Path) -> None:
    with SQLiteEngine(path) as engine:
        for start in range(0, 200, 100):
            engine.store_many([Document.of(f"hello there {i} " * 50, MemoryMeta()) for i in range(start, start + 100)])


def test_a_file_damaged_mid_way_opens_but_health_reports_it_down(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    _filled(path)
    conn = sqlite3.connect(path)  # the leaf pages holding the items' bodies, which a listing reads
    leaves = [int(r[0]) for r in conn.execute("SELECT pageno FROM dbstat WHERE name = 'bodies' AND pagetype = 'leaf'")]
    conn.close()
    data = bytearray(path.read_bytes())
    page = 4096
    middle = (leaves[len(leaves) // 2] - 1) * page
    data[middle : middle + 2 * page] = b"\xcd" * (2 * page)  # two whole b-tree pages in the middle
    path.write_bytes(bytes(data))
    with SQLiteEngine(path) as engine:  # the header and schema read fine
        health = engine.health()
        assert health.state is HealthState.DOWN
        assert str(path) in (health.reason or "") and "damaged" in (health.reason or "")
        with pytest.raises(EngineError, match=str(path)):
            engine.list(ListRequest(limit=500))


def test_damage_a_read_meets_is_reported_by_health_from_then_on(tmp_path: Path) -> None:
    """FTS5's index blocks are not b-tree structure, so ``quick_check`` passes them; the read that meets them
    marks the file damaged."""
    path = tmp_path / "memory.db"
    with SQLiteEngine(path) as engine:
        engine.store_many([Document.of(f"walrus note {i}", MemoryMeta()) for i in range(20)])
        assert engine.health().state is HealthState.OK
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("UPDATE items_fts_data SET block = zeroblob(length(block)) || x'ffffffff' WHERE id > 10")
        other.close()
        assert engine.health().state is HealthState.OK
        assert len(engine.fetch(FetchRequest(query="walrus", mode=FetchMode.VECTOR)).hits) == 10
        with pytest.raises(EngineError, match=str(path)):
            engine.fetch(FetchRequest(query="walrus", mode=FetchMode.KEYWORD))
        health = engine.health()
        assert health.state is HealthState.DOWN
        assert str(path) in (health.reason or "") and "malformed" in (health.reason or "")


def test_a_sound_file_is_healthy(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    _filled(path)
    with SQLiteEngine(path) as engine:
        assert engine.health().state is HealthState.OK
        assert engine.health().state is HealthState.OK

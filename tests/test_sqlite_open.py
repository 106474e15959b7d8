"""Opening the SQLite engine on bad paths: corrupt, foreign, newer, read-only files; malformed URLs."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from memory_core import ConfigError, Conflict, Document, EngineError, EngineUnavailable, ListRequest, MemoryMeta
from memory_core.engines import open_engine
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.engines.sqlite.connection import Database, SQLiteOptions
from memory_core.engines.sqlite.schema import SCHEMA_VERSION


def _fingerprint(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


WAL_HEADER = b"SQLite format 3\x00" + b"\x10\x00\x02\x02"
"""A header naming 4096-byte pages and WAL mode (bytes 18-19 = 2, sqlite.org/fileformat.html §1.3.4)."""


def _trashed_after_header(folder: Path) -> bytes:
    """A real WAL-mode memory file with everything after its 100-byte header overwritten."""
    source = folder / "source" / "memory.db"
    with SQLiteEngine(source) as engine:
        engine.store(Document.of("hello there", MemoryMeta()))
    data = bytearray(source.read_bytes())
    assert data[18:20] == b"\x02\x02"
    data[100:] = b"\xab" * (len(data) - 100)
    return bytes(data)


@pytest.mark.parametrize(
    "content",
    [
        b"this is a text file, not a database\n" * 20,
        b"SQLite format 3\x00" + b"\xff" * 4000,
        WAL_HEADER + b"\xff" * 4076,
        None,
    ],
    ids=["not-sqlite", "corrupt-sqlite", "corrupt-wal-mode-header", "wal-mode-file-trashed-after-header"],
)
def test_a_file_that_is_not_a_usable_database_is_refused_and_left_untouched(
    tmp_path: Path, content: bytes | None
) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    path = folder / "memory.db"
    path.write_bytes(_trashed_after_header(tmp_path) if content is None else content)
    before = _fingerprint(path)
    with pytest.raises(EngineError, match=str(path)) as caught:
        open_engine(f"sqlite:///{path}")
    assert not caught.value.retryable  # the same bytes fail again: permanent, never reported as transient
    assert _fingerprint(path) == before
    assert sorted(p.name for p in folder.iterdir()) == ["memory.db"]


def test_a_directory_at_the_path_is_refused(tmp_path: Path) -> None:
    (tmp_path / "memory.db").mkdir()
    with pytest.raises(EngineError, match="not a file") as caught:
        SQLiteEngine(tmp_path / "memory.db")
    assert not caught.value.retryable  # a folder stays a folder: never reported as transient


def test_a_missing_folder_is_created(tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "x" / "y" / "memory.db") as engine:
        engine.store(Document.of("hello", MemoryMeta()))
    assert (tmp_path / "x" / "y" / "memory.db").is_file()


def test_a_schema_from_a_newer_version_is_refused_not_downgraded(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with SQLiteEngine(path) as engine:
        engine.store(Document.of("kept", MemoryMeta()))
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    before = _fingerprint(path)
    with pytest.raises(Conflict, match=f"schema version {SCHEMA_VERSION + 1}"):
        SQLiteEngine(path)
    assert _fingerprint(path) == before


def test_another_applications_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.commit()
    conn.close()
    before = _fingerprint(path)
    with pytest.raises(Conflict, match="another application"):
        SQLiteEngine(path)
    assert _fingerprint(path) == before


def test_reopening_keeps_what_was_stored(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    item = Document.of("persisted", MemoryMeta())
    with SQLiteEngine(path) as engine:
        engine.store(item)
    with SQLiteEngine(path) as engine:
        assert [h.id for h in engine.list(ListRequest()).items] == [item.id]


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://host/memory.db",
        "sqlite:///",
        "sqlite:///:memory:",
        "sqlite:///x.db?wal=1",
        "sqlite:///x.db?synchronous=off",
    ],
)
def test_malformed_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError):
        open_engine(url)


def _open_as_unprivileged(path: Path) -> str:
    """The error opening ``path`` as a user who cannot write it: ``nobody`` in a forked child when run as root
    (root writes through permission bits), else this process. Only the message crosses back, as text."""
    if os.geteuid() != 0:
        with pytest.raises(ConfigError) as caught:
            SQLiteEngine(path)
        return str(caught.value)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            SQLiteEngine(path)
            message = "opened a read-only database without complaint"
        except ConfigError as exc:
            message, code = str(exc), 0
        except BaseException as exc:
            message = f"{type(exc).__name__}: {exc}"
        os.write(write, message.encode())
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as fh:
        message = fh.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, message
    return message


@pytest.fixture
def shared_dir() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="memcore-ro-"))
    folder.chmod(0o755)
    return folder


def test_a_read_only_file_is_a_clear_error(shared_dir: Path) -> None:
    path = shared_dir / "memory.db"
    with SQLiteEngine(path):
        pass
    shared_dir.chmod(0o777)
    path.chmod(0o444)
    assert "read-only" in _open_as_unprivileged(path)


def test_a_read_only_folder_is_a_clear_error(shared_dir: Path) -> None:
    folder = shared_dir / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    assert "read-only" in _open_as_unprivileged(folder / "memory.db")


def test_a_probe_failure_while_another_process_starts_on_the_file_is_read_again(tmp_path: Path) -> None:
    """A file at rest is probed ``immutable``; if another process opens it meanwhile, a failure of that read is
    not trusted (its checkpoint may have changed pages under it) and the file is read again with locking."""
    path = tmp_path / "memory.db"
    with SQLiteEngine(path) as engine:
        engine.store(Document.of("kept", MemoryMeta()))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory.db"]
    calls: list[int] = []
    other = sqlite3.connect(path, isolation_level=None)

    def probe(conn: sqlite3.Connection) -> None:
        calls.append(int(conn.execute("PRAGMA user_version").fetchone()[0]))
        if len(calls) == 1:  # another process starts using the file during the first read
            other.execute("SELECT count(*) FROM items").fetchone()
            raise EngineUnavailable("torn read")

    try:
        db = Database(SQLiteOptions(path=path), probe=probe)
        db.close()
    finally:
        other.close()
    assert calls == [SCHEMA_VERSION, SCHEMA_VERSION]


def test_a_probe_failure_on_a_file_at_rest_stands(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with SQLiteEngine(path):
        pass
    calls: list[int] = []

    def probe(conn: sqlite3.Connection) -> None:
        calls.append(1)
        raise EngineUnavailable("bad file")

    with pytest.raises(EngineUnavailable, match="bad file"):
        Database(SQLiteOptions(path=path), probe=probe)
    assert calls == [1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory.db"]


_LOCK_PROBE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 510, 0x40000002, 0)  # SQLite's SHARED byte range
    print("free")
except OSError:
    print("held")
"""


def _shared_lock_seen_from_another_process(path: Path) -> str:
    run = subprocess.run([sys.executable, "-c", _LOCK_PROBE, str(path)], capture_output=True, text=True, check=True)
    return run.stdout.strip()


def test_opening_the_file_again_in_one_process_keeps_the_locks_sqlite_holds_on_it(tmp_path: Path) -> None:
    """Closing any descriptor of a file drops all of a process's POSIX locks on it (sqlite.org/howtocorrupt.html
    §2.2): a second engine on the same file must never open it outside SQLite, or a reader of the first loses its
    SHARED lock and another process may change the file under it."""
    path = tmp_path / "memory.db"
    with SQLiteEngine(path) as engine:
        engine.store(Document.of("hello there", MemoryMeta()))
    reader = sqlite3.connect(path, isolation_level=None)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM sqlite_master").fetchone()
        assert _shared_lock_seen_from_another_process(path) == "held"
        with SQLiteEngine(path) as again:
            again.list(ListRequest())
            assert _shared_lock_seen_from_another_process(path) == "held"
        assert _shared_lock_seen_from_another_process(path) == "held"
    finally:
        reader.close()

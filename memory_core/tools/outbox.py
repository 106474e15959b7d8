"""``ToolOutbox``: the durable private outbox of model-made ``learn``/``forget`` requests (reference §6.4).

A request the engine could not take now waits here, already scrubbed, until it is delivered. Entries are kept per
partition (the namespace the tools write at), in the order they were made; each partition holds at most
``MAX_ENTRIES`` entries and ``MAX_BYTES`` of payload (the reference's ``tool_writes`` bounds). One SQLite file,
owner-only (0600), ``synchronous=FULL`` so an acknowledged request survives a crash; safe for several threads and
processes of one machine.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from memory_core.errors import EngineUnavailable, InvalidRequest
from memory_core.settings import Settings, get_settings

__all__ = ["MAX_BYTES", "MAX_ENTRIES", "DeadWrite", "QueuedWrite", "ToolOutbox", "WriteOp", "open_tool_outbox"]

MAX_ENTRIES: Final = 256
"""Entries a partition may hold."""
MAX_BYTES: Final = 2 * 1024 * 1024
"""Payload bytes a partition may hold."""

WriteOp = Literal["learn", "forget"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queued (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    partition TEXT NOT NULL,
    op TEXT NOT NULL,
    payload TEXT NOT NULL,
    item_id TEXT,
    created REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT
);
CREATE INDEX IF NOT EXISTS queued_partition ON queued (partition, seq);
CREATE TABLE IF NOT EXISTS dead (
    seq INTEGER PRIMARY KEY,
    partition TEXT NOT NULL,
    op TEXT NOT NULL,
    payload TEXT NOT NULL,
    created REAL NOT NULL,
    attempts INTEGER NOT NULL,
    reason TEXT NOT NULL,
    dead_at REAL NOT NULL
);
"""


@dataclass(frozen=True)
class QueuedWrite:
    """One waiting request.

    Attributes:
        seq: Its place in the order requests were made (increasing).
        partition: The namespace its tools write at.
        op: ``learn`` or ``forget``.
        payload: Its JSON (a scrubbed learning item, or ``{"ids": […], "reach": …}``).
        item_id: A learning's id (what a later ``forget`` names to cancel it), else None.
        created: When it was queued, seconds since the epoch.
        attempts: Failed deliveries so far.
        last_error: Why the last delivery failed.
    """

    seq: int
    partition: str
    op: WriteOp
    payload: str
    item_id: str | None
    created: float
    attempts: int = 0
    last_error: str | None = None


@dataclass(frozen=True)
class DeadWrite:
    """A request given up on, with its reason."""

    seq: int
    partition: str
    op: WriteOp
    payload: str
    attempts: int
    reason: str


class ToolOutbox:
    """The outbox file at ``path`` (created owner-only, with its folder).

    Raises:
        EngineUnavailable: the file cannot be opened or written (every method).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            fd = os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600)
            os.close(fd)
        try:
            db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.executescript(_SCHEMA)
            finally:
                db.close()
        except sqlite3.Error as exc:
            raise EngineUnavailable(f"tool outbox {self.path.name}: {exc}") from None

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None)
            except sqlite3.Error as exc:
                raise EngineUnavailable(f"tool outbox {self.path.name}: {exc}") from None
            try:
                db.execute("PRAGMA synchronous=FULL")
                db.execute("BEGIN IMMEDIATE")
                yield db
                db.execute("COMMIT")
            except sqlite3.Error as exc:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise EngineUnavailable(f"tool outbox {self.path.name}: {exc}") from None
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            finally:
                db.close()

    def put(self, partition: str, op: WriteOp, payload: str, item_id: str | None = None) -> int:
        """Queue a request behind the partition's others; its ``seq``.

        Raises:
            InvalidRequest: ``field="outbox"``: the partition already holds ``MAX_ENTRIES`` entries or
                ``MAX_BYTES`` of payload (nothing is queued).
            EngineUnavailable: the file cannot be written.
        """
        size = len(payload.encode("utf-8"))
        with self._tx() as db:
            count, held = db.execute(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(payload AS BLOB))), 0) FROM queued WHERE partition = ?",
                (partition,),
            ).fetchone()
            if count >= MAX_ENTRIES or held + size > MAX_BYTES:
                raise InvalidRequest(
                    f"the outbox for {partition} is full ({count} entries, {held} bytes); try again later",
                    field="outbox",
                )
            cursor = db.execute(
                "INSERT INTO queued (partition, op, payload, item_id, created) VALUES (?, ?, ?, ?, ?)",
                (partition, op, payload, item_id, time.time()),
            )
            return int(cursor.lastrowid or 0)

    def pending(self, partition: str | None = None) -> list[QueuedWrite]:
        """Waiting requests (of one partition, or all), in the order they were made."""
        query = "SELECT seq, partition, op, payload, item_id, created, attempts, last_error FROM queued"
        args: tuple[str, ...] = ()
        if partition is not None:
            query += " WHERE partition = ?"
            args = (partition,)
        with self._tx() as db:
            rows = db.execute(query + " ORDER BY seq", args).fetchall()
        return [QueuedWrite(*row) for row in rows]

    def waiting(self, partition: str) -> bool:
        """True when the partition has a request waiting (a new one must queue behind it)."""
        with self._tx() as db:
            row = db.execute("SELECT 1 FROM queued WHERE partition = ? LIMIT 1", (partition,)).fetchone()
        return row is not None

    def cancel_learnings(self, partition: str, item_ids: set[str]) -> set[str]:
        """Remove the partition's queued learnings whose ids are in ``item_ids``; the ids removed."""
        if not item_ids:
            return set()
        with self._tx() as db:
            rows = db.execute(
                "SELECT seq, item_id FROM queued WHERE partition = ? AND op = 'learn' AND item_id IS NOT NULL",
                (partition,),
            ).fetchall()
            hits = [(seq, item_id) for seq, item_id in rows if item_id in item_ids]
            db.executemany("DELETE FROM queued WHERE seq = ?", [(seq,) for seq, _ in hits])
        return {item_id for _, item_id in hits}

    def done(self, seq: int) -> None:
        """The request was delivered: remove it."""
        with self._tx() as db:
            db.execute("DELETE FROM queued WHERE seq = ?", (seq,))

    def failed(self, seq: int, error: str) -> int:
        """A delivery failed: count the attempt and keep the reason; the attempts so far."""
        with self._tx() as db:
            db.execute("UPDATE queued SET attempts = attempts + 1, last_error = ? WHERE seq = ?", (error, seq))
            row = db.execute("SELECT attempts FROM queued WHERE seq = ?", (seq,)).fetchone()
        return int(row[0]) if row else 0

    def bury(self, seq: int, reason: str) -> None:
        """Give up on a request: move it to the dead letters with ``reason``."""
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO dead (seq, partition, op, payload, created, attempts, reason, dead_at) "
                "SELECT seq, partition, op, payload, created, attempts, ?, ? FROM queued WHERE seq = ?",
                (reason, time.time(), seq),
            )
            db.execute("DELETE FROM queued WHERE seq = ?", (seq,))

    @contextmanager
    def delivering(self) -> Iterator[bool]:
        """Hold the right to deliver (one deliverer per machine at a time, so no request overtakes another).

        Yields:
            True when this caller holds it; False when another process or thread is delivering now.
        """
        lock = self.path.with_name(self.path.name + ".deliver.lock")
        fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def dead(self) -> list[DeadWrite]:
        """The requests given up on, oldest first."""
        with self._tx() as db:
            rows = db.execute("SELECT seq, partition, op, payload, attempts, reason FROM dead ORDER BY seq").fetchall()
        return [DeadWrite(*row) for row in rows]


def open_tool_outbox(settings: Settings | None = None) -> ToolOutbox:
    """The outbox at ``var_dir/tool_writes.db`` (``Settings.var_dir``; default: the process's settings).

    Raises:
        ConfigError: a malformed ``MEMORY_CORE_`` setting.
        EngineUnavailable: the file cannot be opened.
    """
    return ToolOutbox((settings or get_settings()).var_dir / "tool_writes.db")

"""The durable local outbox: jobs a host could not publish wait here (SQLite under ``var_dir``) until drained.

Delivery is claim → publish → mark. A claim is one ``BEGIN IMMEDIATE`` transaction that stamps a batch of
undelivered rows with the drainer's token, so two drainers (a host's submit, a worker's start, beat) never
publish the same row; marking checks the token, so a drainer whose claim went stale cannot mark another's
row. A drainer that crashes between publishing and marking leaves a stale claim that is published again
after ``claim_ttl_s``: a twin with the same job id, which the workers drop (``Coordination.is_done``) or which
repeats an idempotent job. Nothing is lost; nothing runs twice to any effect.

A failed publish is counted in ``tries``; one that was not the broker's fault (a payload that is not a job)
is counted in ``faults`` as well. Broker errors keep a row parked however long the outage lasts; a row with
``MAX_FAULTS`` faults is moved to the dead letters by the drainer (``JobQueue.drain``) and ``remove``d here.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from memory_core.errors import InvalidRequest
from workers.coordination import LocalDb
from workers.dead_letters import quote_id

__all__ = ["MAX_FAULTS", "Outbox", "OutboxEntry"]

MAX_FAULTS = 3
"""Failed publishes not caused by the broker after which a parked row is dead-lettered (a malformed payload
fails every time; three tries leave room for a fault that passes, such as a bug fixed by a deploy)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id TEXT PRIMARY KEY,
    task TEXT NOT NULL,
    payload TEXT NOT NULL,
    created REAL NOT NULL,
    tries INTEGER NOT NULL DEFAULT 0,
    faults INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    claimed_by TEXT,
    claimed_at REAL,
    delivered_at REAL
);
CREATE INDEX IF NOT EXISTS outbox_waiting ON outbox (delivered_at, created);
"""


@dataclass(frozen=True)
class OutboxEntry:
    """One parked job.

    Attributes:
        id: The job id ``submit`` returned; the job is published under it.
        task: The task name.
        payload: The job's JSON text.
        created: When it was parked, seconds since the epoch.
        tries: Failed publish attempts so far.
        faults: Those of them not caused by the broker (the payload or the code failed).
    """

    id: str
    task: str
    payload: str
    created: float
    tries: int = 0
    faults: int = 0


class Outbox:
    """A SQLite outbox shared by the processes of one machine.

    Args:
        path: The database file (created with its folder).
        claim_ttl_s: After this many seconds an unmarked claim is considered abandoned and may be reclaimed.
    """

    def __init__(self, path: Path, claim_ttl_s: float = 60.0) -> None:
        self.path = path
        self.claim_ttl_s = claim_ttl_s
        self._store = LocalDb(path, "outbox", synchronous="FULL")
        self._store.script(_SCHEMA)
        with self._tx() as db:  # an outbox written before ``faults`` existed gets the column
            columns = {row[1] for row in db.execute("PRAGMA table_info(outbox)")}
            if "faults" not in columns:
                db.execute("ALTER TABLE outbox ADD COLUMN faults INTEGER NOT NULL DEFAULT 0")

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._store.transaction()

    def put(self, entry: OutboxEntry) -> None:
        """Park a job durably (committed with ``synchronous=FULL``); an id parked twice is kept once.

        Raises:
            InvalidRequest: ``field="job_id"``: the id is parked (or was delivered, while its row is kept) with
                another task or payload; nothing changes (issue 11 §3: a job id names one payload).
            EngineUnavailable: the file cannot be written.
        """
        with self._tx() as db:
            kept = db.execute("SELECT task, payload FROM outbox WHERE id = ?", (entry.id,)).fetchone()
            if kept is not None and tuple(kept) != (entry.task, entry.payload):
                raise InvalidRequest(f"job id {quote_id(entry.id)} names another job in the outbox", field="job_id")
            db.execute(
                "INSERT OR IGNORE INTO outbox (id, task, payload, created) VALUES (?, ?, ?, ?)",
                (entry.id, entry.task, entry.payload, entry.created),
            )

    def claim(self, token: str, limit: int = 100) -> list[OutboxEntry]:
        """Claim up to ``limit`` undelivered rows (oldest first) not claimed by a live drainer."""
        now = time.time()
        with self._tx() as db:
            rows = db.execute(
                "UPDATE outbox SET claimed_by = ?, claimed_at = ? WHERE id IN ("
                " SELECT id FROM outbox WHERE delivered_at IS NULL AND (claimed_by IS NULL OR claimed_at < ?)"
                " ORDER BY created LIMIT ?) RETURNING id, task, payload, created, tries, faults",
                (token, now, now - self.claim_ttl_s, limit),
            ).fetchall()
        return sorted((OutboxEntry(*row) for row in rows), key=lambda e: e.created)

    def delivered(self, entry_id: str, token: str) -> bool:
        """Mark a claimed row delivered; False when the claim was lost (another drainer owns it now)."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE outbox SET delivered_at = ?, claimed_by = NULL"
                " WHERE id = ? AND claimed_by = ? AND delivered_at IS NULL",
                (time.time(), entry_id, token),
            )
            return cur.rowcount == 1

    def release(self, entry_id: str, token: str, error: str, fault: bool = False) -> None:
        """Give a claimed row back after a failed publish, counting the try (and the fault, when ``fault``)."""
        with self._tx() as db:
            db.execute(
                "UPDATE outbox SET claimed_by = NULL, claimed_at = NULL, tries = tries + 1, faults = faults + ?,"
                " last_error = ? WHERE id = ? AND claimed_by = ?",
                (int(fault), error[:500], entry_id, token),
            )

    def remove(self, entry_id: str, token: str) -> bool:
        """Delete a claimed row (it was dead-lettered); False when the claim was lost."""
        with self._tx() as db:
            cur = db.execute("DELETE FROM outbox WHERE id = ? AND claimed_by = ?", (entry_id, token))
            return cur.rowcount == 1

    def waiting(self) -> int:
        """Rows not yet delivered."""
        row = self._store.execute("SELECT COUNT(*) FROM outbox WHERE delivered_at IS NULL").fetchone()
        return int(row[0])

    def prune(self, older_than_s: float = 86400.0) -> int:
        """Drop delivered rows older than ``older_than_s``; returns how many."""
        with self._tx() as db:
            return db.execute(
                "DELETE FROM outbox WHERE delivered_at IS NOT NULL AND delivered_at < ?", (time.time() - older_than_s,)
            ).rowcount

    def close(self) -> None:
        """Close this thread's connection."""
        self._store.close()

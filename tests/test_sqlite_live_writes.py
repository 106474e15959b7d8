"""Live writes before background ones (issue 12): a host's ``accepted`` write never waits behind a worker's
build for more than the one build transaction holding the lock when it arrived.

The build runs in another process (this file run as a script). Both processes report their transactions
through ``Database.trace`` with ``time.monotonic_ns()`` (one clock for every process on the machine), so the
test checks the *order* of commits, never a duration: between the moment a host write holds the gate and its
commit, at most one build transaction commits.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memory_core import (
    ConsolidateRequest,
    Conversation,
    MemoryMeta,
    Namespace,
    ObservedActor,
    Reach,
    Role,
    Turn,
    WriteOptions,
)
from memory_core.engines.sqlite import SQLiteEngine, beliefs_store, connection
from memory_core.engines.sqlite.rows import ns_key

BUILT = "worker-scope"
HOST = "host"
_THINGS = ("tomato", "kayak", "pottery", "violin", "garden", "novel", "bicycle", "painting", "puppy", "recipe")


def turn(n: int, agent: str, tag: str = "") -> Conversation:
    thing = _THINGS[n % len(_THINGS)]
    return Conversation(
        turns=(Turn(role=Role.USER, text=f"I bought {n} {thing} things{tag} for my sister on day {n}."),),
        meta=MemoryMeta(
            namespace=Namespace.agent(agent),
            agent_id=agent,
            thread_id=f"t{n % 7}",
            observed_at=datetime(2023, 1, 1, tzinfo=UTC) + timedelta(hours=n),
            observed_actor=ObservedActor(id=f"user:{agent}", name=agent),
        ),
    )


def _build(db: str, trace: str) -> None:
    """The worker: one long build of ``BUILT`` re-taking the lock at once, each commit written to ``trace``."""
    with SQLiteEngine(db) as engine, open(trace, "w", encoding="utf-8") as out:

        def note(event: str) -> None:
            out.write(f"{event} {time.monotonic_ns()}\n")
            out.flush()

        engine._db.trace = note
        # no pause between transactions: only the gate lets a waiting host write in
        beliefs_store.build_scope(engine._db, ns_key(Namespace.agent(BUILT)), "conversation", gap_s=0.0)
        out.write(f"yields {engine._db.stats.yields}\n")


def _events(lines: list[str]) -> list[tuple[str, int]]:
    rows = [line.split() for line in lines]
    return [(name, int(at)) for name, at in rows]


def test_a_host_write_waits_for_at_most_one_build_transaction(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    with SQLiteEngine(db) as engine:
        items = [turn(n, BUILT) for n in range(1500)]
        for i in range(0, len(items), 100):
            engine.store_many(items[i : i + 100])
    trace = tmp_path / "build.trace"
    worker = subprocess.Popen(
        [sys.executable, __file__, str(db), str(trace)], stderr=subprocess.PIPE, text=True, env={**os.environ}
    )
    host: list[tuple[str, int]] = []
    with SQLiteEngine(db) as engine:
        engine._db.trace = lambda event: host.append((event, time.monotonic_ns()))
        while not trace.exists() or not trace.read_text(encoding="utf-8"):  # the build's first commit
            assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
            time.sleep(0.005)
        n = 0
        while worker.poll() is None:
            engine.store_with(turn(n, HOST, tag=" live"), WriteOptions.accepted())
            n += 1
            time.sleep(0.003)
        busy = engine._db.stats.live_busy
    assert worker.returncode == 0, worker.stderr.read() if worker.stderr else ""
    lines = trace.read_text(encoding="utf-8").splitlines()
    assert lines[-1].startswith("yields ")
    commits = [at for name, at in _events(lines[:-1]) if name == "background-commit"]
    waits = [at for name, at in host if name == "live-waiting"]
    done = [at for name, at in host if name == "live-commit"]
    assert len(waits) == len(done) == n > 0
    assert len(commits) >= 5  # a long build: many transactions
    assert busy > 0  # some host writes found the build holding the lock (else this test shows nothing)
    behind = [sum(1 for c in commits if start < c < end) for start, end in zip(waits, done, strict=True)]
    assert max(behind) <= 1, behind
    assert int(lines[-1].split()[1]) > 0  # the build stood back for waiting host writes


if __name__ == "__main__":
    _build(sys.argv[1], sys.argv[2])


def test_live_writes_never_checkpoint_or_sync_and_background_work_does(tmp_path: Path) -> None:
    """A live write pays neither a checkpoint nor an fsync; a background unit of work ends with both as due."""
    with SQLiteEngine(tmp_path / "memory.db") as engine:
        stats = engine._db.stats
        engine.store_many([turn(n, BUILT) for n in range(100)])  # a visible batch: background work
        assert stats.syncs == 1 and stats.checkpoints == 0  # the log is still small
        engine._db._checkpoint = _spy(engine._db._checkpoint, seen := [])  # type: ignore[method-assign]
        live = stats.live
        for n in range(20):
            engine.store_with(turn(n, HOST, tag=" live"), WriteOptions.accepted())
        assert stats.syncs == 1 and stats.live == live + 20
        assert seen == [connection.LIVE_CHECKPOINT_BYTES] * 20  # only past the live safety net
        engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
        assert stats.syncs == 2  # the build (and the drain before it) end with one fsync of the log
        assert set(seen[20:]) == {connection.CHECKPOINT_BYTES}


def _spy(fn: Callable[[sqlite3.Connection, int], None], seen: list[int]) -> Callable[[sqlite3.Connection, int], None]:
    def spy(conn: sqlite3.Connection, past: int) -> None:
        seen.append(past)
        fn(conn, past)

    return spy

"""Live writes before background ones (issue 12): a host's ``accepted`` write never waits behind a worker's
build for more than the one build transaction holding the lock when it arrived, and every background
transaction is small.

The worker runs in another process (this file run as a script) and re-takes the lock at once after each commit,
so only the gate lets a waiting host write in. Every background transaction increments ``meta.background_tx``
in the transaction, and a live write reads it when it starts waiting and once it holds the lock: the count
of build commits it waited behind comes from SQLite's own order of commits, never from a clock. How much one
background transaction does is counted in items (``WriteStats.holds``: items merged, stored, indexed, embedded,
beliefs published), against each kind's cap.
"""

from __future__ import annotations

import json
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
    Document,
    MemoryMeta,
    Namespace,
    ObservedActor,
    Reach,
    Role,
    Turn,
    WriteOptions,
)
from memory_core.engines.sqlite import SQLiteEngine, beliefs_store, connection, wal_header
from memory_core.engines.sqlite import engine as sqlite_engine
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


def _build(db: str, started: str) -> None:
    """The worker: one long build of ``BUILT`` re-taking the lock at once; prints how often it stood back."""
    with SQLiteEngine(db) as engine:
        real = engine._db._write

        def first_then_real(*args: object, **kwargs: object) -> object:
            out = real(*args, **kwargs)  # type: ignore[arg-type]
            Path(started).touch()
            return out

        engine._db._write = first_then_real  # type: ignore[method-assign]
        beliefs_store.build_scope(engine._db, ns_key(Namespace.agent(BUILT)), "conversation", gap_s=0.0)
        stats = engine._db.stats
        print(f"{stats.background} {stats.yields}")


def test_a_host_write_waits_for_at_most_one_build_transaction(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    with SQLiteEngine(db) as engine:
        items = [turn(n, BUILT) for n in range(1500)]
        for i in range(0, len(items), 100):
            engine.store_many(items[i : i + 100])
    started = tmp_path / "started"
    worker = subprocess.Popen(
        [sys.executable, __file__, str(db), str(started)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    with SQLiteEngine(db) as engine:
        while not started.exists():  # the build's first commit
            assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
            time.sleep(0.005)
        n = 0
        while worker.poll() is None:
            engine.store_with(turn(n, HOST, tag=" live"), WriteOptions.accepted())
            n += 1
            time.sleep(0.003)
        stats = engine._db.stats
    out, err = worker.communicate()
    assert worker.returncode == 0, err
    commits, yields = (int(x) for x in out.split())
    assert commits >= 5 and n > 0  # a long build: many transactions, host writes all along
    assert stats.live_busy > 0  # some host writes found the build holding the lock (else this shows nothing)
    assert stats.behind_most == 1 and stats.behind_more_than_one == 0
    assert yields > 0  # the build stood back for waiting host writes


def _mixed(db: str, started: str) -> None:
    """The worker: a long build, an ingestion (``visible``), indexing pending rows, embedding, each re-taking the
    lock at once; prints its lock holds per kind as JSON."""
    with SQLiteEngine(db) as engine:
        Path(started).touch()
        beliefs_store.build_scope(engine._db, ns_key(Namespace.agent(BUILT)), "conversation", gap_s=0.0)
        for start in range(0, 300, 100):
            engine.store_many([turn(n, "ingested") for n in range(start, start + 100)])
        for start in range(0, 200, 100):
            engine.store_many_with([turn(n, "later") for n in range(start, start + 100)], WriteOptions.accepted())
        engine.drain_pending()
        engine.embed_backlog(batch=64)
        print(json.dumps(engine._db.stats.hold_summary()))


def test_every_background_transaction_is_small_and_a_host_write_waits_for_one_at_most(tmp_path: Path) -> None:
    """Issue 12: builds, publishing, ingestion, indexing and embedding each write a bounded number of items per
    transaction (``connection.TX_BUDGET_S`` stops most sooner), so a live write waits behind one small one."""
    db = tmp_path / "memory.db"
    with SQLiteEngine(db) as engine:
        items = [turn(n, BUILT) for n in range(800)]
        for i in range(0, len(items), 100):
            engine.store_many(items[i : i + 100])
    started = tmp_path / "started"
    worker = subprocess.Popen(
        [sys.executable, __file__, str(db), str(started), "mixed"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MEMORY_CORE_EMBEDDER": "hash"},
    )
    with SQLiteEngine(db) as engine:
        while not started.exists():
            assert worker.poll() is None, worker.stderr.read() if worker.stderr else ""
            time.sleep(0.005)
        n = 0
        while worker.poll() is None:
            engine.store_with(turn(n, HOST, tag=" live"), WriteOptions.accepted())
            n += 1
            time.sleep(0.003)
        stats = engine._db.stats
    out, err = worker.communicate()
    assert worker.returncode == 0, err
    holds = json.loads(out.strip().splitlines()[-1])
    caps = {
        "build": beliefs_store.BUILD_TX_ITEMS,
        "visible": sqlite_engine.VISIBLE_CHUNK,
        "index": sqlite_engine.INDEX_CHUNK,
        "vectors": sqlite_engine.VECTORS_CHUNK,
    }
    for kind, cap in caps.items():
        assert 1 <= holds[kind]["most_items"] <= cap, (kind, holds[kind])
    # every item was written, in transactions of at most the cap each
    assert holds["visible"]["count"] >= 300 // sqlite_engine.VISIBLE_CHUNK
    assert holds["index"]["count"] >= 200 // sqlite_engine.INDEX_CHUNK
    assert holds["vectors"]["count"] >= 500 // sqlite_engine.VECTORS_CHUNK
    assert holds["build"]["count"] >= 800 // beliefs_store.BUILD_TX_ITEMS
    # a build publishes whenever PUBLISH_MAX beliefs changed: each commit applies at most that plus one item's
    assert holds["publish"]["count"] >= 2 and holds["publish"]["most_items"] < 2 * beliefs_store.PUBLISH_MAX
    assert n > 0 and stats.holds["live"].count == stats.live >= n and set(stats.holds) == {"live", "live.wait"}
    assert stats.behind_most <= 1 and stats.behind_more_than_one == 0


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


def test_a_checkpointed_log_is_checkpointed_again_only_once_it_grows_past_the_threshold(tmp_path: Path) -> None:
    """The log's file keeps its size after a checkpoint (nothing cuts it back under the write lock any more):
    measured by the file, every background commit after the log first passed ``CHECKPOINT_BYTES`` checkpointed
    again; measured by the current log's frames (``wal_header.end``), once per threshold of growth."""
    with SQLiteEngine(tmp_path / "memory.db") as engine:
        stats = engine._db.stats
        n = 0
        while stats.checkpoints == 0:  # background writes until the log passes the threshold
            engine.store_many([Document.of(f"page {n} " + f"line {n} of many words " * 4000, MemoryMeta())])
            n += 1
            assert n < 200
        wal = engine._db._wal
        size = wal.stat().st_size
        assert size > connection.CHECKPOINT_BYTES
        for i in range(30):
            engine.store_many([turn(i, BUILT, tag=" small")])
        assert stats.checkpoints == 1 and stats.background > 30
        assert stats.holds["restart"].restarts == 1  # the log restarted once, from the top of the file
        assert wal.stat().st_size == size  # never cut back: no truncation under the write lock
        assert wal_header.end(wal) < connection.CHECKPOINT_BYTES  # what the current log holds


def test_the_log_s_end_is_its_current_frames_not_the_file(tmp_path: Path) -> None:
    """``wal_header.end`` counts the frames SQLite itself counts in the log (``PRAGMA wal_checkpoint``'s second
    column), before and after a restart leaves the earlier log's frames behind them in the file."""
    path = tmp_path / "plain.db"
    wal = Path(f"{path}-wal")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        assert wal_header.end(wal) == 0  # no frames yet
        conn.execute("CREATE TABLE t (x BLOB)")
        page = conn.execute("PRAGMA page_size").fetchone()[0]

        def frames() -> int:
            end = wal_header.end(wal)
            assert (end - wal_header.HEADER) % (wal_header.FRAME_HEADER + page) == 0
            return (end - wal_header.HEADER) // (wal_header.FRAME_HEADER + page)

        for _ in range(40):
            conn.execute("INSERT INTO t VALUES (randomblob(3000))")
        busy, logged, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert busy == 0 and logged == copied == frames() > 40
        size = wal.stat().st_size
        for _ in range(3):  # the log restarts, and grows again over the earlier log's frames
            conn.execute("INSERT INTO t VALUES (randomblob(3000))")
            assert wal.stat().st_size == size
            assert conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1] == frames() < logged
        assert wal_header.end(tmp_path / "none-wal") == 0
    finally:
        conn.close()


def test_a_log_a_reader_keeps_from_restarting_is_checkpointed_once_per_threshold_of_growth(tmp_path: Path) -> None:
    """A reader holding an old snapshot keeps a checkpoint from copying the frames after it, so the log cannot
    restart and only grows: measured against its whole size, every background commit after it first passed
    ``CHECKPOINT_BYTES`` checkpointed again (two fsyncs each); measured by its growth, once per threshold."""
    db = tmp_path / "memory.db"
    with SQLiteEngine(db) as engine:
        engine.store_many([turn(0, BUILT)])
        reader = sqlite3.connect(db, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM items").fetchone()  # a snapshot the log's later frames are not in
        stats = engine._db.stats
        wal = engine._db._wal
        n = 0
        while wal.stat().st_size < 3 * connection.CHECKPOINT_BYTES + connection.CHECKPOINT_BYTES // 2:
            engine.store_many([Document.of(f"page {n} " + f"line {n} of many words " * 4000, MemoryMeta())])
            n += 1
            assert n < 600
        commits = stats.background
        reader.execute("COMMIT")
        reader.close()
        assert stats.checkpoints == 3  # at 4, 8 and 12 MB of growth
        assert commits > 3 * stats.checkpoints  # many background commits past the threshold checkpointed nothing
        holds = stats.holds
        assert "restart" not in holds and sum(h.restarts for h in holds.values()) == 0  # nothing was fully copied
        size = wal.stat().st_size
        while stats.checkpoints == 3:  # the reader is gone: the next checkpoint copies all of it
            engine.store_many([Document.of(f"page {n} " + f"line {n} of many words " * 4000, MemoryMeta())])
            n += 1
            assert n < 800
        assert holds["restart"].restarts == 1 and sum(h.restarts for h in holds.values()) == 1
        assert wal.stat().st_size >= size  # restarted from the top, never cut back under the write lock
        assert wal_header.end(wal) < connection.CHECKPOINT_BYTES // 8  # the new log holds one small commit


def test_every_hold_is_recorded_with_its_parts(tmp_path: Path) -> None:
    """``Holds`` keeps, for every transaction, its hold and the parts of it: its ``COMMIT``, its CPU time and its
    time preempted; the ``COMMIT`` is part of the hold."""
    with SQLiteEngine(tmp_path / "memory.db") as engine:
        engine.store_many([turn(n, BUILT) for n in range(20)])
        for n in range(5):
            engine.store_with(turn(n, HOST, tag=" live"), WriteOptions.accepted())
        holds = engine._db.stats.holds
    assert {"visible", "live"} <= set(holds)
    for kind in ("visible", "live"):
        h = holds[kind]
        assert h.count == len(h.recent) == len(h.commits) == len(h.cpu) == len(h.runnable) > 0
        assert all(0.0 < commit <= held for commit, held in zip(h.commits, h.recent, strict=True))
        assert all(cpu >= 0.0 and queued >= 0.0 for cpu, queued in zip(h.cpu, h.runnable, strict=True))
        assert {"commit_p99_ms", "cpu_p99_ms", "runnable_p99_ms", "blocked_p99_ms"} <= set(h.summary())


def test_a_fully_checkpointed_log_is_restarted_by_background_work_never_by_a_live_write(tmp_path: Path) -> None:
    """Issue 12: the first commit after a checkpoint copied the whole log restarts the log (writes its header
    again, fsyncs it, cuts the file back) under the write lock. A host's live write that came first paid it (12 ms
    at p99 while a worker checkpointed), so the background writer that checkpointed restarts the log itself at
    once, and a live write right after finds it restarted."""
    with SQLiteEngine(tmp_path / "memory.db") as engine:
        db = engine._db
        order: list[tuple[str, bool]] = []
        real = db._held

        def held(kind: str, seconds: float, items: int = 0, restarted: bool = False, *rest: float) -> None:
            order.append((kind, restarted))
            real(kind, seconds, items, restarted, *rest)

        db._held = held  # type: ignore[method-assign]
        n = 0
        while db.stats.checkpoints < 3:  # background batches past the threshold, a live write after each
            engine.store_many([Document.of(f"page {n} " + f"line {n} of many words " * 4000, MemoryMeta())])
            engine.store_with(turn(n, HOST, tag=" live"), WriteOptions.accepted())
            n += 1
            assert n < 400
        holds = db.stats.holds
    checkpoints = [i for i, (kind, _) in enumerate(order) if kind == "checkpoint"]
    assert len(checkpoints) == 3
    for i in checkpoints:  # each one copied the whole log (no reader held it) and the next commit restarted it
        assert order[i + 1] == ("restart", True), order[i - 2 : i + 3]
    assert holds["restart"].count == holds["restart"].restarts == 3
    assert holds["live"].count >= n and holds["live"].restarts == 0
    assert sum(h.restarts for h in holds.values()) == 3  # no other transaction restarted it


def _spy(fn: Callable[[sqlite3.Connection, int], bool], seen: list[int]) -> Callable[[sqlite3.Connection, int], bool]:
    def spy(conn: sqlite3.Connection, past: int) -> bool:
        seen.append(past)
        return fn(conn, past)

    return spy


if __name__ == "__main__":
    if sys.argv[3:] == ["mixed"]:
        _mixed(sys.argv[1], sys.argv[2])
    else:
        _build(sys.argv[1], sys.argv[2])

"""Two writer processes and one consolidating process on one file: no lock error reaches a caller, nothing
written is lost, and the beliefs equal a single-process build of the same items.

The processes are real (``subprocess``, this file run as a script); they exchange only JSON on stdout.
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

import pytest
from _data import DATA_DIR, require_data

from memory_core import (
    BeliefsRequest,
    ConsolidateRequest,
    Conversation,
    Document,
    EngineUnavailable,
    FetchRequest,
    ListRequest,
    MemoryMeta,
    Namespace,
    ObservedActor,
    Reach,
    Role,
    SourceKind,
    SourceRef,
    Turn,
    TurnRange,
    WriteOptions,
)
from memory_core.engines.sqlite import SQLiteEngine

LOCOMO = DATA_DIR / "locomo" / "locomo_dev.json"
TURNS = 240
BUILD = ConsolidateRequest(reach=Reach.subtree())


def _turns() -> list[Conversation]:
    """LoCoMo sample 0's first turns as the lifecycle logs them (one-turn items at the speaker's node)."""
    sample = json.loads(LOCOMO.read_text())[0]["conversation"]
    start = datetime(2023, 5, 8, tzinfo=UTC)
    out: list[Conversation] = []
    session = 1
    while f"session_{session}" in sample and len(out) < TURNS:
        for turn in sample[f"session_{session}"]:
            speaker = turn["speaker"]
            out.append(
                Conversation(
                    turns=(Turn(role=Role.USER, text=turn["text"]),),
                    meta=MemoryMeta(
                        namespace=Namespace.agent(speaker.lower()),
                        agent_id=speaker.lower(),
                        thread_id=f"s{session}",
                        turns=TurnRange(first=len(out), last=len(out)),
                        source=SourceRef(kind=SourceKind.CONVERSATION, id=f"s{session}"),
                        observed_at=start + timedelta(days=7 * session),
                        observed_actor=ObservedActor(id=f"user:{speaker.lower()}", name=speaker),
                    ),
                )
            )
        session += 1
    return out[:TURNS]


def _writer(db: str, index: int) -> dict[str, object]:
    errors: list[str] = []
    ids: list[str] = []
    mine = _turns()[index::2]
    with SQLiteEngine(db) as engine:
        for i in range(0, len(mine), 10):
            batch = mine[i : i + 10]
            try:
                if i % 30 == 0:
                    receipts = engine.store_many(batch)
                elif i % 30 == 10:
                    receipts = [engine.store_with(item, WriteOptions.accepted()) for item in batch]
                else:
                    receipts = [engine.store(item) for item in batch]
                    engine.fetch(FetchRequest(query=batch[0].turns[0].text[:60], limit=3))
                ids.extend(r.id for r in receipts)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
    return {"errors": errors, "ids": ids}


def _consolidator(db: str, done_flag: str) -> dict[str, object]:
    errors: list[str] = []
    builds = 0
    with SQLiteEngine(db) as engine:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            finished = Path(done_flag).exists()
            try:
                engine.consolidate(BUILD)
                engine.beliefs(BeliefsRequest(reach=Reach.subtree(), query="support group", limit=5))
                builds += 1
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            if finished:
                break
    return {"errors": errors, "builds": builds}


def _spawn(*args: str) -> subprocess.Popen[str]:
    # the child finds the data as this process did (the autouse fixture has stripped MEMORY_CORE_DATA_DIR)
    env = {**os.environ, "MEMORY_CORE_DATA_DIR": str(DATA_DIR)}
    return subprocess.Popen(
        [sys.executable, __file__, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def _beliefs(engine: SQLiteEngine) -> set[tuple[str, str, float | None, tuple[str, ...]]]:
    hits = engine.beliefs(BeliefsRequest(reach=Reach.subtree(), limit=1000))
    return {(h.id, h.text, h.confidence, h.derived_from) for h in hits}


@pytest.mark.slow
def test_two_writers_and_a_consolidator_share_one_file(tmp_path: Path) -> None:
    require_data("locomo/locomo_dev.json")
    db = str(tmp_path / "memory.db")
    done = tmp_path / "writers-done"
    SQLiteEngine(db).close()
    consolidator = _spawn("consolidate", db, str(done))
    writers = [_spawn("write", db, str(i)) for i in range(2)]
    results = [_result(w) for w in writers]
    done.touch()
    built = _result(consolidator)

    errors = [e for r in [*results, built] for e in r["errors"]]  # type: ignore[attr-defined]
    assert errors == []
    assert int(str(built["builds"])) >= 2  # at least one build ran while the writers wrote
    written = {i for r in results for i in r["ids"]}  # type: ignore[attr-defined]
    with SQLiteEngine(db) as engine:
        stored = engine.export(ListRequest(limit=1000))
        assert stored.next_cursor is None
        assert {e.id for e in stored.items} == written == {t.id for t in _turns()}
        shared = _beliefs(engine)
    with SQLiteEngine(tmp_path / "single.db") as single:
        items = [e.item for e in stored.items]
        for i in range(0, len(items), 100):
            single.store_many(items[i : i + 100])
        single.consolidate(BUILD)
        assert _beliefs(single) == shared
    assert len(shared) > 20


def test_a_held_write_lock_makes_writes_unavailable_and_reads_still_answer(tmp_path: Path) -> None:
    """Another connection holds the write lock (``BEGIN IMMEDIATE``) through every retry: each write is an
    ``EngineUnavailable`` saying so in memory-core's words, changes nothing, and reads keep answering."""
    path = tmp_path / "memory.db"
    first = _doc("walrus colony on the north beach")
    lagging = _doc("walrus pups stored accepted")
    with SQLiteEngine(path, busy_timeout_ms=0) as engine:  # no busy wait inside SQLite: only the retry loop
        engine.store(first)
        engine.store_with(lagging, WriteOptions.accepted())
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            writes: dict[str, Callable[[], object]] = {
                "store": lambda: engine.store(_doc("second")),
                "store_with accepted": lambda: engine.store_with(_doc("third"), WriteOptions.accepted()),
                "store_many": lambda: engine.store_many([_doc("fourth"), _doc("fifth")]),
                "forget": lambda: engine.forget({"ids": [first.id]}),
                "consolidate": lambda: engine.consolidate(BUILD),
            }
            for name, write in writes.items():
                with pytest.raises(EngineUnavailable) as caught:
                    write()
                assert str(path) in str(caught.value) and "locked by another writer" in str(caught.value), name
                assert "database is locked" not in str(caught.value), name
            hits = engine.fetch(FetchRequest(query="walrus colony", limit=5)).hits
            assert [h.id for h in hits] == [first.id]  # the accepted item waits: folding it needs the lock
            assert [h.id for h in engine.list(ListRequest()).items] == [first.id, lagging.id]
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert [h.id for h in engine.list(ListRequest()).items] == [first.id, lagging.id]
        assert not engine.store(_doc("second")).replayed


def _doc(text: str) -> Document:
    return Document.of(text, MemoryMeta())


if __name__ == "__main__":
    role, *rest = sys.argv[1:]
    outcome = _writer(rest[0], int(rest[1])) if role == "write" else _consolidator(rest[0], rest[1])
    print(json.dumps(outcome))

"""Durability of the live turn (issue 12, ``docs/live-turn.md``): a host killed with ``kill -9`` right after
``post_turn`` returns loses nothing it was told was stored.

``accepted`` writes commit with ``synchronous = NORMAL`` in WAL mode: the commit is in the write-ahead log (the
OS's page cache) when ``post_turn`` returns, so the death of the process cannot take it back (only a power loss
or an OS crash can, before the next synced commit or checkpoint). The host is a real process (this file run as
a script); it prints each receipt's id as ``post_turn`` returns it and is killed at once, mid-stream.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from memory_core import GetRequest, Reach
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.layout import MemoryLayout

KILL_AFTER = 25
"""Receipts the parent reads before it kills the host (the host keeps writing until then)."""


def _host(db: str) -> None:
    engine = SQLiteEngine(db)
    memory = AgentMemory(engine, MemoryLayout(), "ann")
    n = 0
    while True:  # until killed
        report = memory.post_turn({"thread_id": "t1", "turn_index": n, "assistant_text": f"Reply number {n}."})
        sys.stdout.write(f"{report.receipt.id}\n")
        sys.stdout.flush()
        n += 1


def test_a_host_killed_right_after_post_turn_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    SQLiteEngine(db).close()
    host = subprocess.Popen(
        [sys.executable, __file__, str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    acknowledged: list[str] = []
    try:
        assert host.stdout is not None
        while len(acknowledged) < KILL_AFTER:
            line = host.stdout.readline()
            assert line, host.stderr.read() if host.stderr else "the host exited"
            acknowledged.append(line.strip())
        os.kill(host.pid, signal.SIGKILL)
    finally:
        host.kill()
        host.wait(timeout=30)
    assert host.returncode == -signal.SIGKILL
    with SQLiteEngine(db) as engine:
        found = engine.get(GetRequest(ids=acknowledged, reach=Reach.subtree()))
        assert [h.id for h in found] == acknowledged
        assert engine.stats()["items"] >= KILL_AFTER


if __name__ == "__main__":
    _host(sys.argv[1])

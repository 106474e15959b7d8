"""Memory as a log (issue 19): what the log costs the live turn, what a past read costs, how big the log is.

Run ``python -m bench.log_bench`` (100k stored turns) or ``--quick`` (2k). One file is filled with LoCoMo turns
(as ``sqlite_bench``), its beliefs built for the replayed agent, and then, in the same run:

* ``store_with`` (``accepted``, one new turn per call) and ``pre_turn`` p50/p99 **with the log** against the
  same calls **without it**: the same engine with the log's statements switched off (no ``put`` record on a
  write; no status filter or status on a read: what the engine did before issue 19). Calls alternate between
  the two, so both see the same file and load;
* ``as_of`` read p50/p99: ``as_of(lsn).fetch`` for an LSN 100 records back (retractions and archive moves
  since), against ``fetch`` now on the same file;
* log size per item: the bytes of ``log`` and its index (SQLite's ``dbstat``) over the memories held.

The lead takes final figures on a quiet machine; ``--quick`` checks the code.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.common import Row, paired, percentile, print_table
from bench.sqlite_bench import _fill, _locomo, _turns
from memory_core import ConsolidateRequest, FetchRequest, Reach
from memory_core.engines.sqlite import SQLiteEngine, log, log_view
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.memory_log import Tier

__all__ = ["run"]

STANDARD = 100_000
QUICK = 2_000
CHANGES = 100
"""Records written after the LSN an ``as_of`` read is taken at (half retractions, half moves)."""


@contextmanager
def _without_log() -> Iterator[None]:
    """The engine as before the log: no ``put`` record, no status filter or status on reads."""
    saved = (log.put, log_view.served_mask, log_view.annotate)
    log.put = lambda *_a, **_k: None  # type: ignore[assignment]
    log_view.served_mask = lambda *_a, **_k: None  # type: ignore[assignment]
    log_view.annotate = lambda _conn, hits, _past: list(hits)  # type: ignore[assignment]
    try:
        yield
    finally:
        log.put, log_view.served_mask, log_view.annotate = saved  # type: ignore[assignment]


def _pair_rows(name: str, setup: str, with_log: list[float], without: list[float]) -> list[Row]:
    return [
        Row(f"{name} p{q}", setup, percentile(with_log, q), "ms", percentile(without, q), "without the log")
        for q in (50, 99)
    ]


def _log_bytes(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT sum(pgsize) FROM dbstat WHERE name IN ('log', 'log_id')").fetchone()[0] or 0)
    finally:
        conn.close()


def _rows(tmp: Path, size: int, calls: int) -> list[Row]:
    turns, questions = _locomo()
    path = tmp / f"log-{size}.db"
    setup = f"sqlite, {size:,} turns"
    rows: list[Row] = []
    with SQLiteEngine(path) as engine:
        _fill(engine, _turns(turns, size))
        agent = f"{turns[0].speaker.lower()}-0"
        engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
        fresh = _turns(turns, 2 * calls, tag="new")
        items = list(fresh)
        stored, plain = paired(lambda i: engine.store_with(items[i], {"wait": "accepted"}), calls, _without_log)
        rows += _pair_rows("store_with", f"{setup}, accepted", stored, plain)
        memory = AgentMemory(engine, MemoryLayout(), agent)

        def pre_turn(i: int) -> None:
            memory.pre_turn({"thread_id": "bench", "turn_index": i, "user_text": questions[i % len(questions)]})

        pre_turn(0)  # the first call loads the model and the indexes: not a live turn's cost
        with _without_log():
            pre_turn(0)
        with_log, without = paired(pre_turn, calls, _without_log)
        rows += _pair_rows("pre_turn", setup, with_log, without)

        held = [h.id for h in engine.list({"limit": CHANGES}).items]
        mark = engine.current_lsn()
        for n, item_id in enumerate(held):
            if n % 2:
                engine.retract([item_id], "bench")
            else:
                engine.move([item_id], Tier.ARCHIVE, "bench")
        past_ms: list[float] = []
        now_ms: list[float] = []
        for i in range(calls):
            request = FetchRequest(query=questions[i % len(questions)], limit=10)
            start = time.perf_counter()
            engine.as_of(mark).fetch(request)
            past_ms.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            engine.fetch(request)
            now_ms.append((time.perf_counter() - start) * 1000)
        for q in (50, 99):
            rows.append(
                Row(
                    f"as_of fetch p{q}",
                    f"{setup}, {CHANGES} changes since",
                    percentile(past_ms, q),
                    "ms",
                    percentile(now_ms, q),
                    "fetch now",
                )
            )
        memories = len(engine._db.run(log.materialised))
        size_bytes = _log_bytes(path)
    rows.append(Row("log size per memory", f"{setup}, {memories:,} memories", size_bytes / memories, "bytes"))
    return rows


def run(quick: bool = False, size: int | None = None, calls: int | None = None) -> list[Row]:
    """The log's rows (``bench.run`` suite)."""
    with tempfile.TemporaryDirectory(prefix="log-bench-") as tmp:
        return _rows(Path(tmp), size or (QUICK if quick else STANDARD), calls or (20 if quick else 200))


def main(argv: list[str] | None = None) -> int:
    """Print the rows as one table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print_table(run(quick=args.quick), title="memory as a log")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

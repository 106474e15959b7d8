"""Memory as a log on PostgreSQL (issue 19): what the log costs writes (alone and concurrent) and reads.

Run ``python -m bench.postgres_log_bench`` (or ``--quick``); needs a PostgreSQL server
(``MEMORY_CORE_BENCH_POSTGRES``, as ``bench.postgres_bench``), on a fresh database dropped afterwards. In the
same run, **with the log** against **without it** (the engine's log statements switched off: no records, no
head row, no status filter or status on reads: what the engine did before issue 19), alternating so both see
the same database and load:

* ``store`` p50/p99, one writer, one new document per call;
* ``store`` throughput of ``WRITERS`` threads writing at once (each its own namespace, so nothing but the log
  serialises them): the cost of the head row's lock, which makes LSN order the commit order;
* ``fetch`` p50/p99 (hybrid, 10 hits);
* ``as_of`` fetch p50/p99 at an LSN ``CHANGES`` records back, against ``fetch`` now;
* log size per memory: ``log`` with its indexes over the memories held.

The lead takes final figures on a quiet machine; ``--quick`` checks the code.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from bench.common import Row, paired, percentile, print_table
from bench.postgres_bench import _database, _drop
from memory_core import Document, FetchRequest, MemoryMeta, Namespace
from memory_core.engines.postgres import PostgresEngine, log, log_view, log_writes
from memory_core.memory_log import Tier

__all__ = ["run"]

WRITERS: Final = 4
CHANGES: Final = 100
_OFF_STORED: Final = (
    "_want AS (SELECT * FROM unnest(%s::text[], %s::text[]) AS w(id, tier)), "
    "restored AS (SELECT id, tier FROM _want WHERE false)"
)
"""``log_writes.STORED`` without the log: the same parameters, no restore, no records."""


@contextmanager
def _without_log() -> Iterator[None]:
    saved = (log_writes.STORED, log_view.served, log_view.annotate)
    log_writes.STORED = _OFF_STORED  # type: ignore[misc]
    log_view.served = lambda *_a, **_k: ("true", [])  # type: ignore[assignment]
    log_view.annotate = lambda hits, _state, _past: list(hits)  # type: ignore[assignment]
    try:
        yield
    finally:
        log_writes.STORED, log_view.served, log_view.annotate = saved  # type: ignore[misc]


def _concurrent(engine: PostgresEngine, round_: int, per_writer: int) -> float:
    """Stores per second of ``WRITERS`` threads storing ``per_writer`` documents each."""

    def write(w: int) -> None:
        meta = MemoryMeta(namespace=Namespace.parse(f"agent:w{w}"))
        for n in range(per_writer):
            engine.store(Document.of(f"round {round_} writer {w} note {n} about kayaks", meta))

    threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return WRITERS * per_writer / (time.perf_counter() - start)


def _rows(url: str, size: int, calls: int) -> list[Row]:
    setup = f"postgresql, {size:,} documents"
    rows: list[Row] = []
    with PostgresEngine(url) as engine:
        for start in range(0, size, 100):
            engine.store_many(
                [
                    Document.of(f"passage {n} about kayaks and rivers {n % 97}", MemoryMeta())
                    for n in range(start, start + 100)
                ]
            )
        stored, plain = paired(
            lambda i: engine.store(Document.of(f"fresh note {i} about canoes", MemoryMeta())), calls, _without_log
        )
        rows += [
            Row(
                f"store p{q}",
                f"{setup}, 1 writer",
                percentile(stored, q),
                "ms",
                percentile(plain, q),
                "without the log",
            )
            for q in (50, 99)
        ]
        per_writer = max(5, calls // 2)
        on: list[float] = []
        off: list[float] = []
        for r in range(4):
            if r % 2 == 0:
                on.append(_concurrent(engine, r, per_writer))
            else:
                with _without_log():
                    off.append(_concurrent(engine, r, per_writer))
        rows.append(
            Row(
                "store throughput",
                f"{setup}, {WRITERS} writers",
                sum(on) / len(on),
                "stores/s",
                sum(off) / len(off),
                "without the log",
            )
        )
        request = FetchRequest(query="kayaks rivers 42", limit=10)
        engine.fetch(request)
        read, unread = paired(lambda _i: engine.fetch(request), calls, _without_log)
        rows += [
            Row(f"fetch p{q}", setup, percentile(read, q), "ms", percentile(unread, q), "without the log")
            for q in (50, 99)
        ]
        held = [h.id for h in engine.list({"limit": CHANGES}).items]
        mark = engine.current_lsn()
        for n, item_id in enumerate(held):
            if n % 2:
                engine.retract([item_id], "bench")
            else:
                engine.move([item_id], Tier.ARCHIVE, "bench")
        past_ms: list[float] = []
        now_ms: list[float] = []
        for _ in range(calls):
            start = time.perf_counter()
            engine.as_of(mark).fetch(request)
            past_ms.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            engine.fetch(request)
            now_ms.append((time.perf_counter() - start) * 1000)
        for q in (50, 99):
            past_q, now_q = percentile(past_ms, q), percentile(now_ms, q)
            rows.append(Row(f"as_of fetch p{q}", f"{setup}, {CHANGES} changes since", past_q, "ms", now_q, "fetch now"))
        memories = len(engine._run(log.materialised))
        got = engine._run(lambda c: c.execute("SELECT pg_total_relation_size('memory_core.log')").fetchone())
        size_bytes = int(got[0]) if got else 0
    rows.append(Row("log size per memory", f"{setup}, {memories:,} memories", size_bytes / memories, "bytes"))
    return rows


def run(quick: bool = False, size: int | None = None, calls: int | None = None) -> list[Row]:
    """The rows (``bench.run`` suite), on a fresh database dropped afterwards."""
    name, url = _database()
    try:
        return _rows(url, size or (2_000 if quick else 20_000), calls or (20 if quick else 200))
    finally:
        _drop(name)


def main(argv: list[str] | None = None) -> int:
    """Print the rows as one table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    print_table(run(quick=args.quick), title="memory as a log on PostgreSQL")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""PostgreSQL engine benchmarks beside SQLite in the same run: ``pre_turn`` by store size, ``store_with``, and
the 8-process concurrency run.

Run ``python -m bench.postgres_bench`` (1k/10k/100k turns) or ``--quick``. The server is
``MEMORY_CORE_BENCH_POSTGRES`` (an admin URL; default ``postgresql://postgres@127.0.0.1:5432/postgres``); each
run creates a database ``postgres_bench_<random>`` and drops it.

* ``pre_turn`` and ``post_turn`` p50/p99 (ms) on PostgreSQL with N stored turns, beside SQLite with the same
  turns (the same workload as ``bench.sqlite_bench``), and ``store_with`` accepted p50/p99 (ms) at each N, one
  new turn per call. Full: 1k, 10k and 100k turns; ``--quick``: 1k and 10k.
* ``store_with`` accepted p50/p99 (ms) against SQLite's with ``synchronous=full`` (durable, as PostgreSQL).
* concurrency: 4 host processes replaying turns (``pre_turn`` + ``post_turn``), 2 ingesting documents, 2
  building beliefs, on one database: host turns per second, and errors (must be 0).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench.common import Row, machine, percentile, print_table
from bench.sqlite_bench import FULL, QUICK, Sizes, _fill, _locomo, _pre_turn_ms, _turns
from memory_core import ConsolidateRequest, Conversation, Document, MemoryMeta, Namespace, Reach, WriteOptions
from memory_core.engine import MemoryEngine
from memory_core.engines import open_engine
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.layout import MemoryLayout

PG_QUICK = replace(QUICK, pre_turn=(1_000, 10_000))
"""``--quick``: 1k and 10k turns (100k in the full run only)."""

ADMIN = os.environ.get("MEMORY_CORE_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")


def _database() -> tuple[str, str]:
    import psycopg

    name = f"postgres_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type,unused-ignore]
    parts = urlsplit(ADMIN)
    return name, urlunsplit((parts.scheme, parts.netloc, f"/{name}", "", ""))


def _drop(name: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type,unused-ignore]


def _pre_turn_rows(url: str, tmp: Path, size: Sizes) -> list[Row]:
    turns, questions = _locomo()
    agent = f"{turns[0].speaker.lower()}-0"
    rows: list[Row] = []
    engines: dict[str, MemoryEngine] = {
        "postgresql": open_engine(url),
        "sqlite": SQLiteEngine(tmp / "pre_turn.db", synchronous="normal"),
    }
    held = 0
    try:
        for n in size.pre_turn:
            timings: dict[str, list[float]] = {}
            posts: dict[str, list[float]] = {}
            writes: dict[str, list[float]] = {}
            for name, engine in engines.items():
                _fill(engine, (t for i, t in enumerate(_turns(turns, n)) if i >= held))
                _pre_turn_ms(engine, questions, 3, agent)
                timings[name] = _pre_turn_ms(engine, questions, size.calls, agent)
                posts[name] = _post_turn_ms(engine, size.calls, agent, f"post-{n}")
                writes[name] = _store_ms(engine, _turns(turns, size.store_calls, tag=f"w{n}-"))
            held = n
            for q in (50, 99):
                rows.append(
                    Row(f"pre_turn p{q}", f"postgresql, {n:,} turns", percentile(timings["postgresql"], q), "ms",
                        percentile(timings["sqlite"], q), f"sqlite, {n:,} turns")
                )  # fmt: skip
            for q in (50, 99):
                rows.append(
                    Row(f"post_turn p{q}", f"postgresql, {n:,} turns", percentile(posts["postgresql"], q), "ms",
                        percentile(posts["sqlite"], q), f"sqlite, {n:,} turns")
                )  # fmt: skip
            for q in (50, 99):
                rows.append(
                    Row(f"store_with p{q}", f"postgresql accepted, {n:,} turns", percentile(writes["postgresql"], q),
                        "ms", percentile(writes["sqlite"], q), f"sqlite accepted, {n:,} turns",
                        "sqlite synchronous=normal here")
                )  # fmt: skip
    finally:
        for engine in engines.values():
            engine.close()
    return rows


def _post_turn_ms(engine: MemoryEngine, calls: int, agent: str, thread: str) -> list[float]:
    """``post_turn`` times (ms): the reply logged as an accepted write (a build job every N turns is returned,
    not run, as a host hands it to the queue)."""
    memory = AgentMemory(engine, MemoryLayout(), agent)
    samples: list[float] = []
    for i in range(calls):
        start = time.perf_counter()
        memory.post_turn({"thread_id": thread, "turn_index": i, "assistant_text": f"reply {i} about the kayak trip"})
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def _store_ms(engine: MemoryEngine, items: Iterator[Conversation]) -> list[float]:
    samples: list[float] = []
    for item in items:
        start = time.perf_counter()
        engine.store_with(item, WriteOptions.accepted())
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def _store_rows(url: str, tmp: Path, size: Sizes) -> list[Row]:
    turns, _ = _locomo()
    out: dict[str, list[float]] = {}
    for name, engine in (("postgresql", open_engine(url)), ("sqlite", SQLiteEngine(tmp / "store.db"))):
        with engine:
            _fill(engine, _turns(turns, size.store_held, tag="held-"))
            samples: list[float] = []
            for item in _turns(turns, size.store_calls, tag="accepted-"):
                start = time.perf_counter()
                engine.store_with(item, WriteOptions.accepted())
                samples.append((time.perf_counter() - start) * 1000)
            out[name] = samples
    return [
        Row(f"store_with p{q}", f"postgresql accepted, {size.store_held:,} held", percentile(out["postgresql"], q),
            "ms", percentile(out["sqlite"], q), "sqlite accepted (synchronous=full)")
        for q in (50, 99)
    ]  # fmt: skip


def _host(url: str, index: int, turns: int) -> dict[str, Any]:
    _, questions = _locomo()
    errors = 0
    with open_engine(url) as engine:
        memory = AgentMemory(engine, MemoryLayout(), f"host-{index}")
        started = time.perf_counter()
        for i in range(turns):
            try:
                memory.pre_turn({"thread_id": "t", "turn_index": 2 * i, "user_text": questions[i % len(questions)]})
                memory.post_turn({"thread_id": "t", "turn_index": 2 * i + 1, "assistant_text": f"answer {i}"})
            except Exception:
                errors += 1
        elapsed = time.perf_counter() - started
    return {"turns": turns, "seconds": elapsed, "errors": errors}


def _ingest(url: str, index: int, batches: int) -> dict[str, Any]:
    errors = 0
    with open_engine(url) as engine:
        for b in range(batches):
            docs = [Document.of(f"handbook {index}-{b}-{k}: notes on kayaks", MemoryMeta(namespace=Namespace.parse(
                f"team:bench/source:handbook-{index}"))) for k in range(20)]  # fmt: skip
            try:
                engine.store_many(docs)
            except Exception:
                errors += 1
    return {"turns": 0, "seconds": 0.0, "errors": errors}


def _build(url: str, rounds: int) -> dict[str, Any]:
    errors = 0
    with open_engine(url) as engine:
        for _ in range(rounds):
            try:
                engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
            except Exception:
                errors += 1
    return {"turns": 0, "seconds": 0.0, "errors": errors}


def _concurrency_rows(url: str, quick: bool) -> list[Row]:
    turns, batches, rounds = (20, 5, 5) if quick else (200, 50, 40)
    ctx = multiprocessing.get_context("spawn")
    started = time.perf_counter()
    with ctx.Pool(8) as pool:
        jobs = [pool.apply_async(_host, (url, i, turns)) for i in range(4)]
        jobs += [pool.apply_async(_ingest, (url, i, batches)) for i in range(2)]
        jobs += [pool.apply_async(_build, (url, rounds)) for _ in range(2)]
        results = [j.get() for j in jobs]
    wall = time.perf_counter() - started
    done = sum(r["turns"] for r in results)
    errors = sum(r["errors"] for r in results)
    return [
        Row("8 processes: host turns/s", "postgresql, 4 hosts + 2 ingest + 2 build", done / wall, "turns/s", None, "",
            f"{errors} errors"),
    ]  # fmt: skip


def run(quick: bool = False, sizes: Sizes | None = None) -> list[Row]:
    """Every PostgreSQL benchmark row, beside SQLite (``quick``: ``PG_QUICK`` sizes).

    Raises:
        psycopg.OperationalError: no server at ``MEMORY_CORE_BENCH_POSTGRES``.
        FileNotFoundError: no LoCoMo file under ``MEMORY_CORE_DATA_DIR``.
    """
    size = sizes or (PG_QUICK if quick else FULL)
    tmp = Path(tempfile.mkdtemp(prefix="postgres-bench-"))
    made: list[str] = []
    try:
        name, url = _database()
        made.append(name)
        rows = _pre_turn_rows(url, tmp, size)
        name, url = _database()
        made.append(name)
        rows += _store_rows(url, tmp, size)
        name, url = _database()
        made.append(name)
        return rows + _concurrency_rows(url, quick)
    finally:
        for name in made:
            _drop(name)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, about a minute")
    args = parser.parse_args()
    print_table(run(quick=args.quick), title="PostgreSQL engine")
    print(f"\nmachine: {machine()}")

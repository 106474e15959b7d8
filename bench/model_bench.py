"""The ranking model's costs (issue 14): ``pre_turn`` with MiniLM beside ``hash``, the embedding job, bytes per item.

Run ``python -m bench.model_bench`` (10k and 100k stored turns, a few minutes on a busy 2-core machine) or
``--quick`` (1k/3k). At each size one **lexical store** is filled once: filler turns, LoCoMo replicated across
agents (``sqlite_bench._turns``), stored through the engine up to ``Sizes.bulk_above`` turns and by
``bulk_fill`` above it (a seed of ``bulk_fill.SEED`` turns through the engine, the rest copies of its rows in
SQL). It is copied twice, and every item of each copy gets the vectors of one embedder — MiniLM
(``minilm``, the default ``EMBEDDER``) in one, ``hash`` (``MEMORY_CORE_EMBEDDER=hash``, the test double) in the
other — by ``shared_vectors``: the filler repeats LoCoMo's turns, so each distinct text is encoded once and its
vectors are written for every copy of it through ``vectors.write``, the rows the embedding job writes. So both
stores hold the same items and every item is embedded by its model; only the vectors differ.

In the same run:

* **pre_turn p50/p99, MiniLM ÷ hash**: one agent's ``pre_turn`` (a LoCoMo question, each question new to both
  engines, so each call encodes its query) on the MiniLM store and on the hash store, call by call, the pair's
  order alternating (``common.paired``'s scheme);
* **hybrid fetch p50/p99, MiniLM ÷ hash**: one ``fetch`` (hybrid, limit 10, the whole store) paired the same way:
  the query's encoding and the ranking alone (issue 14 §6), without the rest of a pack;
* **hybrid fetch CPU p50/p99, MiniLM ÷ hash**: the same calls' CPU time on the fetching thread
  (``time.thread_time``): the ranking's own work (candidates, BM25, the pooled and window sources, late
  interaction), without the query's encoding (the encoder thread) and without the time other processes take the
  core, so it moves with the store's size, not with the machine's load;
* **bytes per item**: ``length(pooled) + length(tokens)`` of every ``item_vectors`` row (mean = SUM / rows,
  p50, max), MiniLM beside hash;
* **embedding throughput on a worker**: items/s of ``embed_items`` jobs run through ``workers.execution.execute``
  (the worker's flow and its handler, ``workers.handlers.run_embed``) on a copy of the first size's store whose
  oldest items lost their vectors, MiniLM and hash jobs alternating.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.bulk_fill import SEED, bulk_fill
from bench.common import Row, machine, percentile, print_table
from bench.sqlite_bench import _fill, _locomo, _turns
from memory_core import FetchMode, FetchRequest
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.engines.sqlite import vectors as stored_vectors
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.retrieval.embedder import F32, Embedder, Encoded, embedder_for
from memory_core.settings import Settings
from workers.coordination import SqliteCoordination
from workers.dead_letters import SqliteDeadLetters
from workers.execution import Delivery, Runtime, Verdict, execute
from workers.handlers import EmbedItems
from workers.kinds import JOB_KINDS

__all__ = ["QUICK", "STANDARD", "Sizes", "item_bytes", "run", "shared_vectors"]

LAYOUT = MemoryLayout()
ENCODE_BATCH = 256
"""Distinct texts encoded per ``encode`` call by ``shared_vectors``."""
WRITE_CHUNK = 5_000
"""Vector rows per transaction of ``shared_vectors``."""


@dataclass(frozen=True)
class Sizes:
    """Stored turns per size, timed ``pre_turn`` pairs per size, items the embedding jobs encode per model."""

    stored: tuple[int, ...]
    calls: int
    embed: int
    bulk_above: int = SEED


QUICK = Sizes((1_000, 3_000), 30, 64)
STANDARD = Sizes((10_000, 100_000), 150, 512)


def shared_vectors(path: Path, model: Embedder, cache: dict[str, tuple[F32, F32]]) -> tuple[int, int]:
    """Write ``model``'s vectors for every item of the file at ``path`` without them; (rows written, texts encoded).

    Each distinct text is encoded once (``cache`` keeps its pooled and token vectors across calls, so pass one
    cache per model) and its vectors are written for every item holding it by ``vectors.write``, the rows the
    embedding job writes (``prev``, ``n`` included). Bench-only: a filler of repeated texts embedded in minutes.
    """
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")
        rows = stored_vectors.unembedded(conn, model.name, limit=-1)
        new = list(dict.fromkeys(text for _, text in rows if text not in cache))
        for start in range(0, len(new), ENCODE_BATCH):
            batch = new[start : start + ENCODE_BATCH]
            encoded = model.encode(batch)
            for i, text in enumerate(batch):
                cache[text] = (encoded.pooled[i], encoded.tokens[i])
        written = 0
        for start in range(0, len(rows), WRITE_CHUNK):
            chunk = rows[start : start + WRITE_CHUNK]
            pooled = np.stack([cache[text][0] for _, text in chunk]).astype(np.float32)
            encoded = Encoded(pooled=pooled, tokens=[cache[text][1] for _, text in chunk])
            conn.execute("BEGIN IMMEDIATE")
            written += stored_vectors.write(conn, model.name, [seq for seq, _ in chunk], encoded)
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return written, len(new)
    finally:
        conn.close()


def item_bytes(path: Path, model: str) -> list[int]:
    """Bytes each ``item_vectors`` row of ``model`` stores: ``length(pooled) + length(tokens)``."""
    conn = sqlite3.connect(path)
    try:
        sql = "SELECT length(pooled) + length(tokens) FROM item_vectors WHERE model = ?"
        return [int(r[0]) for r in conn.execute(sql, (model,))]
    finally:
        conn.close()


def _lexical(path: Path, stored: int, bulk_above: int, hashed: Embedder) -> str:
    """Fill ``path`` with ``stored`` filler turns; how (for the rows' notes)."""
    turns, _ = _locomo()
    engine = SQLiteEngine(path, embedder=hashed)  # storing never runs a model (issue 14 §3)
    filling = _turns(turns, stored)
    if stored > bulk_above:
        seed = bulk_fill(engine, path, filling, stored)
        return f"{seed:,} turns stored through the engine, the rest copies of their rows in SQL (bench.bulk_fill)"
    _fill(engine, filling)
    engine.close()
    return "every turn stored through the engine"


def _alternating(
    calls: tuple[Callable[[int, str], object], Callable[[int, str], object]],
    questions: list[str],
    n: int,
    cpu: tuple[list[float], list[float]] | None = None,
) -> tuple[list[float], list[float]]:
    """``n`` pairs of timed calls (ms), the pair's order alternating; call ``i`` asks ``questions[i]`` (cycled).

    ``cpu``, when given, receives each call's CPU time on the calling thread (ms, ``time.thread_time``).
    """
    samples: tuple[list[float], list[float]] = ([], [])
    for i in range(n):
        text = questions[i % max(1, len(questions) - 3)]
        for side in (0, 1) if i % 2 == 0 else (1, 0):
            start, used = time.perf_counter(), time.thread_time()
            calls[side](i, text)
            samples[side].append((time.perf_counter() - start) * 1000)
            if cpu is not None:
                cpu[side].append((time.thread_time() - used) * 1000)
    return samples


def _paired_pre_turn(
    engines: tuple[SQLiteEngine, SQLiteEngine], agent: str, questions: list[str], calls: int
) -> tuple[list[float], list[float], list[float]]:
    """``pre_turn`` on each engine, call by call, the pair's order alternating; ms each, and encodes per call."""
    memories = [AgentMemory(engine, LAYOUT, agent) for engine in engines]
    for k in range(3):  # warm: questions the timed calls never ask
        for memory in memories:
            memory.pre_turn({"thread_id": "warm", "turn_index": k, "user_text": questions[-1 - k]})
    encodes = [engine.query_encodes for engine in engines]
    first, second = memories
    on, off = _alternating(
        (
            lambda i, text: first.pre_turn({"thread_id": "bench", "turn_index": i, "user_text": text}),
            lambda i, text: second.pre_turn({"thread_id": "bench", "turn_index": i, "user_text": text}),
        ),
        questions,
        calls,
    )
    per_call = [(engine.query_encodes - before) / calls for engine, before in zip(engines, encodes, strict=True)]
    return on, off, per_call


def _paired_fetch(
    engines: tuple[SQLiteEngine, SQLiteEngine],
    questions: list[str],
    calls: int,
    cpu: tuple[list[float], list[float]] | None = None,
) -> tuple[list[float], list[float]]:
    """One hybrid ``fetch`` (limit 10, the whole store) on each engine, paired as ``_paired_pre_turn``; ms each.

    The query's encoding and the ranking (candidates, late interaction, fusion) with nothing else of a pack.
    ``cpu`` receives each call's CPU time on the fetching thread (``_alternating``).
    """
    first, second = engines
    for engine in engines:  # warm: a question the timed calls never ask
        engine.fetch(FetchRequest(query=questions[-1], mode=FetchMode.HYBRID, limit=10))
    return _alternating(
        (
            lambda i, text: first.fetch(FetchRequest(query=text, mode=FetchMode.HYBRID, limit=10)),
            lambda i, text: second.fetch(FetchRequest(query=text, mode=FetchMode.HYBRID, limit=10)),
        ),
        questions,
        calls,
        cpu,
    )


class _Submitted:
    """Stands in for ``JobQueue`` inside the bench's worker: records the follow-up jobs a handler submits."""

    def __init__(self) -> None:
        self.jobs: list[Any] = []

    def submit(self, job: Any, *, job_id: str | None = None) -> str:
        self.jobs.append(JOB_KINDS.parse(job))
        return f"follow-{len(self.jobs)}"


def _runtime(tmp: Path, name: str, engine: SQLiteEngine) -> Runtime:
    store = tmp / f"coordination-{name}.db"
    return Runtime(
        Settings(_env_file=None),
        engine=engine,
        coordination=SqliteCoordination(store, f"bench-{name}", 600, 600),
        letters=SqliteDeadLetters(store, 100),
        queue=_Submitted(),  # type: ignore[arg-type]
    )


def _embed_jobs(tmp: Path, stores: dict[str, Path], models: dict[str, Embedder], items: int) -> dict[str, float]:
    """Items/s of ``embed_items`` jobs per model, through the worker's flow, the models' jobs alternating.

    Each model's store is copied, its oldest ``items`` rows of ``item_vectors`` deleted, then jobs of
    ``items // 4`` run in turn: MiniLM, hash, hash, MiniLM, … (4 each).

    Raises:
        RuntimeError: a job did not end ``done`` or embedded another count.
    """
    engines: dict[str, SQLiteEngine] = {}
    for name, path in stores.items():
        copy = tmp / f"embed-{name}.db"
        shutil.copyfile(path, copy)
        with sqlite3.connect(copy, isolation_level=None) as conn:
            conn.execute(
                "DELETE FROM item_vectors WHERE seq IN (SELECT seq FROM item_vectors ORDER BY seq LIMIT ?)", (items,)
            )
        conn.close()
        engines[name] = SQLiteEngine(copy, embedder=models[name])
    runtimes = {name: _runtime(tmp, name, engine) for name, engine in engines.items()}
    limit = max(1, items // 4)
    seconds = dict.fromkeys(stores, 0.0)
    done = dict.fromkeys(stores, 0)
    names = list(stores)
    try:
        for round_ in range(4):
            for name in names if round_ % 2 == 0 else names[::-1]:
                delivery = Delivery("memory.embed_items", f"{name}-{round_}", (EmbedItems(limit=limit).to_dict(),))
                start = time.perf_counter()
                out = execute(runtimes[name], delivery)
                seconds[name] += time.perf_counter() - start
                if out.verdict is not Verdict.DONE or out.result is None or out.result["embedded"] != limit:
                    raise RuntimeError(f"the {name} embedding job ended {out.verdict}: {out.result or out.letter}")
                done[name] += limit
    finally:
        for engine in engines.values():
            engine.close()
    return {name: done[name] / seconds[name] for name in stores}


def run(quick: bool = False, sizes: Sizes | None = None, model: Embedder | None = None) -> list[Row]:
    """Every row (module docstring); ``sizes`` overrides ``QUICK``/``STANDARD``; ``model`` the MiniLM embedder.

    Raises:
        FileNotFoundError: no LoCoMo file under ``MEMORY_CORE_DATA_DIR``.
    """
    size = sizes or (QUICK if quick else STANDARD)
    models = {"minilm": model or embedder_for("minilm", None), "hash": embedder_for("hash", None)}
    turns, questions = _locomo()
    agent = f"{turns[0].speaker.lower()}-0"  # the first replica's first speaker: an agent holding turns
    caches: dict[str, dict[str, tuple[F32, F32]]] = {name: {} for name in models}
    tmp = Path(tempfile.mkdtemp(prefix="model-bench-"))
    rows: list[Row] = []
    try:
        first: dict[str, Path] = {}
        for stored in size.stored:
            started = time.perf_counter()
            lexical = tmp / f"lexical-{stored}.db"
            how = _lexical(lexical, stored, size.bulk_above, models["hash"])
            fill_s = time.perf_counter() - started
            paths: dict[str, Path] = {}
            encoded: dict[str, int] = {}
            for name, embedder in models.items():
                paths[name] = tmp / f"{name}-{stored}.db"
                shutil.copyfile(lexical, paths[name])
                started = time.perf_counter()
                _, encoded[name] = shared_vectors(paths[name], embedder, caches[name])
                fill_s += time.perf_counter() - started
            first = first or paths
            setup = f"sqlite, {stored:,} turns"
            note = (
                f"same filler turns (LoCoMo replicated) in both stores, {how}; every item embedded by its model, "
                f"each distinct text encoded once per run ({encoded['minilm']:,} first met at this size) and its "
                f"vectors written for every copy (bench.model_bench.shared_vectors); filled in {fill_s:.0f} s"
            )
            engines = (SQLiteEngine(paths["minilm"], embedder=models["minilm"]),
                       SQLiteEngine(paths["hash"], embedder=models["hash"]))  # fmt: skip
            try:
                calls = min(size.calls, max(1, len(questions) - 3))
                on, off, encodes = _paired_pre_turn(engines, agent, questions, calls)
                cpu_on: list[float] = []
                cpu_off: list[float] = []
                fetch_on, fetch_off = _paired_fetch(engines, questions, calls, (cpu_on, cpu_off))
            finally:
                for engine in engines:
                    engine.close()
            load = f"load average {os.getloadavg()[0]:.1f}"
            timing = f"{note}; {calls} pairs alternating; query encodes per pre_turn {encodes[0]:.2f}; {load}"
            rows.extend(
                Row(f"pre_turn p{q}, MiniLM", setup, percentile(on, q), "ms", percentile(off, q), "hash", timing)
                for q in (50, 99)
            )
            ranked = f"query encode + ranking, no pack; {calls} pairs alternating; {load}"
            rows.extend(
                Row(
                    f"hybrid fetch p{q}, MiniLM",
                    setup,
                    percentile(fetch_on, q),
                    "ms",
                    percentile(fetch_off, q),
                    "hash",
                    ranked,
                )  # fmt: skip
                for q in (50, 99)
            )
            used = f"CPU time of the fetching thread (time.thread_time), the same calls; no query encoding; {load}"
            rows.extend(
                Row(
                    f"hybrid fetch CPU p{q}, MiniLM",
                    setup,
                    percentile(cpu_on, q),
                    "ms",
                    percentile(cpu_off, q),
                    "hash",
                    used,
                )  # fmt: skip
                for q in (50, 99)
            )
            sizes_of = {name: item_bytes(path, models[name].name) for name, path in paths.items()}
            mb, hb = sizes_of["minilm"], sizes_of["hash"]
            counted = f"over {len(mb):,} item_vectors rows (token vectors int8 + scale, pooled float32)"
            rows.append(Row("bytes per item, mean, MiniLM", setup, sum(mb) / len(mb), "B", sum(hb) / len(hb),
                            "hash", f"SUM(length(pooled) + length(tokens)) / rows, {counted}"))  # fmt: skip
            rows.append(Row("bytes per item, p50, MiniLM", setup, percentile(mb, 50), "B", percentile(hb, 50), "hash",
                            counted))  # fmt: skip
            rows.append(Row("bytes per item, max, MiniLM", setup, max(mb), "B", max(hb), "hash", counted))
        rate = _embed_jobs(tmp, first, models, size.embed)
        load = f"load average {os.getloadavg()[0]:.1f}"
        rows.append(Row(
            "embedding throughput on a worker, MiniLM", f"sqlite, {size.stored[0]:,} turns", rate["minilm"], "items/s",
            rate["hash"], "hash",
            f"embed_items jobs of {max(1, size.embed // 4)} through workers.execution.execute (run_embed), "
            f"{size.embed} items per model, jobs alternating; one process, the model on one thread; {load}",
        ))  # fmt: skip
        return rows
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None, out: Callable[[str], object] = print) -> int:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1k/3k stored turns")
    args = parser.parse_args(argv)
    print_table(run(quick=args.quick), title="The ranking model beside hash")
    out(f"\nmachine: {machine()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

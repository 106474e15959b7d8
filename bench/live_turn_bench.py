"""The live turn beside a worker (issue 12): ``pre_turn``/``post_turn`` on a store holding the demo's data.

Run ``python -m bench.live_turn_bench`` (1k/10k/100k stored items, a few minutes on a quiet 2-core machine),
``--quick`` (1k/3k, about a minute) or ``--full`` (adds 1M). The demo's data is built once: the PEPs in the brain,
one LoCoMo conversation replayed through ``AgentMemory`` with its beliefs built, and every item embedded by the
ranking model (what ``make demo``'s worker does). Each size is a copy of it with filler turns up to the size
(stored ``visible``, not yet built): LoCoMo replicated across other agents, except at the largest size, where the
filler is **one big agent** of the replayed agent's layout. The fill times are printed. Filler above
``BULK_ABOVE`` turns (the 1M size) is stored by ``bench.bulk_fill``: a 20k seed through the engine, the rest as
copies of its rows in SQL (the note says so).

At each size, in the same run:

* **(a) no worker**: ``pre_turn`` (a LoCoMo question) then ``post_turn`` of the replayed agent, p50/p99;
* **(b) a worker**: the same calls while another process ingests PEP passages (100 per batch, ``visible``, as an
  ``IngestBrain`` job), builds every due scope (the filler: a long build) and embeds what waits, in a loop. With
  2+ CPUs the host is pinned to CPU 0 and the worker to CPU 1 (``os.sched_setaffinity``; ``taskset``
  semantics), so the figures show waiting, not CPU contention;
* the counts behind them (``docs/live-turn.md``): host writes that waited for more than one background
  transaction (``WriteStats.behind_more_than_one``: SQLite's own commit order), full belief-index loads and
  refreshes during (b), the most rows one History/Team read ranked, the most candidates one rerank scored, and
  query encodes per ``pre_turn``;
* the lock holds per kind of write transaction during (b), the host's and the worker's (``WriteStats.holds``:
  p99 in the row, p50, max, count and the most items one transaction wrote in its note; the host's beside (a)):
  what a host write can wait behind, and what its own transaction costs;
* the cold start, in a new process: its RSS before opening the file, then the first ``pre_turn``'s time and the
  RSS after it, with the rows the item index and the pooled vectors then hold and their bytes
  (``docs/live-turn.md``, memory at scale);
* the read-pool question: ``pre_turn`` wall and CPU time with its reads on the caller (the default) against the
  shared pool (``MEMORY_CORE_READ_POOL``), alternating call by call.

Last, a **small agent beside a big one**: the replayed agent's ``pre_turn`` p99 at the largest size, while the big
agent holds the filler and the worker builds it ((b) there), against the same agent's p99 on the demo's data
alone at the first size ((a) there), before the big agent existed.

The lead takes final figures on a quiet machine; ``--quick`` checks the code.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.bulk_fill import SEED, bulk_fill
from bench.common import Row, machine, percentile, print_table
from bench.sqlite_bench import _fill, _locomo, _turns
from memory_core import ConsolidateRequest, Namespace, Reach
from memory_core.cli._jobs import plan_ingest
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.engines.sqlite.queries import QueryEncodings
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.brain import Brain
from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.lifecycle.policy import HISTORY_HEADING, TEAM_HEADING
from memory_core.replay import load_conversations
from memory_core.replay.driver import Replayer, agent_id_for
from memory_core.settings import get_settings

__all__ = ["FULL", "QUICK", "STANDARD", "Sizes", "run"]

SAMPLE = "conv-26"
"""The LoCoMo conversation replayed (the demo's)."""
LAYOUT = MemoryLayout()
BUILD_ALL = ConsolidateRequest(reach=Reach.subtree())


@dataclass(frozen=True)
class Sizes:
    """How big the bench runs: stored turns per size, and timed calls per phase."""

    stored: tuple[int, ...]
    calls: int


QUICK = Sizes((1_000, 3_000), 30)
STANDARD = Sizes((1_000, 10_000, 100_000), 150)
FULL = Sizes((1_000, 10_000, 100_000, 1_000_000), 150)
WORKER_EMBEDS = 256
BULK_ABOVE = 100_000
"""Filler above this many turns is stored by ``bulk_fill`` (a seed through the engine, copies in SQL)."""
"""Items the bench worker embeds after each build (a build job embeds up to ``EMBED_PER_JOB``)."""


# the worker process ----------------------------------------------------------------------------------------
def _passages() -> list[BrainDocument]:
    peps = get_settings().data_dir / "docs" / "peps"
    return [doc for job in plan_ingest([peps]).jobs for doc in job.documents]


def _worker(db: str, started: str, stop: str) -> None:
    """Ingest 100 passages under a new collection, then build every due scope; again until ``stop`` exists.

    On its way out (``stop``, or SIGTERM mid-build) it writes its lock holds per kind (``WriteStats.holds``) as
    JSON to ``<stop>.holds``.
    """
    if (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {1})
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a transaction in flight rolls back
    docs = _passages()
    with SQLiteEngine(db) as engine:
        try:
            brain = Brain(engine, LAYOUT)
            i = 0
            while not Path(stop).exists():
                start = (i * 100) % max(1, len(docs) - 100)
                brain.ingest_many(docs[start : start + 100], collection=f"worker-{i}")
                Path(started).touch()
                engine.consolidate(BUILD_ALL)
                engine.embed_backlog(limit=WORKER_EMBEDS)
                i += 1
        finally:
            Path(f"{stop}.holds").write_text(json.dumps(engine._db.stats.hold_summary()), encoding="utf-8")


@contextmanager
def _running_worker(db: Path, tmp: Path, holds: dict[str, dict[str, float]]) -> Iterator[Path]:
    """The worker process while the block runs; ``holds`` gets its lock holds per kind once it has stopped."""
    started, stop = tmp / "worker.started", tmp / "worker.stop"
    for path in (started, stop, Path(f"{stop}.holds")):
        path.unlink(missing_ok=True)
    env = {**os.environ, "MEMORY_CORE_DATA_DIR": str(get_settings().data_dir)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.live_turn_bench", "--worker", str(db), str(started), str(stop)],
        cwd=Path(__file__).resolve().parents[1],
        env=env,
    )
    try:
        while not started.exists():  # its first batch is in: it builds from now on
            if proc.poll() is not None:
                raise RuntimeError(f"the bench worker exited with {proc.returncode}")
            time.sleep(0.05)
        yield started
    finally:
        stop.touch()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # mid-build (a big scope): its transactions are atomic, stop it
            proc.terminate()
            proc.wait(timeout=60)
        if Path(f"{stop}.holds").exists():
            holds.update(json.loads(Path(f"{stop}.holds").read_text(encoding="utf-8")))


# the host ----------------------------------------------------------------------------------------------------
def _pin_host() -> str:
    if (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {0})
        return "host on CPU 0, worker on CPU 1"
    return "one CPU: host and worker share it"


def _rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def _demo_store(engine: SQLiteEngine, sample: str) -> tuple[str, list[str]]:
    """The demo's data: PEPs in the brain, the LoCoMo conversation replayed, built and embedded; (agent, questions)."""
    Brain(engine, LAYOUT).ingest_many(_passages())
    settings = get_settings()
    conv = load_conversations(settings.data_dir / "locomo" / "locomo_dev.json", "locomo", [sample])
    Replayer(engine, LAYOUT, lambda job: None).replay(conv)
    engine.consolidate(BUILD_ALL)
    engine.embed_backlog()
    _, questions = _locomo()
    return agent_id_for(conv.speakers[0]), questions


@dataclass(frozen=True)
class Base:
    """The demo's data, built once: the file, its agent and questions, the items it holds, the build time."""

    path: Path
    agent: str
    questions: list[str]
    held: int
    seconds: float


def _base(tmp: Path, sample: str) -> Base:
    path = tmp / "demo.db"
    started = time.perf_counter()
    with SQLiteEngine(path) as engine:
        agent, questions = _demo_store(engine, sample)
        held = int(engine.stats()["items"])
    return Base(path, agent, questions, held, time.perf_counter() - started)


def _copy(base: Path, to: Path) -> None:
    for suffix in ("", "-wal"):
        if Path(f"{base}{suffix}").exists():
            shutil.copyfile(f"{base}{suffix}", f"{to}{suffix}")


@dataclass
class Timed:
    """One phase's samples, and how the host's live writes waited (``WriteStats`` deltas)."""

    pre: list[float]
    post: list[float]
    writes: int
    over_one: int
    encodes: int
    holds: dict[str, dict[str, float]]


def _calls(engine: SQLiteEngine, agent: str, questions: list[str], calls: int, base: int) -> Timed:
    memory = AgentMemory(engine, LAYOUT, agent)
    engine._queries = QueryEncodings(lambda: engine.embedder)  # every phase encodes its questions, as users' are new
    stats = engine._db.stats
    writes, over, encodes = stats.live, stats.behind_more_than_one, engine.query_encodes
    stats.holds = {}  # this phase's lock holds only
    pre: list[float] = []
    post: list[float] = []
    for i in range(calls):
        turn = base + 2 * i
        start = time.perf_counter()
        memory.pre_turn({"thread_id": "bench", "turn_index": turn, "user_text": questions[i % len(questions)]})
        pre.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        memory.post_turn({"thread_id": "bench", "turn_index": turn + 1, "assistant_text": f"Noted, {i}."})
        post.append((time.perf_counter() - start) * 1000)
    return Timed(
        pre, post, stats.live - writes, stats.behind_more_than_one - over, engine.query_encodes - encodes,
        stats.hold_summary(),
    )  # fmt: skip


def _hold_rows(setup: str, quiet: Timed, busy: Timed, worker: dict[str, dict[str, float]]) -> list[Row]:
    """Lock holds per kind of write transaction during (b), the host's and the worker's (``WriteStats.holds``).

    The host's own live write (kind ``live``) is compared with (a); ``live.wait`` is how long its live writes
    waited for the lock; ``checkpoint`` runs after a commit, holding no lock.
    """
    rows: list[Row] = []
    for who, holds in (("host", busy.holds), ("worker", worker)):
        for kind, h in holds.items():
            base = quiet.holds.get(kind) if who == "host" else None
            rows.append(Row(
                f"lock hold p99, {who} {kind}", setup, h["p99_ms"], "ms", base["p99_ms"] if base else None,
                "(a) no worker" if base else "",
                f"(b); p50 {h['p50_ms']:.2f} ms, max {h['max_ms']:.2f} ms, {int(h['count'])} tx, "
                f"most items per tx {int(h['most_items'])}, log restarts {int(h.get('restarts', 0))}, "
                f"COMMIT p50/p99 {h.get('commit_p50_ms', 0.0):.2f}/{h.get('commit_p99_ms', 0.0):.2f} ms, "
                f"CPU p50/p99 {h.get('cpu_p50_ms', 0.0):.2f}/{h.get('cpu_p99_ms', 0.0):.2f} ms, "
                f"preempted p50/p99 {h.get('runnable_p50_ms', 0.0):.2f}/{h.get('runnable_p99_ms', 0.0):.2f} ms, "
                f"blocked p99 {h.get('blocked_p99_ms', 0.0):.2f} ms; "
                f"load average {os.getloadavg()[0]:.1f}",
            ))  # fmt: skip
    return rows


@contextmanager
def _read_pool(on: bool) -> Iterator[None]:
    """``MEMORY_CORE_READ_POOL`` set to ``on`` while the block runs (settings read again on both sides)."""
    before = os.environ.get("MEMORY_CORE_READ_POOL")
    os.environ["MEMORY_CORE_READ_POOL"] = "1" if on else "0"
    get_settings.cache_clear()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MEMORY_CORE_READ_POOL", None)
        else:
            os.environ["MEMORY_CORE_READ_POOL"] = before
        get_settings.cache_clear()


def _pool_rows(engine: SQLiteEngine, agent: str, questions: list[str], calls: int, setup: str) -> list[Row]:
    """The read-pool question: ``pre_turn`` with its reads on the caller (the default) against the shared pool.

    Wall and process CPU time per call; the two alternate call by call (same question for both, each its own
    thread), so both see the same load.
    """
    out: dict[str, tuple[list[float], list[float]]] = {"caller": ([], []), "pool": ([], [])}
    memory = AgentMemory(engine, LAYOUT, agent)
    for i in range(calls):
        text = questions[i % len(questions)]
        for name in ("caller", "pool") if i % 2 == 0 else ("pool", "caller"):
            with _read_pool(name == "pool"):
                start, used = time.perf_counter(), time.process_time()
                memory.pre_turn({"thread_id": f"pool-{name}", "turn_index": i, "user_text": text})
                out[name][0].append((time.perf_counter() - start) * 1000)
                out[name][1].append((time.process_time() - used) * 1000)
    (pool_wall, pool_cpu), (one_wall, one_cpu) = out["pool"], out["caller"]
    baseline = "the shared read pool (MEMORY_CORE_READ_POOL=1)"
    note = f"alternating call by call; load average {os.getloadavg()[0]:.1f}"
    return [
        Row("pre_turn p50, reads on the caller", setup, percentile(one_wall, 50), "ms", percentile(pool_wall, 50),
            baseline, note),
        Row("pre_turn p99, reads on the caller", setup, percentile(one_wall, 99), "ms", percentile(pool_wall, 99),
            baseline, note),
        Row("pre_turn CPU p50, reads on the caller", setup, percentile(one_cpu, 50), "ms", percentile(pool_cpu, 50),
            baseline, "process CPU time per call, encoder thread included"),
    ]  # fmt: skip


def _section_rows(engine: SQLiteEngine, agent: str) -> int:
    """The most rows one History or Team read ranked in the last reads."""
    flts = {LAYOUT.conversations_filter(agent), LAYOUT.conversations_filter(None)}
    return max((rows for flt, rows in engine.reads.recent if flt in flts), default=0)


def _cold(db: str, agent: str, question: str) -> None:
    """In a new process: RSS before opening ``db``, the first ``pre_turn``'s time, RSS after (one JSON line)."""
    if (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {0})
    before = _rss_mb()
    start = time.perf_counter()
    with SQLiteEngine(db) as engine:
        AgentMemory(engine, LAYOUT, agent).pre_turn({"thread_id": "cold", "turn_index": 0, "user_text": question})
        cold_ms = (time.perf_counter() - start) * 1000
        index, pooled = engine._index, engine._pooled
        out = {"rss_before_mb": before, "cold_ms": cold_ms, "rss_after_mb": _rss_mb()}
        held = {"held_rows": index.held(), "index_mb": index.nbytes() / 1e6}
        vectors = {"pooled_rows": pooled.held(), "pooled_mb": pooled.nbytes() / 1e6}
        print(json.dumps({**out, **held, **vectors}), flush=True)


def _cold_start(db: Path, agent: str, question: str) -> dict[str, float]:
    env = {**os.environ, "MEMORY_CORE_DATA_DIR": str(get_settings().data_dir)}
    done = subprocess.run(
        [sys.executable, "-m", "bench.live_turn_bench", "--cold", str(db), agent, question],
        cwd=Path(__file__).resolve().parents[1], env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    out: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _rows_at(tmp: Path, base: Base, stored: int, calls: int, pinning: str, big: bool) -> tuple[list[Row], Timed, Timed]:
    db = tmp / f"live-{stored}.db"
    _copy(base.path, db)
    started = time.perf_counter()
    engine = SQLiteEngine(db)
    agent, questions = base.agent, base.questions
    turns, _ = _locomo()
    filler = max(0, stored - base.held)
    node = Namespace.agent("big") if big else None
    filling = _turns(turns, filler, node=node, tag="big" if big else "fill")
    how = f"filler turns on a copy of the demo's data ({base.held:,} items)"
    if filler > BULK_ABOVE:
        bulk_fill(engine, db, filling, filler)
        engine = SQLiteEngine(db)
        how += f"; {min(SEED, filler):,} stored through the engine, the rest copied in SQL (bench.bulk_fill)"
    else:
        _fill(engine, filling)
    fill_s = time.perf_counter() - started
    setup = f"{stored:,} stored" + (" (one big agent)" if big and filler else "")
    print(f"  {setup}: filled in {fill_s:.1f} s", flush=True)
    _calls(engine, agent, questions, 3, 10_000)  # warm
    quiet = _calls(engine, agent, questions, calls, 20_000)
    loads = engine._belief_index.stats
    full, refreshes = loads.full, loads.refreshes
    worker_holds: dict[str, dict[str, float]] = {}
    with _running_worker(db, tmp, worker_holds):
        busy = _calls(engine, agent, questions, calls, 40_000)
    rows_read = _section_rows(engine, agent)
    pool = _pool_rows(engine, agent, questions, max(3, calls // 3), setup)
    engine.close()
    cold = _cold_start(db, agent, questions[0])
    encodes = (quiet.encodes + busy.encodes) / (2 * calls)
    note = (
        f"{pinning}; worker: {busy.writes} host writes, {busy.over_one} waited past one background tx; "
        f"belief loads during (b): {loads.full - full} full, {loads.refreshes - refreshes} refreshes; "
        f"most rows per History/Team read {rows_read}; most rerank candidates {engine.reads.most_reranked}; "
        f"query encodes per pre_turn {encodes:.2f}"
    )
    rows = [
        Row(f"{name} p{q} (b) worker", setup, percentile(b, q), "ms", percentile(a, q), "(a) no worker", note)
        for name, a, b in (("pre_turn", quiet.pre, busy.pre), ("post_turn", quiet.post, busy.post))
        for q in (50, 99)
    ]
    rows.append(Row("fill", setup, fill_s, "s", note=how))
    held = (
        f"a new process; item index: {cold['held_rows']:,.0f} rows held, {cold['index_mb']:.1f} MB; "
        f"pooled vectors: {cold['pooled_rows']:,.0f} seqs held, {cold['pooled_mb']:.1f} MB"
    )
    rows.append(Row("host RSS after the first pre_turn", setup, cold["rss_after_mb"], "MB", cold["rss_before_mb"],
                    "before opening the file", held))  # fmt: skip
    rows.append(Row("cold start: first pre_turn", setup, cold["cold_ms"], "ms", note="a new process, file opened"))
    return [*rows, *_hold_rows(setup, quiet, busy, worker_holds), *pool], quiet, busy


def _small_beside_big(before: Timed, during: Timed, first: int, big: int, pinning: str) -> Row:
    return Row("small agent pre_turn p99", f"big agent holds {big - first:,}+, being built",
               percentile(during.pre, 99), "ms", percentile(before.pre, 99),
               f"before the big agent ((a) at {first:,})", pinning)  # fmt: skip


def run(quick: bool = False, sizes: Sizes | None = None, sample: str = SAMPLE) -> list[Row]:
    """Every row (see the module docstring); ``quick`` uses ``QUICK``, ``sizes`` overrides; ``sample`` is replayed.

    Raises:
        FileNotFoundError: no LoCoMo file or PEPs under ``MEMORY_CORE_DATA_DIR``.
    """
    size = sizes or (QUICK if quick else STANDARD)
    tmp = Path(tempfile.mkdtemp(prefix="live-turn-bench-"))
    affinity = os.sched_getaffinity(0)
    pinning = _pin_host()
    try:
        base = _base(tmp, sample)
        print(f"  the demo's data ({base.held:,} items, embedded): built in {base.seconds:.1f} s", flush=True)
        rows: list[Row] = [
            Row("fill", "the demo's data", base.seconds, "s", note="brain + replay + beliefs + embedding")
        ]
        first: Timed | None = None  # (a) at the first size: the small agent before the big one
        last: Timed | None = None  # (b) at the largest: beside the big agent being built
        for n, stored in enumerate(size.stored):
            big = n == len(size.stored) - 1
            at, quiet, busy = _rows_at(tmp, base, stored, size.calls, pinning, big)
            rows.extend(at)
            first = quiet if first is None else first
            last = busy
        assert first is not None and last is not None
        rows.append(_small_beside_big(first, last, size.stored[0], size.stored[-1], pinning))
        return rows
    finally:
        os.sched_setaffinity(0, affinity)
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None, out: Callable[[str], object] = print) -> int:
    """The command line (``--worker`` is the bench's own worker process)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1k/3k stored, about a minute")
    parser.add_argument("--full", action="store_true", help="add 1M stored turns (long)")
    parser.add_argument("--worker", nargs=3, metavar=("DB", "STARTED", "STOP"), help=argparse.SUPPRESS)
    parser.add_argument("--cold", nargs=3, metavar=("DB", "AGENT", "QUESTION"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(*args.worker)
        return 0
    if args.cold:
        _cold(*args.cold)
        return 0
    rows = run(sizes=QUICK if args.quick else FULL if args.full else STANDARD)
    print_table(rows, title=f"The live turn beside a worker ({HISTORY_HEADING!r}/{TEAM_HEADING!r} bounded)")
    out(f"\nmachine: {machine()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

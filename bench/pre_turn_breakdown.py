"""Where the slow ``pre_turn``s' time goes (issue 12): the slowest 5% of calls with a worker (b) against without (a).

Run ``python -m bench.pre_turn_breakdown [--stored N] [--calls N] [--rounds N]`` (default 100k stored, as the
largest size of ``bench.live_turn_bench``, whose store, worker and pinning it reuses: the demo's data plus one big
agent's filler, the host on CPU 0 and the worker building and ingesting on CPU 1). Each round times ``calls``
``pre_turn``s with no worker, then as many while the worker runs.

Per call it records the wall time and what it was spent in, on the calling thread (a step run on another
thread of the host would show as ``<step>@bg``):

* ``cpu`` / ``runnable``: the calling thread's CPU time and its time waiting for a CPU while runnable (Linux's
  ``/proc/thread-self/schedstat``: run time and run-queue delay, ns), so preemption shows apart from work;
  ``host cpu`` / ``host runnable``: the same summed over every thread of the host (the encoder's included);
* the engine's steps, wall time, by wrapping them for the run: the pending-row fold before the reads
  (``fold``; its write attempt ``fold write``), the read transaction (``read tx``; its ``BEGIN``), each fetch's
  lexical stage and rerank, the belief ranking and, inside it, the belief index's reads and refreshes, the hits'
  parsing, and the wait for the query's encoding (``encoding wait``).

The rows give each measure's mean over the slowest 5% of (b)'s calls beside the slowest 5% of (a)'s (the same
run), then over all calls; the load average is in the notes. Linux only (``schedstat``, ``sched_setaffinity``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import Row, machine, percentile, print_table
from bench.live_turn_bench import LAYOUT, SAMPLE, _base, _copy, _pin_host, _running_worker
from bench.sqlite_bench import _fill, _locomo, _turns
from memory_core import Namespace
from memory_core.engines.sqlite import SQLiteEngine, belief_index, connection, log_view
from memory_core.engines.sqlite import engine as engine_module
from memory_core.engines.sqlite.queries import QueryEncodings
from memory_core.lifecycle.agent import AgentMemory

__all__ = ["SLOWEST", "Probe", "run"]

SLOWEST = 0.05
"""The share of calls, slowest first, whose breakdown the rows give."""
Sample = dict[str, float]


def _schedstat(path: str) -> tuple[float, float]:
    """``(run ms, run-queue wait ms)`` of one thread (``/proc/.../schedstat``)."""
    with open(path, encoding="ascii") as fh:
        run_ns, wait_ns, _ = fh.read().split()
    return int(run_ns) / 1e6, int(wait_ns) / 1e6


def _host_schedstat() -> tuple[float, float]:
    """``(run ms, run-queue wait ms)`` summed over this process's threads (those alive now)."""
    run = wait = 0.0
    for tid in os.listdir("/proc/self/task"):
        try:
            r, w = _schedstat(f"/proc/self/task/{tid}/schedstat")
        except OSError:  # the thread ended meanwhile
            continue
        run, wait = run + r, wait + w
    return run, wait


class Probe:
    """Per-call wall time of engine steps, by wrapping them while ``installed`` (module docstring).

    ``sample`` holds the current call's milliseconds per step (``<step>@bg`` off the calling thread).
    """

    def __init__(self) -> None:
        self.caller = threading.current_thread()
        self.sample: Sample = {}

    def add(self, step: str, started: float) -> None:
        """Add the wall time since ``started`` (``perf_counter``) to ``step``."""
        key = step if threading.current_thread() is self.caller else f"{step}@bg"
        self.sample[key] = self.sample.get(key, 0.0) + (time.perf_counter() - started) * 1000

    def _timed(self, fn: Callable[..., Any], step: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(step, started)

        return timed

    @contextmanager
    def installed(self) -> Iterator[Probe]:
        """The wrappers in place while the block runs; the originals restored after."""
        engine = engine_module.SQLiteEngine
        index = belief_index.BeliefIndex
        steps: list[tuple[Any, str, str]] = [
            (engine, "_fold_pending", "fold"),
            (engine, "_lexical", "lexical stage"),
            (engine, "_reranked", "rerank"),
            (engine, "_hits_of", "hits parsed"),
            (log_view, "rank_beliefs", "belief ranking"),
            (index, "rows", "belief index read"),
            (index, "_load", "belief index refresh"),
            (connection.Database, "try_write", "fold write"),
        ]
        saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in steps]
        read, result = connection.Database.__dict__["_read"], Future.result
        probe = self

        def timed_read(conn: Any, fn: Callable[[Any], Any]) -> Any:
            started = time.perf_counter()
            try:
                return read.__func__(conn, _begun(fn, started))
            finally:
                probe.add("read tx", started)

        def _begun(fn: Callable[[Any], Any], started: float) -> Callable[[Any], Any]:
            def body(conn: Any) -> Any:
                probe.add("read tx BEGIN", started)
                return fn(conn)

            return body

        def timed_result(future: Future[Any], timeout: float | None = None) -> Any:
            started = time.perf_counter()
            try:
                return result(future, timeout)
            finally:
                if threading.current_thread() is probe.caller:
                    probe.add("encoding wait", started)

        try:
            for owner, name, step in steps:
                setattr(owner, name, self._timed(getattr(owner, name), step))
            connection.Database._read = staticmethod(timed_read)  # type: ignore[method-assign]
            Future.result = timed_result  # type: ignore[method-assign,assignment]
            yield self
        finally:
            for owner, name, original in saved:
                setattr(owner, name, original)
            connection.Database._read = read  # type: ignore[method-assign]
            Future.result = result  # type: ignore[method-assign]


def _calls(probe: Probe, engine: SQLiteEngine, agent: str, questions: list[str], calls: int, base: int) -> list[Sample]:
    memory = AgentMemory(engine, LAYOUT, agent)
    engine._queries = QueryEncodings(lambda: engine.embedder)  # every phase encodes its questions, as users' are new
    stats = engine._belief_index.stats
    out: list[Sample] = []
    for i in range(calls):
        probe.sample = {}
        refreshes = stats.refreshes
        cpu, runnable = _schedstat("/proc/thread-self/schedstat")
        host_cpu, host_runnable = _host_schedstat()
        started = time.perf_counter()
        memory.pre_turn({"thread_id": "bench", "turn_index": base + 2 * i, "user_text": questions[i % len(questions)]})
        wall = (time.perf_counter() - started) * 1000
        cpu_after, runnable_after = _schedstat("/proc/thread-self/schedstat")
        host_cpu_after, host_runnable_after = _host_schedstat()
        out.append({
            **probe.sample, "wall": wall, "cpu": cpu_after - cpu, "runnable": runnable_after - runnable,
            "host cpu": host_cpu_after - host_cpu, "host runnable": host_runnable_after - host_runnable,
            "belief refreshes": float(stats.refreshes - refreshes),
        })  # fmt: skip
        memory.post_turn({"thread_id": "bench", "turn_index": base + 2 * i + 1, "assistant_text": f"Noted, {i}."})
    return out


def slowest(samples: list[Sample], share: float = SLOWEST) -> list[Sample]:
    """The slowest ``share`` of ``samples`` by wall time (at least one)."""
    return sorted(samples, key=lambda s: -s["wall"])[: max(1, round(len(samples) * share))]


def _mean(samples: list[Sample], key: str) -> float:
    return sum(s.get(key, 0.0) for s in samples) / max(1, len(samples))


def breakdown(quiet: list[Sample], busy: list[Sample], setup: str) -> list[Row]:
    """Rows: each measure's mean over (b)'s slowest calls beside (a)'s, then over every call (module docstring)."""
    load = f"load average {os.getloadavg()[0]:.1f}"
    rows = [
        Row(f"pre_turn p{q} (b) worker", setup, percentile([s["wall"] for s in busy], q), "ms",
            percentile([s["wall"] for s in quiet], q), "(a) no worker", f"{len(busy)} calls each; {load}")
        for q in (50, 99)
    ]  # fmt: skip
    keys = sorted({k for s in quiet + busy for k in s} - {"wall"}, key=lambda k: (k.endswith("@bg"), k))
    for label, b, a in (("slowest 5%", slowest(busy), slowest(quiet)), ("all calls", busy, quiet)):
        rows.append(Row(f"{label}: wall", setup, _mean(b, "wall"), "ms", _mean(a, "wall"), "(a) no worker"))
        rows.extend(
            Row(f"{label}: {key}", setup, _mean(b, key), "ms" if key != "belief refreshes" else "",
                _mean(a, key), "(a) no worker", "mean per call")
            for key in keys
        )  # fmt: skip
    return rows


def run(stored: int = 100_000, calls: int = 100, rounds: int = 2, sample: str = SAMPLE) -> list[Row]:
    """The breakdown rows at ``stored`` items (filler: one big agent), ``rounds`` × ``calls`` per phase.

    Raises:
        FileNotFoundError: no LoCoMo file or PEPs under ``MEMORY_CORE_DATA_DIR``.
    """
    tmp = Path(tempfile.mkdtemp(prefix="pre-turn-breakdown-"))
    affinity = os.sched_getaffinity(0)
    pinning = _pin_host()
    try:
        base = _base(tmp, sample)
        db = tmp / "live.db"
        _copy(base.path, db)
        engine = SQLiteEngine(db)
        turns, _ = _locomo()
        _fill(engine, _turns(turns, max(0, stored - base.held), node=Namespace.agent("big"), tag="big"))
        probe = Probe()
        quiet: list[Sample] = []
        busy: list[Sample] = []
        with probe.installed():
            _calls(probe, engine, base.agent, base.questions, 3, 10_000)  # warm
            for r in range(rounds):
                quiet += _calls(probe, engine, base.agent, base.questions, calls, 20_000 + 10_000 * r)
                with _running_worker(db, tmp, {}):
                    busy += _calls(probe, engine, base.agent, base.questions, calls, 60_000 + 10_000 * r)
        engine.close()
        return breakdown(quiet, busy, f"{stored:,} stored (one big agent); {pinning}")
    finally:
        os.sched_setaffinity(0, affinity)
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=100_000, help="stored items (default 100k)")
    parser.add_argument("--calls", type=int, default=100, help="timed pre_turns per phase and round")
    parser.add_argument("--rounds", type=int, default=2, help="(a) then (b), this many times")
    args = parser.parse_args(argv)
    rows = run(args.stored, args.calls, args.rounds)
    print_table(rows, title="Where the slow pre_turns' time goes: (b) a worker against (a) none")
    print(f"\nmachine: {machine()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""SQLite engine benchmarks: ``pre_turn`` latency by store size, accepted vs visible writes, incremental builds.

Run ``python -m bench.sqlite_bench`` (full: 1k/10k/100k turns, a few minutes) or ``--quick`` (seconds). The
turns and questions come from ``<MEMORY_CORE_DATA_DIR>/locomo/locomo_dev.json`` (default ``../shared/data``).

* ``pre_turn`` p50/p99 (ms): ``AgentMemory.pre_turn`` (log the user turn ``accepted`` + read the standard
  sections) with N stored turns: LoCoMo's three conversations replicated across agents (each replica is a new
  pair of agents, so every turn is a distinct item). Queries are LoCoMo questions. The reference engine is
  measured beside it at the sizes it can hold in the same run; past those, the baseline is SQLite at the
  smallest size (the ratio shows growth).
* ``store_with`` p50/p99 (ms): ``accepted`` against ``visible``, one new turn per call, ``synchronous=full``.
* consolidate (ms): building 100 new turns into a scope already holding 1k items against one holding 100k
  (the ratio near 1 shows the build follows new items, not the scope's size).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from bench.common import Row, machine, percentile, print_table
from memory_core import ConsolidateRequest, Conversation, MemoryEngine, Namespace, Reach, WriteOptions
from memory_core.engines.reference import ReferenceEngine
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.items import Role, Turn
from memory_core.lifecycle.agent import AgentMemory, turn_item
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.meta import ObservedActor
from memory_core.replay.formats import ReplayTurn, parse_locomo
from memory_core.settings import get_settings


@dataclass(frozen=True)
class Sizes:
    """How big each benchmark runs.

    Attributes:
        pre_turn: Stored turns at which ``pre_turn`` is timed (the first is the growth baseline).
        reference: Those sizes at which the reference engine is timed too.
        calls: ``pre_turn`` calls timed per size.
        store_calls: ``store_with`` calls timed per durability.
        store_held: Turns held while ``store_with`` is timed.
        build: (small, large) scopes the 100-new-turn build is timed in.
        build_new: New turns per build.
    """

    pre_turn: tuple[int, ...]
    reference: frozenset[int]
    calls: int
    store_calls: int
    store_held: int
    build: tuple[int, int]
    build_new: int = 100


FULL = Sizes((1_000, 10_000, 100_000), frozenset({1_000, 10_000}), 100, 400, 1_000, (1_000, 100_000))
QUICK = Sizes((1_000, 3_000), frozenset({1_000}), 20, 100, 1_000, (1_000, 10_000))


def locomo_path() -> Path:
    """The LoCoMo file the benchmarks read (``MEMORY_CORE_DATA_DIR``, see the module docstring)."""
    return get_settings().data_dir / "locomo" / "locomo_dev.json"


def _locomo() -> tuple[list[ReplayTurn], list[str]]:
    path = locomo_path()
    if not path.is_file():
        raise FileNotFoundError(
            f"LoCoMo data not found: {path} (set MEMORY_CORE_DATA_DIR to the folder holding locomo/)"
        )
    data = json.loads(path.read_text())
    parsed = parse_locomo(data)
    questions = [str(q["question"]) for sample in data for q in sample["qa"] if isinstance(q, dict) and "question" in q]
    return parsed.turns, questions


def _turns(turns: list[ReplayTurn], n: int, *, node: Namespace | None = None, tag: str = "r") -> Iterator[Conversation]:
    """``n`` distinct one-turn items: LoCoMo replicated, replica ``k`` at agents ``<speaker>-<k>`` (or at ``node``)."""
    for i in range(n):
        k, j = divmod(i, len(turns))
        t = turns[j]
        speaker = t.speaker.lower()
        agent = f"{speaker}-{k}"
        at = t.at + timedelta(days=3650 * k) if t.at else None
        yield turn_item(
            node or Namespace.agent(agent),
            agent,
            f"{tag}{k}-{t.thread_id}",
            i,
            Turn(role=Role.USER, text=t.text),
            at=at,
            observed_actor=ObservedActor(id=f"user:{agent}", name=t.speaker),
        )


def _fill(engine: MemoryEngine, items: Iterator[Conversation]) -> None:
    batch: list[Conversation] = []
    for item in items:
        batch.append(item)
        if len(batch) == 100:
            engine.store_many(batch)
            batch = []
    if batch:
        engine.store_many(batch)


def _pre_turn_ms(engine: MemoryEngine, questions: list[str], calls: int, agent: str) -> list[float]:
    memory = AgentMemory(engine, MemoryLayout(), agent)
    samples: list[float] = []
    for i in range(calls):
        start = time.perf_counter()
        memory.pre_turn({"thread_id": "bench", "turn_index": i, "user_text": questions[i % len(questions)]})
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def _pre_turn_rows(tmp: Path, size: Sizes) -> list[Row]:
    turns, questions = _locomo()
    sizes, reference_sizes, calls = list(size.pre_turn), size.reference, size.calls
    agent = f"{turns[0].speaker.lower()}-0"  # the first replica's first speaker: an agent holding turns
    rows: list[Row] = []
    smallest: float | None = None
    engine = SQLiteEngine(tmp / "pre_turn.db", synchronous="normal")
    held = 0
    for size in sizes:
        _fill(engine, (t for i, t in enumerate(_turns(turns, size)) if i >= held))
        held = size
        _pre_turn_ms(engine, questions, 3, agent)  # warm the caches (vectors, parsed items)
        ours = _pre_turn_ms(engine, questions, calls, agent)
        base: list[float] | None = None
        if size in reference_sizes:
            reference = ReferenceEngine()
            _fill(reference, _turns(turns, size))
            base = _pre_turn_ms(reference, questions, max(5, calls // max(1, size // 1000)), agent)
        for q in (50, 99):
            value = percentile(ours, q)
            baseline: float | None
            if base is not None:
                baseline, name = percentile(base, q), "reference engine"
            else:
                baseline, name = (smallest if q == 50 else None), f"sqlite at {sizes[0]:,}"
            rows.append(Row(f"pre_turn p{q}", f"sqlite, {size:,} turns", value, "ms", baseline, name))
        if smallest is None:
            smallest = percentile(ours, 50)
    engine.close()
    return rows


def _store_rows(tmp: Path, size: Sizes) -> list[Row]:
    turns, _ = _locomo()
    calls = size.store_calls
    engine = SQLiteEngine(tmp / "store.db")
    _fill(engine, _turns(turns, size.store_held))
    out: dict[str, list[float]] = {}
    for wait, opts in (("accepted", WriteOptions.accepted()), ("visible", WriteOptions.visible())):
        samples: list[float] = []
        for item in _turns(turns, calls, tag=f"{wait}-"):
            start = time.perf_counter()
            engine.store_with(item, opts)
            samples.append((time.perf_counter() - start) * 1000)
        out[wait] = samples
        engine.drain_pending()
    engine.close()
    return [
        Row(f"store_with p{q}", f"sqlite accepted, {size.store_held:,} held", percentile(out["accepted"], q), "ms",
            percentile(out["visible"], q), "store_with visible", "synchronous=full")
        for q in (50, 99)
    ]  # fmt: skip


def _build_ms(tmp: Path, name: str, held: int, turns: list[ReplayTurn], new: int) -> tuple[float, int]:
    node = Namespace.agent("scope")
    engine = SQLiteEngine(tmp / f"{name}.db", synchronous="normal")
    _fill(engine, _turns(turns, held, node=node))
    request = ConsolidateRequest(reach=Reach.exact(node))
    engine.consolidate(request)
    _fill(engine, _turns(turns, new, node=node, tag="new"))
    start = time.perf_counter()
    receipt = engine.consolidate(request)
    elapsed = (time.perf_counter() - start) * 1000
    engine.close()
    return elapsed, receipt.built or 0


def _build_rows(tmp: Path, size: Sizes) -> list[Row]:
    turns, _ = _locomo()
    small, large = size.build
    base, _ = _build_ms(tmp, "build-small", small, turns, size.build_new)
    value, built = _build_ms(tmp, "build-large", large, turns, size.build_new)
    return [
        Row(f"consolidate {size.build_new} new turns", f"scope holding {large:,}", value, "ms", base,
            f"scope holding {small:,}", f"{built} beliefs built or changed")
    ]  # fmt: skip


def run(quick: bool = False, sizes: Sizes | None = None) -> list[Row]:
    """Every SQLite benchmark row (``quick``: ``QUICK`` sizes, seconds; ``sizes`` overrides both).

    Raises:
        FileNotFoundError: no LoCoMo file under ``MEMORY_CORE_DATA_DIR``.
    """
    size = sizes or (QUICK if quick else FULL)
    tmp = Path(tempfile.mkdtemp(prefix="sqlite-bench-"))
    try:
        return [*_pre_turn_rows(tmp, size), *_store_rows(tmp, size), *_build_rows(tmp, size)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, seconds")
    args = parser.parse_args()
    print_table(run(quick=args.quick), title="SQLite engine")
    print(f"\nmachine: {machine()}")

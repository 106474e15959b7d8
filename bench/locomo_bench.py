"""Main-job benchmarks on real conversations: retrieval recall on LoCoMo and the live turn during a replay.

Run ``python -m bench.locomo_bench`` (or ``--quick`` for one conversation). Figures, each beside a baseline
measured in the same run:

* evidence recall of the ``pre_turn`` pack (1200 tokens) beside BM25 given as many turns as the pack holds,
  and of the engine's top-k fetch beside BM25 top-k (``memory_core.eval.locomo``; rank-bm25 over the same
  turns), categories 1-4, and category 1 (multi-hop) alone;
* the query-time cost of the hybrid fetch (the model's query encoding, dense candidates and late interaction)
  beside a keyword fetch of the same questions (the lexical stage alone);
* ``pre_turn`` p50/p99 while replaying a real conversation on SQLite, beside the reference engine replaying
  the same conversation.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.common import Row, machine, print_table
from memory_core.engines.reference import ReferenceEngine
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.eval.locomo import run_locomo_eval
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.replay import load_conversations
from memory_core.replay.driver import Replayer
from memory_core.settings import get_settings
from memory_core.timing import percentile

__all__ = ["run"]


QUICK_SAMPLE = "conv-30"
"""The conversation ``--quick`` evaluates, and the one every run replays for the latency rows."""


def _locomo() -> Path:
    path = get_settings().data_dir / "locomo" / "locomo_dev.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"LoCoMo data not found: {path} (set MEMORY_CORE_DATA_DIR to the folder holding locomo/)"
        )
    return path


def _recall_rows(samples: list[str] | None) -> list[Row]:
    result = run_locomo_eval(_locomo(), samples=samples)
    n = len(result.questions)
    setup = (
        f"LoCoMo {'+'.join(samples) if samples else f'all {len({q.sample for q in result.questions})}'}, {n} questions"
    )
    rows = [
        Row(
            "evidence recall, pack (1200 tok)",
            setup,
            100 * result.tallies["pack"].mean(),
            "%",
            100 * result.tallies["bm25@pack"].mean(),
            "BM25, as many turns",
        )
    ]
    rows.append(
        Row(
            "evidence recall, pack, category 1 (multi-hop)",
            setup,
            100 * result.tallies["pack"].mean(1),
            "%",
            100 * result.tallies["bm25@pack"].mean(1),
            "BM25, as many turns",
        )
    )
    for k in result.ks:
        rows.append(
            Row(
                f"evidence recall, fetch@{k}",
                setup,
                100 * result.tallies[f"fetch@{k}"].mean(),
                "%",
                100 * result.tallies[f"bm25@{k}"].mean(),
                f"BM25@{k}",
            )
        )
    rows.append(
        Row(
            "evidence recall, fetch@10, category 1 (multi-hop)",
            setup,
            100 * result.tallies["fetch@10"].mean(1),
            "%",
            100 * result.tallies["bm25@10"].mean(1),
            "BM25@10",
        )
    )
    times = result.fetch_ms
    for q in (50, 99):
        rows.append(
            Row(
                f"hybrid fetch p{q} (query encoding, lexical top 100, dense candidates, late interaction)",
                setup,
                percentile(times["hybrid"], q),
                "ms",
                percentile(times["keyword"], q),
                "keyword fetch (lexical stage only), same questions",
            )
        )
    return rows


def _replay_rows(sample: str) -> list[Row]:
    conv = load_conversations(_locomo(), "locomo", [sample])
    timings: dict[str, list[float]] = {}
    for name in ("sqlite", "reference"):
        with tempfile.TemporaryDirectory(prefix="locomo-bench-") as tmp:
            engine = SQLiteEngine(Path(tmp) / "m.db") if name == "sqlite" else ReferenceEngine()
            report = Replayer(engine, MemoryLayout(), lambda job: None).replay(conv)
            timings[name] = report.pre_turn_ms
            engine.close()
    setup = f"replay {sample}, {len(conv.turns)} turns"
    return [
        Row(
            f"pre_turn p{q} during replay",
            setup,
            percentile(timings["sqlite"], q),
            "ms",
            percentile(timings["reference"], q),
            "reference engine",
        )
        for q in (50, 99)
    ]


def run(quick: bool = False, sample: str = QUICK_SAMPLE) -> list[Row]:
    """Every main-job row (``quick``: only ``sample`` is evaluated; it is always the one replayed for latency).

    Raises:
        FileNotFoundError: no LoCoMo file under ``MEMORY_CORE_DATA_DIR``.
    """
    return [*_recall_rows([sample] if quick else None), *_replay_rows(sample)]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one conversation")
    args = parser.parse_args()
    print_table(run(quick=args.quick), title="Main job on LoCoMo")
    print(f"\nmachine: {machine()}")

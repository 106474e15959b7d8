"""``python -m bench.run`` (``make bench``): every benchmark, one table, with the machine it ran on.

Runs the SQLite engine benchmarks (``bench.sqlite_bench``), the job-flow benchmarks (``bench.workers_bench``,
needs Redis), the main job on LoCoMo (``bench.locomo_bench``), the cost of scrubbing a write
(``bench.scrub_bench``), the HTTP API and prefetch cache on a LoCoMo replay (``bench.http_bench``) and the ranking
model's costs beside ``hash`` (``bench.model_bench``); each row
sits beside its baseline measured in
the same run. The table is printed and written to ``bench/results/latest.md``.
"""

from __future__ import annotations

import argparse
import importlib
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.common import Row, machine, print_table

__all__ = ["SUITES", "main"]

SUITES = (
    "sqlite_bench",
    "live_turn_bench",
    "workers_bench",
    "locomo_bench",
    "scrub_bench",
    "http_bench",
    "postgres_bench",
    "log_bench",
    "postgres_log_bench",
    "model_bench",
)
"""Benchmark modules, each with ``run(quick) -> list[Row]``."""


def main(argv: list[str] | None = None) -> int:
    """Run the suites and print one table; the exit code is 1 when a suite failed (its error is shown)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (about a minute)")
    parser.add_argument("--only", choices=SUITES, action="append", help="run only these suites")
    args = parser.parse_args(argv)
    rows: list[Row] = []
    failed: list[str] = []
    started = time.monotonic()
    for name in args.only or SUITES:
        print(f"running {name}{' (quick)' if args.quick else ''}…", flush=True)
        try:
            rows.extend(importlib.import_module(f"bench.{name}").run(quick=args.quick))
        except Exception as exc:  # one suite's failure (say, no Redis) must not hide the others' figures
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = f"memory-core benchmarks, {stamp}{' (quick)' if args.quick else ''}"
    print()
    text = print_table(rows, title=title)
    footer = f"\nmachine: {machine()}; {time.monotonic() - started:.0f} s"
    print(footer)
    for line in failed:
        print(f"FAILED {line}")
    out = Path(__file__).resolve().parent / "results" / "latest.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text + "\n" + footer + "\n" + "".join(f"\nFAILED {f}" for f in failed), encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

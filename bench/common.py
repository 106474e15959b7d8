"""Shared helpers for benchmarks: timing, percentiles, the machine line, and one table format."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from memory_core.timing import percentile

__all__ = ["Row", "machine", "paired", "percentile", "print_table", "summarize", "time_calls"]


def time_calls(fn: Callable[[int], object], n: int) -> list[float]:
    """Call ``fn(i)`` for i in range(n) and return each call's wall time in milliseconds."""
    out: list[float] = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - start) * 1000.0)
    return out


def paired(
    call: Callable[[int], object], calls: int, switched_off: Callable[[], AbstractContextManager[object]]
) -> tuple[list[float], list[float]]:
    """``call(i)`` timed as is and inside ``switched_off()``, alternating which goes first; ms each.

    Each round calls ``call(2i)`` as is and ``call(2i + 1)`` switched off, so a call that writes never repeats an
    item; the pair's order alternates so neither side always runs warm.
    """
    on: list[float] = []
    off: list[float] = []
    for i in range(calls):
        for out, switch in ((on, False), (off, True)) if i % 2 == 0 else ((off, True), (on, False)):
            start = time.perf_counter()
            if switch:
                with switched_off():
                    call(2 * i + 1)
            else:
                call(2 * i)
            out.append((time.perf_counter() - start) * 1000)
    return on, off


def summarize(samples_ms: Sequence[float]) -> dict[str, float]:
    """``{p50, p99, mean}`` in milliseconds."""
    return {
        "p50": percentile(samples_ms, 50),
        "p99": percentile(samples_ms, 99),
        "mean": statistics.fmean(samples_ms) if samples_ms else float("nan"),
    }


@dataclass
class Row:
    """One line of a benchmark table: a measurement beside its baseline from the same run.

    Attributes:
        bench: What was measured (``pre_turn p50``).
        setup: The conditions (``sqlite, 10k turns``).
        value: The measurement.
        unit: Its unit (``ms``, ``jobs/s``, ``s``).
        baseline: The baseline's value, measured in the same run, when there is one.
        baseline_name: What the baseline is (``reference engine``, ``raw celery no-op``).
        note: Anything a reader needs to read the row.
    """

    bench: str
    setup: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_name: str = ""
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        """``value / baseline``, when there is a non-zero baseline."""
        if self.baseline is None or self.baseline == 0:
            return None
        return self.value / self.baseline


def _fmt(x: float | None) -> str:
    if x is None:
        return "—"
    if x != x:  # NaN
        return "n/a"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def print_table(rows: Sequence[Row], title: str = "") -> str:
    """Render rows as a Markdown table, print it, and return the text."""
    lines = []
    if title:
        lines.append(f"### {title}\n")
    lines.append("| bench | setup | value | baseline | ratio | note |")
    lines.append("| --- | --- | ---: | ---: | ---: | --- |")
    for r in rows:
        base = f"{_fmt(r.baseline)} {r.unit} ({r.baseline_name})" if r.baseline is not None else "—"
        ratio = f"{_fmt(r.ratio)}×" if r.ratio is not None else "—"
        lines.append(f"| {r.bench} | {r.setup} | {_fmt(r.value)} {r.unit} | {base} | {ratio} | {r.note} |")
    text = "\n".join(lines)
    print(text)
    return text


def machine() -> str:
    """One line naming the machine: CPU count, platform, Python."""
    return (
        f"{os.cpu_count()} CPUs, {platform.machine()}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )

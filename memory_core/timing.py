"""Latency summaries the CLI and benchmarks share."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["percentile"]


def percentile(samples_ms: Sequence[float], q: float) -> float:
    """The ``q`` percentile (0..100) of ``samples_ms`` by nearest rank; NaN for no samples."""
    if not samples_ms:
        return float("nan")
    ordered = sorted(samples_ms)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]

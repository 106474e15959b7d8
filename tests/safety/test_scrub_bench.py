"""``bench.scrub_bench``: its rows have the table's shape on the tiny data folder (no figure is asserted)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench import scrub_bench
from memory_core.settings import get_settings


def test_the_scrub_rows_sit_beside_the_unscrubbed_write_of_the_same_run(
    monkeypatch: pytest.MonkeyPatch, tiny_data_dir: Path
) -> None:
    monkeypatch.setenv("MEMORY_CORE_DATA_DIR", str(tiny_data_dir))
    get_settings.cache_clear()
    rows = scrub_bench.run(sizes=scrub_bench.Sizes(turns=3, documents=2, document_bytes=5_000))
    assert [(r.bench, r.setup, r.unit, r.baseline_name) for r in rows] == [
        ("scrub p50", "sqlite, 3 turns of 1 KB", "µs", "unscrubbed store_with(accepted)"),
        ("scrubbed store_with(accepted) p50", "sqlite, 3 turns of 1 KB", "µs", "unscrubbed store_with(accepted)"),
        ("scrub p99", "sqlite, 3 turns of 1 KB", "µs", "unscrubbed store_with(accepted)"),
        ("scrubbed store_with(accepted) p99", "sqlite, 3 turns of 1 KB", "µs", "unscrubbed store_with(accepted)"),
        ("scrub p50", "sqlite, 2 documents of 5 KB", "µs", "unscrubbed store"),
        ("scrubbed store p50", "sqlite, 2 documents of 5 KB", "µs", "unscrubbed store"),
        ("scrub p99", "sqlite, 2 documents of 5 KB", "µs", "unscrubbed store"),
        ("scrubbed store p99", "sqlite, 2 documents of 5 KB", "µs", "unscrubbed store"),
    ]
    assert all(math.isfinite(r.value) and r.value > 0 and r.baseline is not None and r.baseline > 0 for r in rows)


def test_the_bench_texts_are_distinct_and_of_the_asked_size() -> None:
    texts = scrub_bench._cut("abcdefghij" * 50, 100, 20)
    assert len(set(texts)) == 20 and all(len(t) <= 100 for t in texts)

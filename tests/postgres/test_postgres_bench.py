"""``bench.postgres_bench``: its rows have the benchmark table's shape (no figure is asserted)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from bench import postgres_bench, sqlite_bench
from memory_core.settings import get_settings

pytestmark = pytest.mark.postgres

TINY = sqlite_bench.Sizes(
    pre_turn=(20, 40), reference=frozenset(), calls=3, store_calls=3, store_held=20, build=(20, 40), build_new=5
)


@pytest.fixture
def tiny_data(monkeypatch: pytest.MonkeyPatch, tiny_data_dir: Path) -> Path:
    monkeypatch.setenv("MEMORY_CORE_DATA_DIR", str(tiny_data_dir))
    get_settings.cache_clear()
    return tiny_data_dir


def test_the_rows_sit_beside_sqlite_in_the_same_run(
    tiny_data: Path, pg_databases: Callable[[], str], tmp_path: Path
) -> None:
    rows = postgres_bench._pre_turn_rows(pg_databases(), tmp_path, TINY)
    rows += postgres_bench._store_rows(pg_databases(), tmp_path, TINY)
    assert [(r.bench, r.setup, r.baseline_name) for r in rows] == [
        ("pre_turn p50", "postgresql, 20 turns", "sqlite, 20 turns"),
        ("pre_turn p99", "postgresql, 20 turns", "sqlite, 20 turns"),
        ("post_turn p50", "postgresql, 20 turns", "sqlite, 20 turns"),
        ("post_turn p99", "postgresql, 20 turns", "sqlite, 20 turns"),
        ("store_with p50", "postgresql accepted, 20 turns", "sqlite accepted, 20 turns"),
        ("store_with p99", "postgresql accepted, 20 turns", "sqlite accepted, 20 turns"),
        ("pre_turn p50", "postgresql, 40 turns", "sqlite, 40 turns"),
        ("pre_turn p99", "postgresql, 40 turns", "sqlite, 40 turns"),
        ("post_turn p50", "postgresql, 40 turns", "sqlite, 40 turns"),
        ("post_turn p99", "postgresql, 40 turns", "sqlite, 40 turns"),
        ("store_with p50", "postgresql accepted, 40 turns", "sqlite accepted, 40 turns"),
        ("store_with p99", "postgresql accepted, 40 turns", "sqlite accepted, 40 turns"),
        ("store_with p50", "postgresql accepted, 20 held", "sqlite accepted (synchronous=full)"),
        ("store_with p99", "postgresql accepted, 20 held", "sqlite accepted (synchronous=full)"),
    ]
    assert all(math.isfinite(r.value) and r.value > 0 and r.baseline is not None for r in rows)


@pytest.mark.slow
def test_the_concurrency_row_counts_turns_and_errors(tiny_data: Path, pg_url: str) -> None:
    (row,) = postgres_bench._concurrency_rows(pg_url, quick=True)
    assert row.unit == "turns/s" and row.value > 0 and row.note == "0 errors"


def test_the_log_bench_pairs_each_figure_with_its_baseline_and_its_baseline_writes_no_record(pg_url: str) -> None:
    from bench import postgres_log_bench
    from memory_core import Document, MemoryMeta
    from memory_core.engines.postgres import PostgresEngine

    with PostgresEngine(pg_url) as engine:
        with postgres_log_bench._without_log():
            engine.store(Document.of("stored without the log", MemoryMeta()))
        assert engine.current_lsn() == 0
        engine.store(Document.of("stored with the log", MemoryMeta()))
        assert engine.current_lsn() == 1
    rows = postgres_log_bench._rows(pg_url, 200, 3)
    assert [(r.bench, r.baseline_name) for r in rows] == [
        ("store p50", "without the log"),
        ("store p99", "without the log"),
        ("store throughput", "without the log"),
        ("fetch p50", "without the log"),
        ("fetch p99", "without the log"),
        ("as_of fetch p50", "fetch now"),
        ("as_of fetch p99", "fetch now"),
        ("log size per memory", ""),
    ]
    assert all(r.value > 0 for r in rows)

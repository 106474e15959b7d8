"""``make bench`` / ``python -m bench.run``: each suite's rows have the table's shape, on the tiny data folder.

Shape only: names, units, finite values, baselines where a suite promises one. No figure is asserted (speed
belongs to bench/, not to tests).
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

from bench import bulk_fill, live_turn_bench, locomo_bench, sqlite_bench
from bench.common import Row, print_table
from memory_core import FetchMode, FetchRequest, MetaFilter, Namespace, Reach
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.settings import get_settings

TINY = sqlite_bench.Sizes(
    pre_turn=(20, 40), reference=frozenset({20}), calls=3, store_calls=3, store_held=20, build=(20, 40), build_new=5
)


@pytest.fixture
def tiny_data(monkeypatch: pytest.MonkeyPatch, tiny_data_dir: Path) -> Path:
    monkeypatch.setenv("MEMORY_CORE_DATA_DIR", str(tiny_data_dir))
    get_settings.cache_clear()
    return tiny_data_dir


def _finite(row: Row) -> bool:
    return math.isfinite(row.value) and (row.baseline is None or math.isfinite(row.baseline))


def test_the_sqlite_rows_read_the_data_dir_setting_and_have_the_tables_shape(tiny_data: Path) -> None:
    rows = sqlite_bench.run(sizes=TINY)
    assert [(r.bench, r.setup, r.unit) for r in rows] == [
        ("pre_turn p50", "sqlite, 20 turns", "ms"),
        ("pre_turn p99", "sqlite, 20 turns", "ms"),
        ("pre_turn p50", "sqlite, 40 turns", "ms"),
        ("pre_turn p99", "sqlite, 40 turns", "ms"),
        ("store_with p50", "sqlite accepted, 20 held", "ms"),
        ("store_with p99", "sqlite accepted, 20 held", "ms"),
        ("consolidate 5 new turns", "scope holding 40", "ms"),
    ]
    assert all(_finite(r) and r.value > 0 for r in rows)
    assert [r.baseline_name for r in rows[:3]] == ["reference engine", "reference engine", "sqlite at 20"]
    assert rows[3].baseline is None  # p99 growth has no like-for-like baseline
    assert rows[-1].baseline_name == "scope holding 20" and rows[-1].baseline is not None


def test_the_locomo_rows_have_the_tables_shape(tiny_data: Path) -> None:
    rows = locomo_bench.run(quick=True, sample="tiny-1")
    assert [r.bench for r in rows] == [
        "evidence recall, pack (1200 tok)",
        "evidence recall, pack, category 1 (multi-hop)",
        "evidence recall, fetch@5",
        "evidence recall, fetch@10",
        "evidence recall, fetch@20",
        "evidence recall, fetch@10, category 1 (multi-hop)",
        *(f"hybrid fetch p{q} (query encoding, lexical top 100, dense candidates, late interaction)" for q in (50, 99)),
        "pre_turn p50 during replay",
        "pre_turn p99 during replay",
    ]
    assert rows[0].setup == "LoCoMo tiny-1, 4 questions" and rows[-1].setup == "replay tiny-1, 8 turns"
    assert all(_finite(r) and r.baseline is not None for r in rows)
    assert all(0 <= r.value <= 100 and r.unit == "%" for r in rows[:4])


def test_a_missing_data_dir_is_named_with_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MEMORY_CORE_DATA_DIR", str(tmp_path / "nowhere"))
    get_settings.cache_clear()
    for suite in (lambda: sqlite_bench.run(sizes=TINY), lambda: locomo_bench.run(quick=True)):
        with pytest.raises(FileNotFoundError, match="MEMORY_CORE_DATA_DIR"):
            suite()


def test_the_table_has_one_line_per_row_and_six_columns(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [Row("a p50", "x", 1.5, "ms", 3.0, "base"), Row("b", "y", 250.0, "jobs/s")]
    text = print_table(rows, title="t")
    lines = text.splitlines()
    assert lines[0] == "### t" and len(lines) == 6
    assert lines[-2] == "| a p50 | x | 1.50 ms | 3.00 ms (base) | 0.50× |  |"
    assert lines[-1] == "| b | y | 250 jobs/s | — | — |  |"
    assert all(line.count("|") == 7 for line in lines[2:])
    assert capsys.readouterr().out.strip() == text.strip()


def test_the_live_turn_rows_have_the_tables_shape_and_count_what_the_worker_did(tiny_data: Path) -> None:
    """A real worker process ingests and builds beside the timed calls; the counts are in the notes."""
    rows = live_turn_bench.run(sizes=live_turn_bench.Sizes((20, 40), 3), sample="tiny-1")
    timed = [f"{name} p{q} (b) worker" for name in ("pre_turn", "post_turn") for q in (50, 99)]
    pool = [f"pre_turn {q}, reads on the caller" for q in ("p50", "p99", "CPU p50")]
    each = [*timed, "fill", "host RSS after the first pre_turn", "cold start: first pre_turn", *pool]
    holds = [r for r in rows if r.bench.startswith("lock hold p99, ")]
    assert [r.bench for r in rows if r not in holds] == ["fill", *each, *each, "small agent pre_turn p99"]
    # the lock holds per kind: the host's live writes and the worker's build transactions at each size
    for size in ("20 stored", "40 stored (one big agent)"):
        kinds = {r.bench.removeprefix("lock hold p99, ") for r in holds if r.setup == size}
        assert {"host live", "worker build"} <= kinds, kinds
    rows = [r for r in rows if r not in holds]
    assert rows[0].setup == "the demo's data"
    assert [r.setup for r in rows[1:10]] == ["20 stored"] * 9
    assert all(_finite(r) and r.value > 0 for r in rows)
    assert all(r.baseline_name == "(a) no worker" for r in rows[1:5])
    assert "0 waited past one background tx" in rows[1].note
    assert "query encodes per pre_turn 1.00" in rows[1].note  # each pre_turn's question encoded once
    assert rows[6].baseline_name == "before opening the file" and rows[6].value >= rows[6].baseline  # type: ignore[operator]
    assert rows[-1].baseline_name == "before the big agent ((a) at 20)"


def test_the_bulk_fill_stores_copies_the_engine_reads_like_its_own(
    tiny_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 1M size's filler: a seed through the engine, the rest copied in SQL into every table a turn writes."""
    monkeypatch.setattr(bulk_fill, "SEED", 10)
    turns, _ = sqlite_bench._locomo()
    db = tmp_path / "bulk.db"
    big = Namespace.agent("big")
    seeded = bulk_fill.bulk_fill(SQLiteEngine(db), db, sqlite_bench._turns(turns, 35, node=big, tag="big"), 35)
    assert seeded == 10
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        conn.execute("INSERT INTO items_fts (items_fts, rank) VALUES ('integrity-check', 1)")
        counts = [conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("items", "bodies", "item_terms")]
        assert counts == [35, 35, 35]
        assert conn.execute(
            "SELECT count(DISTINCT id), count(DISTINCT thread_id || turn_first) FROM items"
        ).fetchone() == (35, 35)
        assert conn.execute("SELECT count(*) FROM log WHERE op = 'put'").fetchone()[0] == 35
        assert conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'items'").fetchone()[0] == 35
        when = [r[0] for r in conn.execute("SELECT observed_at FROM items ORDER BY seq")]
        assert when[10] > max(when[:10]) and when[20] > max(when[10:20])  # each copy follows the one before in time
        first = conn.execute("SELECT text FROM bodies WHERE seq = 1").fetchone()[0]
        same = conn.execute("SELECT count(*) FROM bodies WHERE text = ?", (first,)).fetchone()[0]
    assert same >= 4  # the seed's first turn and its three copies
    with SQLiteEngine(db) as engine:
        assert engine.stats()["items"] == 35
        request = FetchRequest(
            query=first, mode=FetchMode.KEYWORD, filter=MetaFilter(reach=Reach.subtree(big)), limit=50
        )
        assert len({h.id for h in engine.fetch(request).hits if h.text == first}) == same  # indexed like the seed


def test_the_log_rows_pair_each_figure_with_its_baseline(tiny_data: Path) -> None:
    from bench import log_bench

    rows = log_bench.run(size=40, calls=3)
    assert [(r.bench, r.baseline_name) for r in rows] == [
        ("store_with p50", "without the log"),
        ("store_with p99", "without the log"),
        ("pre_turn p50", "without the log"),
        ("pre_turn p99", "without the log"),
        ("as_of fetch p50", "fetch now"),
        ("as_of fetch p99", "fetch now"),
        ("log size per memory", ""),
    ]
    assert all(_finite(r) and r.value > 0 for r in rows)

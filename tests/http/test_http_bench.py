"""``bench.http_bench`` on the tiny data folder: a real server and worker, the rows' shape (no figure asserted)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench import http_bench
from memory_core.settings import get_settings


@pytest.mark.slow
def test_the_http_and_prefetch_rows_have_the_tables_shape(
    monkeypatch: pytest.MonkeyPatch, tiny_data_dir: Path, tmp_path: Path
) -> None:
    monkeypatch.setenv("MEMORY_CORE_DATA_DIR", str(tiny_data_dir))
    monkeypatch.setenv("MEMORY_CORE_BROKER_URL", "")  # the server-less transport: no Redis needed
    monkeypatch.setenv("MEMORY_CORE_BUILD_BELIEFS_EVERY", "3")  # builds due within the 8 turns, for the worker
    get_settings.cache_clear()
    rows = http_bench.run(quick=True, sample="tiny-1")
    assert [r.bench for r in rows] == [
        "HTTP pre_turn p50",
        "HTTP pre_turn p99",
        "HTTP post_turn p50",
        "HTTP post_turn p99",
        "prefetch pre_turn, cache hot p50",
        "prefetch pre_turn, cache hot p99",
        "prefetch pre_turn, hit p50",
        "prefetch pre_turn, hit p99",
        "HTTP pre_turn, serve --prefetch p50",
        "HTTP pre_turn, serve --prefetch p99",
    ]
    assert rows[0].setup == "replay tiny-1, 8 turns, worker running"
    assert [r.baseline_name for r in rows] == ["in-process"] * 4 + ["no cache"] * 2 + ["miss"] * 2 + [
        "HTTP, no cache"
    ] * 2
    assert all(math.isfinite(r.value) and r.baseline is not None and math.isfinite(r.baseline) for r in rows)
    built, queued = rows[2].note.split(" queued")[0].split(" of ")
    assert int(queued) >= 1 and int(built) == int(queued)  # the worker ran every queued build, read over HTTP
    served, total = rows[5].note.split(" pre_turns")[0].split(" of ")
    assert int(total) == 8 and 0 < int(served) < 8  # first turns are cold; later ones come from the cache
    hits, misses = rows[7].note.split(" misses")[0].split(" hits, ")
    assert int(hits) == int(served) and int(hits) + int(misses) == 8  # the split counts every pre_turn once
    served, total = rows[-1].note.split(" from")[0].split(" of ")
    assert int(total) == 8 and int(served) < 8  # over HTTP too (how many depends on the refresh's speed)

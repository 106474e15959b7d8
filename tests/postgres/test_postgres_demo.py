"""``memory-core demo --engine postgresql://…`` runs the main job on PostgreSQL: its worker builds there too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from memory_core.engines.postgres.schema import SCHEMA

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def test_the_demo_runs_on_postgresql(pg_url: str, tmp_path: Path, tiny_data_dir: Path) -> None:
    url = pg_url.replace("postgresql://postgres@", "postgresql://postgres:hunter2@")  # trust auth: only masked
    env = {
        **os.environ,
        "MEMORY_CORE_DATA_DIR": str(tiny_data_dir),
        "MEMORY_CORE_VAR_DIR": str(tmp_path / "var"),
        "COLUMNS": "200",
    }
    argv = [sys.executable, "-m", "memory_core", "demo", "--sample", "tiny-1", "--questions", "1", "--engine", url]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "engine  postgresql://postgres:***@" in output and "hunter2" not in output
    assert "0 failed, 0 still pending" in output
    assert re.search(r"evidence recall\s+│\s+pack \d+\.\d% vs BM25", output), output
    assert not (tmp_path / "var" / "demo" / "memory.db").exists()
    with psycopg.connect(pg_url) as conn:
        items = conn.execute(f"SELECT count(*) FROM {SCHEMA}.items").fetchone()
        beliefs = conn.execute(f"SELECT count(*) FROM {SCHEMA}.beliefs").fetchone()
    assert items is not None and items[0] > 16 and beliefs is not None and beliefs[0] > 0


def test_eval_locomo_runs_on_postgresql_and_never_shows_the_password(
    pg_url: str, tmp_path: Path, tiny_data_dir: Path
) -> None:
    from typer.testing import CliRunner

    from memory_core.cli import load_commands

    url = pg_url.replace("postgresql://postgres@", "postgresql://postgres:hunter2@")
    out = tmp_path / "eval.json"
    data = tiny_data_dir / "locomo" / "locomo_dev.json"
    result = CliRunner().invoke(load_commands(), ["eval", "locomo", str(data), "--engine", url, "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "hunter2" not in result.output and "hunter2" not in out.read_text()
    assert '"engine": "postgresql://postgres:***@' in out.read_text()

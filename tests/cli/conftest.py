"""Fixtures shared by the CLI tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._cli import cli_env


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """Settings for one test: its own var folder and SQLite file, no broker (server-less), no engine plugins."""
    return cli_env(tmp_path, "cli-test")

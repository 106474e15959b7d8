"""Fixtures shared by the CLI tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_core.settings import get_settings


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """Settings for one test: its own var folder and SQLite file, no broker (server-less), no engine plugins."""
    get_settings.cache_clear()
    return {
        "MEMORY_CORE_VAR_DIR": str(tmp_path / "var"),
        "MEMORY_CORE_ENGINE": f"sqlite:///{tmp_path / 'memory.db'}",
        "MEMORY_CORE_BROKER_URL": "",
        "MEMORY_CORE_REDIS_PREFIX": "cli-test",
        "MEMORY_CORE_ENGINE_PLUGINS": "",
    }

"""Running ``memory-core`` in process for tests: one settings cache cleared around each call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import Result
from typer.testing import CliRunner

from memory_core.cli import load_commands
from memory_core.settings import get_settings

runner = CliRunner()
app = load_commands()


LOCOMO_MINI: dict[str, Any] = {
    "sample_id": "mini",
    "conversation": {
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat named Luna."},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "Cute! I got a parrot."},
        ],
    },
    "qa": [{"question": "What is Ann's cat called?", "answer": "Luna", "evidence": ["D1:1"], "category": 4}],
}
"""A one-session LoCoMo sample with one question: the smallest file ``eval locomo`` and ``replay`` take."""


def cli_env(tmp_path: Path, prefix: str) -> dict[str, str]:
    """Settings for one test: its own var folder and SQLite file, no broker (server-less), no engine plugins."""
    get_settings.cache_clear()
    return {
        "MEMORY_CORE_VAR_DIR": str(tmp_path / "var"),
        "MEMORY_CORE_ENGINE": f"sqlite:///{tmp_path / 'memory.db'}",
        "MEMORY_CORE_BROKER_URL": "",
        "MEMORY_CORE_REDIS_PREFIX": prefix,
        "MEMORY_CORE_ENGINE_PLUGINS": "",
    }


def invoke(env: dict[str, Any], *args: str) -> Result:
    """``memory-core ARGS`` with the settings read from ``env`` alone (the cache is cleared before and after)."""
    get_settings.cache_clear()
    try:
        return runner.invoke(app, list(args), env=env)
    finally:
        get_settings.cache_clear()


def one_line_error(result: Result) -> str:
    """The command's error: exactly one line on stderr, no traceback."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]

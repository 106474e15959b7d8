"""Running ``memory-core`` in process for tests: one settings cache cleared around each call."""

from __future__ import annotations

from typing import Any

from click.testing import Result
from typer.testing import CliRunner

from memory_core.cli import load_commands
from memory_core.settings import get_settings

runner = CliRunner()
app = load_commands()


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

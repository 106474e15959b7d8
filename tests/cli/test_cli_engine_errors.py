"""One way to open an engine and one error mapping (cli._common.engine_session): a bad URL, an engine that
cannot be opened, and an engine failing mid-command read the same in recall, context, status and replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import memory_core.engines as engines
from memory_core.cli._common import describe_error, exit_code_for
from memory_core.errors import (
    ConfigError,
    Conflict,
    EngineError,
    EngineUnavailable,
    InvalidRequest,
    NotFound,
    Unauthorized,
)
from tests._cli import invoke

PLUGIN = """
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import EngineUnavailable


def down(url):
    raise EngineUnavailable("engine server at 10.0.0.9:7700 refused the connection")


class Failing(ReferenceEngine):
    def _fail(self, *args, **kwargs):
        raise EngineUnavailable("engine server stopped answering")

    explore = fetch = list = scopes = recall = store_with = store = _fail


def failing(url):
    return Failing()
"""

COMMANDS = [["recall", "hello"], ["context"], ["status"], ["replay", "CHAT", "--inline"]]


@pytest.fixture(autouse=True)
def _own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engines, "_REGISTRY", dict(engines._REGISTRY))


@pytest.fixture
def plugin_env(env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "mc_errors_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(folder))
    return {**env, "MEMORY_CORE_ENGINE_PLUGINS": "down=mc_errors_plugin:down,failing=mc_errors_plugin:failing"}


@pytest.fixture
def chat(tmp_path: Path) -> Path:
    path = tmp_path / "chat.jsonl"
    rows = [
        {"thread": "t1", "role": "user", "content": "I moved to Lisbon in March."},
        {"thread": "t1", "role": "assistant", "content": "Lisbon is lovely in spring."},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def _args(command: list[str], chat: Path) -> list[str]:
    return [str(chat) if a == "CHAT" else a for a in command]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InvalidRequest("bad", field="limit"), 2),
        (ConfigError("bad url"), 2),
        (EngineUnavailable("down"), 1),
        (EngineError("broken"), 1),
        (Conflict("newer schema"), 1),
        (Unauthorized("key rejected"), 1),
        (NotFound("gone"), 1),
    ],
)
def test_exit_codes_split_bad_input_from_a_failing_engine(error: Exception, code: int) -> None:
    assert exit_code_for(error, opening=False) == code  # type: ignore[arg-type]
    assert exit_code_for(error, opening=True) == 2  # type: ignore[arg-type]


def test_only_a_transient_error_carries_the_retry_hint() -> None:
    assert describe_error(EngineUnavailable("down")).endswith("(transient: retry once the engine answers)")
    assert describe_error(EngineError("broken")) == "engine error: broken"


def test_an_unknown_scheme_reads_the_same_in_every_command(plugin_env: dict[str, str], chat: Path) -> None:
    lines = set()
    for command in COMMANDS:
        result = invoke(plugin_env, *_args(command, chat), "--engine", "nosuch://x")
        assert result.exit_code == 2, (command, result.output)
        lines.add(result.stderr.strip())
    assert len(lines) == 1, lines
    assert lines.pop().startswith("configuration error: unknown engine scheme 'nosuch'")


def test_an_engine_that_cannot_be_opened_reads_the_same_in_every_command(
    plugin_env: dict[str, str], chat: Path
) -> None:
    lines = set()
    for command in COMMANDS:
        result = invoke(plugin_env, *_args(command, chat), "--engine", "down://x")
        assert result.exit_code == 2, (command, result.output)
        lines.add(result.stderr.strip())
    assert lines == {
        "unavailable: engine server at 10.0.0.9:7700 refused the connection (transient: retry once the engine answers)"
    }


@pytest.mark.parametrize("what", ["text", "folder", "truncated"])
def test_a_path_that_is_no_sqlite_database_exits_2_without_the_retry_hint(
    env: dict[str, str], tmp_path: Path, chat: Path, what: str
) -> None:
    """A text file, a folder, or a database cut short stays so: it is refused as permanent, never as transient."""
    path = tmp_path / "not.db"
    if what == "text":
        path.write_text("these are notes, not a database\n" * 200)
    elif what == "folder":
        path.mkdir()
    else:
        invoke({**env, "MEMORY_CORE_ENGINE": f"sqlite:///{path}"}, "replay", str(chat), "--inline")
        path.write_bytes(path.read_bytes()[:1500])  # past the 100-byte header: the schema pages are gone
    for command in COMMANDS:
        result = invoke(env, *_args(command, chat), "--engine", f"sqlite:///{path}")
        assert result.exit_code == 2, (command, result.output)
        assert result.stderr.startswith(f"engine error: {path} is not a"), (command, result.stderr)
        assert "transient" not in result.output and "retry" not in result.output, (command, result.output)


@pytest.mark.parametrize("command", [["status"], ["replay", "CHAT", "--inline"]], ids=lambda c: c[0])
def test_an_engine_failing_mid_command_exits_1_with_the_mapped_error(
    plugin_env: dict[str, str], chat: Path, command: list[str]
) -> None:
    result = invoke(plugin_env, *_args(command, chat), "--engine", "failing://x")
    assert result.exit_code == 1, result.output
    assert "unavailable: engine server stopped answering (transient: retry once the engine answers)" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", [["recall", "hello"], ["context"]], ids=lambda c: c[0])
def test_a_pack_whose_every_read_failed_exits_1_naming_the_engine_error(
    plugin_env: dict[str, str], command: list[str]
) -> None:
    result = invoke(plugin_env, *command, "--engine", "failing://x")
    assert result.exit_code == 1, result.output
    assert "unavailable: engine server stopped answering" in result.stderr

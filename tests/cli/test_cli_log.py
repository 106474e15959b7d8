"""``memory-core log``, ``history``, ``retract``, ``rollback`` and ``recall --as-of`` (issue 19), on SQLite."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memory_core import ConsolidateRequest, Conversation, MemoryMeta, Reach
from memory_core.cli import load_commands
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.items import Role, Turn
from memory_core.namespace import Namespace
from memory_core.settings import get_settings

runner = CliRunner()
app = load_commands()


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, str, str]:
    """A file holding one user turn and the belief built on it: ``(url, turn id, belief id)``."""
    path = tmp_path / "memory.db"
    meta = MemoryMeta(namespace=Namespace.agent("assistant"), thread_id="t1", agent_id="assistant")
    with SQLiteEngine(path) as engine:
        turn = engine.store(
            Conversation(turns=(Turn(role=Role.USER, text="My sister Ana lives in Porto."),), meta=meta)
        )
        engine.consolidate(ConsolidateRequest(reach=Reach.subtree()))
        belief = next(r.id for r in engine.log(0, 10).records if r.id != turn.id)
    return f"sqlite:///{path}", turn.id, belief


def invoke(url: str, *args: str):  # type: ignore[no-untyped-def]
    get_settings.cache_clear()
    result = runner.invoke(app, [args[0], "--engine", url, *args[1:]])
    get_settings.cache_clear()
    return result


def _refs(url: str, *extra: str) -> list[str]:
    result = invoke(url, "recall", "Where does Ana live?", "--json", *extra)
    assert result.exit_code == 0, result.output
    return [r["id"] if isinstance(r, dict) else r for r in json.loads(result.stdout)["refs"]]


def _lsn(url: str) -> int:
    with SQLiteEngine(url.removeprefix("sqlite:///")) as engine:
        return engine.current_lsn()


def test_the_scenario_through_the_cli(store: tuple[str, str, str]) -> None:
    url, turn, belief = store
    shown = invoke(url, "log")
    assert shown.exit_code == 0 and turn in shown.stdout and "built" in shown.stdout
    assert turn in _refs(url)
    before = _lsn(url)
    when = datetime.now(UTC).isoformat()

    retracted = invoke(url, "retract", turn, "--why", "the user misspoke")
    assert retracted.exit_code == 0, retracted.output
    assert "retract" in retracted.stdout and f"stale     {belief}" in retracted.stdout
    assert turn not in _refs(url)
    assert turn in _refs(url, "--as-of", str(before))
    assert turn in _refs(url, "--as-of", when)  # a time names the LSN written by then

    rolled = invoke(url, "rollback", str(before), "--why", "it was right after all")
    assert rolled.exit_code == 0 and rolled.stdout.count("restore") == 2
    assert turn in _refs(url)
    history = invoke(url, "history", belief)
    assert history.exit_code == 0
    assert [line.split()[3] for line in history.stdout.splitlines()[:3]] == ["put", "stale", "restore"]
    assert history.stdout.splitlines()[-1] == "now: live/long"
    page = json.loads(invoke(url, "log", "--since", "1", "--limit", "2", "--json").stdout)
    assert [r["lsn"] for r in page["records"]] == [2, 3] and page["next_since"] == 3


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("rollback", "--why", "x", "--", "-1"), "to_lsn"),
        (("rollback", "999", "--why", "x"), "to_lsn"),
        (("retract", "abc", "--why", " "), "reason"),
        (("recall", "Ana", "--as-of", "last tuesday"), "as_of"),
        (("recall", "Ana", "--as-of", "999"), "lsn"),
        (("log", "--limit", "0"), "limit"),
    ],
)
def test_bad_input_exits_2_naming_the_field_and_writes_nothing(
    store: tuple[str, str, str], args: tuple[str, ...], field: str
) -> None:
    url, _, _ = store
    before = _lsn(url)
    result = invoke(url, *args)
    assert result.exit_code == 2, result.output
    assert f"{field}:" in result.stderr and "Traceback" not in result.stderr
    assert _lsn(url) == before

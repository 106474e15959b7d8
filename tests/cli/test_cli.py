"""The memory-core command line, end to end on a temporary SQLite file and the server-less transport."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memory_core.cli import load_commands
from memory_core.settings import get_settings

runner = CliRunner()
app = load_commands()
PEPS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "docs" / "peps"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """Settings for one test: its own var folder and SQLite file, no broker (server-less)."""
    get_settings.cache_clear()
    return {
        "MEMORY_CORE_VAR_DIR": str(tmp_path / "var"),
        "MEMORY_CORE_ENGINE": f"sqlite:///{tmp_path / 'memory.db'}",
        "MEMORY_CORE_BROKER_URL": "",
        "MEMORY_CORE_REDIS_PREFIX": "cli-test",
    }


def invoke(env: dict[str, str], *args: str):  # type: ignore[no-untyped-def]
    get_settings.cache_clear()
    result = runner.invoke(app, list(args), env=env)
    get_settings.cache_clear()
    return result


@pytest.fixture
def chat(tmp_path: Path) -> Path:
    path = tmp_path / "chat.jsonl"
    rows = [
        {"thread": "t1", "role": "user", "content": "I moved to Lisbon in March.", "at": "2024-03-02T10:00:00Z"},
        {"thread": "t1", "role": "assistant", "content": "Lisbon is lovely in spring."},
        {"thread": "t1", "role": "user", "content": "My favourite food is grilled sardines."},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def test_replay_inline_then_recall_finds_the_turns(env: dict[str, str], chat: Path) -> None:
    result = invoke(env, "replay", str(chat), "--inline", "--agent", "helper")
    assert result.exit_code == 0, result.output
    assert "3 turns replayed for helper" in result.output
    result = invoke(env, "recall", "Where do I live now?", "--agent", "helper")
    assert result.exit_code == 0, result.output
    assert "Lisbon" in result.output and "# Memory" in result.output
    result = invoke(env, "recall", "sardines", "--agent", "helper", "--json")
    pack = json.loads(result.output)
    assert pack["refs"] and pack["engine"] == "sqlite"


def test_context_writes_context_md(env: dict[str, str], chat: Path, tmp_path: Path) -> None:
    assert invoke(env, "replay", str(chat), "--inline").exit_code == 0
    out = tmp_path / "context.md"
    result = invoke(env, "context", "--output", str(out))
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.startswith("---\ngenerated_at: ") and "# Context" in text


def test_ingest_queues_jobs_and_status_shows_them_waiting(env: dict[str, str]) -> None:
    result = invoke(env, "ingest", str(PEPS / "pep-0008.rst"), str(PEPS / "pep-0020.rst"), "--collection", "peps")
    assert result.exit_code == 0, result.output
    match = re.search(r"2 documents in (\d+) ingest_brain jobs? queued", result.output)
    assert match, result.output
    result = invoke(env, "status", "--json")
    assert result.exit_code == 0, result.output
    status = json.loads(result.output)
    assert status["jobs"]["queues"]["ingest"] == int(match.group(1))
    assert status["jobs"]["workers"] is None
    assert status["items"] == {}


def test_ingest_reports_a_bad_file_and_exits_1(env: dict[str, str], tmp_path: Path) -> None:
    good, bad = tmp_path / "ok.md", tmp_path / "bad.txt"
    good.write_text("# Notes\n\nRefunds take five days.")
    bad.write_bytes(b"\x00\x01binary")
    result = invoke(env, "ingest", str(good), str(bad))
    assert result.exit_code == 1
    assert "failed" in result.output and "bad.txt" in result.output
    assert re.search(r"1 document in \d+ ingest_brain jobs? queued", result.output), result.output


def test_ingest_of_nothing_usable_exits_1(env: dict[str, str], tmp_path: Path) -> None:
    result = invoke(env, "ingest", str(tmp_path / "missing.md"))
    assert result.exit_code == 1


def test_replay_refuses_a_malformed_file(env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"thread": "t", "role": "robot", "content": "x"}\n')
    result = invoke(env, "replay", str(path), "--inline")
    assert result.exit_code == 2
    assert "role" in result.output


def test_an_unknown_engine_scheme_exits_2_listing_the_known_ones(env: dict[str, str]) -> None:
    result = invoke({**env, "MEMORY_CORE_ENGINE": "nosuch://x"}, "recall", "hello")
    assert result.exit_code == 2
    assert "reference" in result.output and "sqlite" in result.output


def test_eval_locomo_prints_the_table_and_writes_json(env: dict[str, str], tmp_path: Path) -> None:
    sample = {
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
    data, out = tmp_path / "mini.json", tmp_path / "eval.json"
    data.write_text(json.dumps([sample]))
    result = invoke(env, "eval", "locomo", str(data), "--json", str(out), "--k", "1")
    assert result.exit_code == 0, result.output
    assert "evidence recall" in result.output and "bm25@1" in result.output
    written = json.loads(out.read_text())
    assert written["methods"][0]["method"] == "pack" and written["methods"][0]["n"] == 1
    brain = tmp_path / "brain"
    brain.mkdir()
    (brain / "pets.md").write_text("# Pets\n\nLuna is a cat.\n", encoding="utf-8")
    result = invoke(env, "eval", "locomo", str(data), "--json", str(out), "--k", "1", "--brain", str(brain))
    assert result.exit_code == 0, result.output
    assert "Brain bullets per pack" in result.output and json.loads(out.read_text())["brain_items"] == 1


def test_a_malformed_setting_exits_2_naming_the_variable(env: dict[str, str]) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "memory_core", "recall", "hello"],
        env={**env, "MEMORY_CORE_BUDGET_TOKENS": "lots", "PATH": ""},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "MEMORY_CORE_BUDGET_TOKENS" in result.stderr
    assert "Traceback" not in result.stderr


def test_conformance_on_a_corrupt_file_exits_2_and_leaves_it_untouched(env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "corrupt.db"
    bad.write_bytes(b"not a database at all")
    result = invoke(env, "conformance", "--engine", f"sqlite:///{bad}")
    assert result.exit_code == 2
    assert "corrupt.db" in result.output
    assert bad.read_bytes() == b"not a database at all"

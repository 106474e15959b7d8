"""Usage errors a new user met: each exits 2 with one line naming the option, checked before any long work, and
nothing stored is lost (docs/cli.md, exit codes): ``eval locomo --json`` a path that cannot be written,
``worker --queues`` a queue no job is routed to, ``conformance`` with no engine named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import memory_core.cli.eval as eval_command
from memory_core.cli import load_commands
from memory_core.settings import Settings
from tests._cli import LOCOMO_MINI, invoke, one_line_error
from workers.config import known_queues, resolve_queues

app = load_commands()


@pytest.fixture
def locomo(tmp_path: Path) -> Path:
    path = tmp_path / "mini.json"
    path.write_text(json.dumps([LOCOMO_MINI]))
    return path


@pytest.fixture
def no_run(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Calls of the eval's replay: a refused --json must stop before it."""
    calls: list[object] = []

    def refuse(*args: object, **kwargs: object) -> None:
        calls.append(args)
        raise AssertionError("the eval ran before its --json path was checked")

    monkeypatch.setattr(eval_command, "run_locomo_eval", refuse)
    return calls


# 1. eval locomo --json ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("FILE/x.json", "--json: FILE is not a folder"),
        ("FILE/deeper/x.json", "--json: FILE is not a folder"),
        ("/proc/nope/x.json", "--json: cannot create the folder /proc/nope: "),
        ("/proc/x.json", "--json: cannot write /proc/x.json: "),
        ("DIR", "--json: DIR is a folder; name a file in it, e.g. DIR/locomo.json"),
    ],
    ids=["under-a-file", "deeper-under-a-file", "proc-missing-folder", "proc-file", "a-folder"],
)
def test_eval_json_that_cannot_be_written_exits_2_before_the_run(
    env: dict[str, str], locomo: Path, tmp_path: Path, no_run: list[object], where: str, expected: str
) -> None:
    a_file = tmp_path / "file.jsonl"
    a_file.write_text("kept\n")
    a_dir = tmp_path / "out"
    a_dir.mkdir()

    def fill(text: str) -> str:
        return text.replace("FILE", str(a_file)).replace("DIR", str(a_dir))

    result = invoke(env, "eval", "locomo", str(locomo), "--sample", "mini", "--json", fill(where))
    assert result.exit_code == 2, result.output
    assert one_line_error(result).startswith(fill(expected))
    assert no_run == []
    assert a_file.read_text() == "kept\n" and list(a_dir.iterdir()) == []


def test_eval_json_in_new_folders_creates_them_and_writes_the_results(
    env: dict[str, str], locomo: Path, tmp_path: Path
) -> None:
    target = tmp_path / "new" / "deeper" / "eval.json"
    result = invoke(env, "eval", "locomo", str(locomo), "--json", str(target), "--k", "1")
    assert result.exit_code == 0, result.output
    assert json.loads(target.read_text())["methods"][0]["n"] == 1


# 2. worker --queues ----------------------------------------------------------------------------------------------
def test_known_queues_are_the_routed_queues_under_their_configured_names() -> None:
    settings = Settings(_env_file=None, queue_ingest="nc-ingest")
    assert known_queues(settings) == {"beliefs": "beliefs", "ingest": "nc-ingest", "maintenance": "maintenance"}
    assert resolve_queues(settings, "ingest,bogus") == (["nc-ingest", "bogus"], ["bogus"])


@pytest.mark.parametrize("queues", ["bogus", "beliefs,bogus", "celery"])
def test_worker_refuses_a_queue_no_job_is_routed_to_naming_the_option_and_the_valid_names(
    tmp_path: Path, queues: str
) -> None:
    # var_dir under a file: had the command gone on to prepare the worker, that would fail with a ConfigError
    (tmp_path / "a-file").write_text("")
    env = {"MEMORY_CORE_VAR_DIR": str(tmp_path / "a-file" / "var"), "MEMORY_CORE_QUEUE_INGEST": "nc-ingest"}
    result = invoke(env, "worker", "--queues", queues)
    assert result.exit_code == 2, result.output
    error = one_line_error(result)
    bad = [q for q in queues.split(",") if q != "beliefs"]
    assert error.startswith(f"--queues: {', '.join(repr(q) for q in bad)} is no queue of this app"), error
    assert "give beliefs, ingest (nc-ingest), maintenance" in error


# 3. conformance without an engine ---------------------------------------------------------------------------------
@pytest.mark.parametrize("extra", [[], ["--faults"], ["--allow-existing"]], ids=["suite", "faults", "allow"])
def test_conformance_without_an_engine_refuses_the_default_store_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the default engine is ./var/memory.db, relative to here (no .env here)
    monkeypatch.delenv("MEMORY_CORE_ENGINE", raising=False)
    result = invoke({"MEMORY_CORE_ENGINE": None, "MEMORY_CORE_ENGINE_PLUGINS": ""}, "conformance", *extra)
    assert result.exit_code == 2, result.output
    error = one_line_error(result)
    assert error.startswith("--engine is required: name the engine to test"), error
    assert "sqlite:///./var/memory.db is your own store" in error
    assert not (tmp_path / "var").exists()  # no database created, no record left


def test_conformance_takes_the_engine_the_setting_names(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    result = invoke({"MEMORY_CORE_ENGINE": url, "MEMORY_CORE_ENGINE_PLUGINS": ""}, "conformance", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["passed"] is True

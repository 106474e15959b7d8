"""``memory-core dead-letters``: a list readable at 80 columns, a raw letter refused plainly, purge without a TTY."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import workers.transport
from memory_core.settings import Settings, get_settings
from tests._cli import invoke
from workers.dead_letters import DeadLetter, DeadLetterStore
from workers.execution import close_runtime
from workers.queue import open_dead_letters

JOB_ID = "901cdb17-3c1a-4a7e-9d51-6f4e2b7d0c11"
REASON = "invalid request: documents.0.text: document text is blank and cannot be stored as a brain passage"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """Server-less settings: the letters live in ``var/coordination.db``."""
    return {"MEMORY_CORE_VAR_DIR": str(tmp_path / "var"), "MEMORY_CORE_BROKER_URL": ""}


@pytest.fixture
def letters(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[DeadLetterStore]:
    """The store the CLI reads, with a job's letter and a raw message's letter (written as a worker does)."""
    settings = Settings(_env_file=None, var_dir=env["MEMORY_CORE_VAR_DIR"], broker_url="")
    store = open_dead_letters(settings)
    job = {"job": "ingest_brain", "documents": [{"text": "", "source": "files"}]}
    store.put(
        DeadLetter.of(JOB_ID, "InvalidRequest", payload=job, task="memory.ingest_brain", attempts=1, message=REASON)
    )
    with monkeypatch.context() as patched:  # the dead letters are the runtime's, opened from the settings
        patched.setenv("MEMORY_CORE_VAR_DIR", env["MEMORY_CORE_VAR_DIR"])
        get_settings.cache_clear()
        close_runtime()
        try:
            reason = "not JSON (JSONDecodeError: Expecting value)"
            workers.transport.dead_letter_raw("not json at all", "ingest", reason)
        finally:
            close_runtime()
    get_settings.cache_clear()
    yield store


def _raw_id(store: DeadLetterStore) -> str:
    return next(x.id for x in store.list() if x.id.startswith("raw-"))


def test_the_list_at_80_columns_keeps_each_letter_on_a_compact_line_and_its_message_readable(
    env: dict[str, str], letters: DeadLetterStore
) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "memory_core", "dead-letters", "list"],
        env={**os.environ, **env, "COLUMNS": "80"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = out.splitlines()
    assert lines[0].startswith("dead letters: 2; per letter: id  time (UTC)  task  ×attempts")
    head = next(line for line in lines if line.startswith(JOB_ID))
    assert head.endswith("  ingest_brain  ×1") and len(head) <= 80, head
    raw = next(line for line in lines if line.startswith(_raw_id(letters)))
    assert raw.endswith("  (no task)  ×0") and len(raw) <= 80, raw
    assert all(len(line) <= 80 for line in lines[1:]), out
    body = " ".join(line.strip() for line in lines[lines.index(head) + 1 :] if line.startswith("    "))
    assert body.startswith(f"InvalidRequest: {REASON}"), out  # whole words, wrapped, not a 5-character column


def test_requeueing_a_raw_letter_says_it_holds_no_job_and_how_to_see_it(
    env: dict[str, str], letters: DeadLetterStore
) -> None:
    raw = _raw_id(letters)
    result = invoke(env, "dead-letters", "requeue", raw[:12])
    assert result.exit_code == 1, result.output
    assert f"dead letter {raw} holds no job to requeue: it is a message that never was a job" in result.output
    assert f"memory-core dead-letters show {raw}" in result.output
    assert "invalid JSON" not in result.output
    assert raw in {x.id for x in letters.list()}  # kept


def test_requeueing_a_job_the_parser_refuses_says_why(env: dict[str, str], letters: DeadLetterStore) -> None:
    letters.put(DeadLetter.of("j2", "InvalidRequest", payload={"job": "nope"}, task="memory.ingest_brain"))
    result = invoke(env, "dead-letters", "requeue", "j2")
    assert result.exit_code == 1, result.output
    assert "dead letter j2 holds no job to requeue: its payload is not a job this version reads (" in result.output


def test_purge_without_a_terminal_asks_for_yes_and_drops_nothing(env: dict[str, str], letters: DeadLetterStore) -> None:
    result = invoke(env, "dead-letters", "purge")  # CliRunner's stdin is not a terminal
    # a missing confirmation is a usage error (exit 2, as a missing argument), no longer "nothing to do" (1)
    assert result.exit_code == 2, result.output
    assert "pass -y (--yes) to confirm" in result.stderr and "Aborted" not in result.output
    assert letters.count() == 2
    assert "--yes" in invoke(env, "dead-letters", "purge", "--help").output
    result = invoke(env, "dead-letters", "purge", "-y")
    assert result.exit_code == 0 and letters.count() == 0


class _Poison:
    """A kombu message as the consumer sees it: a job's body under a ``headers.id`` holding a control character."""

    content_type = "application/json"
    delivery_info = {"routing_key": "ingest"}

    def __init__(self) -> None:
        job = {"job": "ingest_brain", "documents": [{"text": "Refunds take five days.", "source": "files"}]}
        self.headers = {"id": "job\x07bell", "task": "memory.ingest_brain", "timelimit": "xx"}
        self.body = json.dumps([[job], {}, {}])


def test_a_poison_message_whose_id_has_a_control_character_is_kept_under_an_id_requeue_accepts(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_CORE_VAR_DIR", env["MEMORY_CORE_VAR_DIR"])
    get_settings.cache_clear()
    close_runtime()
    try:
        letter = workers.transport.refuse(_Poison(), "MalformedMessage", message_text="not a task message: timelimit")
    finally:
        close_runtime()
    assert letter.id.startswith("refused-") and letter.payload["job"] == "ingest_brain"
    result = invoke(env, "dead-letters", "requeue", letter.id)
    assert result.exit_code == 0, result.output
    assert f"requeued {letter.id} as job {letter.id}" in " ".join(result.output.split())
    store = open_dead_letters(Settings(_env_file=None, var_dir=env["MEMORY_CORE_VAR_DIR"], broker_url=""))
    assert store.count() == 0


@pytest.mark.parametrize("command", ["show", "requeue"])
@pytest.mark.parametrize("ref", ["", "   "], ids=["empty", "spaces"])
def test_a_blank_id_is_bad_input_exit_2_naming_the_argument(
    env: dict[str, str], letters: DeadLetterStore, command: str, ref: str
) -> None:
    result = invoke(env, "dead-letters", command, ref)
    assert result.exit_code == 2, result.output
    assert "Invalid value for 'ID': must not be blank" in result.output
    assert letters.count() == 2  # nothing requeued or dropped


@pytest.mark.parametrize("command", ["show", "requeue"])
def test_an_unknown_100_kb_id_is_echoed_cut_to_80_characters(
    env: dict[str, str], letters: DeadLetterStore, command: str
) -> None:
    ref = "9" * 100_000
    result = invoke(env, "dead-letters", command, ref)
    assert result.exit_code == 1, result.output[:500]
    assert len(result.output) < 300, result.output[:500]
    assert f"no dead letter '{'9' * 80}'… (100000 characters)" in " ".join(result.output.split())

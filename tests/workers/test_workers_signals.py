"""Signal handlers: failures the flow did not handle, and messages Celery rejected, become dead letters."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.exceptions import TimeLimitExceeded

import workers.poison
from memory_core.settings import get_settings
from workers.dead_letters import DeadLetterStore
from workers.execution import DeadLettered
from workers.signals import failed, message_payload, rejected, unknown_task


@pytest.fixture
def letters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DeadLetterStore]:
    """The process's dead-letter store, server-less under a temporary var_dir."""
    monkeypatch.setenv("MEMORY_CORE_VAR_DIR", str(tmp_path / "var"))
    get_settings.cache_clear()
    workers.poison._letters.reset()
    workers.poison._coordination.reset()
    yield workers.poison.letters()
    workers.poison._letters.reset()
    workers.poison._coordination.reset(lambda c: c.close())


class Message:
    def __init__(self, body: Any, headers: dict[str, Any], content_type: str = "application/json") -> None:
        self.body = body
        self.headers = headers
        self.content_type = content_type
        self.delivery_info = {"routing_key": "ingest"}


class Task:
    name = "memory.build_beliefs"


JOB = {"job": "build_beliefs", "request": {"reach": {"at": "agent:x", "inherit": False, "descendants": False}}}


def test_a_hard_time_limit_is_dead_lettered_with_the_job(letters: DeadLetterStore) -> None:
    failed(sender=Task(), task_id="t1", exception=TimeLimitExceeded(600), args=[JOB], kwargs={})
    letter = letters.get("t1")
    assert letter.error == "TimeLimitExceeded" and letter.payload == JOB and letter.task == "memory.build_beliefs"


def test_the_flows_own_dead_letters_are_not_recorded_twice(letters: DeadLetterStore) -> None:
    failed(sender=Task(), task_id="t2", exception=DeadLettered("InvalidRequest: …"), args=[JOB], kwargs={})
    assert letters.count() == 0


def test_unknown_and_rejected_messages_keep_their_job_payload(letters: DeadLetterStore) -> None:
    body = json.dumps([[JOB], {}, {}]).encode()
    unknown_task(message=Message(body, {"id": "u1", "task": "memory.nope"}), name="memory.nope", id="u1")
    rejected(message=Message(b"\x80\x04binary", {"id": "r1", "task": "memory.ingest_brain"}, "application/x-pickle"))
    assert letters.get("u1").error == "NotRegistered" and letters.get("u1").payload == JOB
    assert letters.get("u1").queue == "ingest"
    assert letters.get("r1").error == "Rejected" and isinstance(letters.get("r1").payload, str)


def test_letters_from_signal_handlers_record_the_attempts_counted_and_the_engine(letters: DeadLetterStore) -> None:
    coordination = workers.poison._coordination.get()
    for _ in range(3):
        coordination.count_attempt("t3")  # the flow started it three times; the third hit the hard limit
    failed(sender=Task(), task_id="t3", exception=TimeLimitExceeded(600), args=[JOB], kwargs={"engine": "e" * 16})
    assert letters.get("t3").attempts == 3 and letters.get("t3").engine == "e" * 16
    body = json.dumps([[JOB], {"engine": "f" * 16}, {}]).encode()
    unknown_task(message=Message(body, {"id": "u2", "task": "memory.nope"}), name="memory.nope", id="u2")
    assert letters.get("u2").attempts == 0 and letters.get("u2").engine == "f" * 16


def test_rejected_messages_without_an_id_each_keep_their_own_letter(letters: DeadLetterStore) -> None:
    rejected(message=Message(b"one", {}, "application/x-yaml"))
    rejected(message=Message(b"two", {}, "application/x-yaml"))
    assert sorted(x.payload for x in letters.list()) == ["one", "two"]


def test_message_payloads_are_decoded_only_when_json() -> None:
    assert message_payload(Message(json.dumps([[1, 2], {}, {}]), {})) == [[1, 2], {}, {}]
    assert message_payload(Message("{broken", {})) == "{broken"
    assert message_payload(Message(b"raw", {}, "application/x-yaml")) == "raw"

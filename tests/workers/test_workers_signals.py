"""Signal handlers: failures the flow did not handle, and messages Celery rejected, become dead letters."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.exceptions import TimeLimitExceeded
from celery.worker.consumer.consumer import UNKNOWN_TASK_ERROR
from flowkit import Flow, Spawn, crash_shapes, envelope, memory_core_argv, wait_until

from memory_core.errors import NotFound
from memory_core.settings import get_settings
from workers.dead_letters import DeadLetterStore
from workers.execution import DeadLettered, close_runtime, runtime
from workers.queue import open_dead_letters
from workers.signals import connect, failed, rejected, unknown_task
from workers.transport import message_payload


@pytest.fixture
def letters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DeadLetterStore]:
    """The process's dead-letter store, server-less under a temporary var_dir."""
    monkeypatch.setenv("MEMORY_CORE_VAR_DIR", str(tmp_path / "var"))
    get_settings.cache_clear()
    close_runtime()  # the process's runtime opens again from these settings
    yield runtime().letters
    close_runtime()


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
    coordination = runtime().coordination
    for _ in range(3):
        coordination.begin_job("t3", None)  # the flow started it three times; the third hit the hard limit
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


def _raised(exc: BaseException) -> Any:
    try:
        raise exc
    except BaseException:
        return sys.exc_info()


def test_a_dead_letter_is_logged_as_one_warning_line_with_its_id_and_reason(
    letters: DeadLetterStore, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        unknown_task(message=Message(json.dumps([[JOB], {}, {}]), {"id": "u9"}), name="memory.nope", id="u9")
    mine = [r for r in caplog.records if r.name.startswith("workers")]
    assert [(r.levelno, r.exc_info) for r in mine] == [(logging.WARNING, None)]
    assert mine[0].getMessage() == "dead letter u9 (memory.nope): NotRegistered: no task named 'memory.nope'"


def test_what_celery_repeats_about_a_dead_letter_is_dropped_and_unexpected_tracebacks_are_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    connect()  # what create_app does: the filter on Celery's loggers (connecting again is harmless)
    trace = logging.getLogger("celery.app.trace")  # the loggers Celery writes these with (celery 5.x)
    consumer = logging.getLogger("celery.worker.consumer.consumer")
    with caplog.at_level(logging.INFO):
        failure = _raised(DeadLettered("InvalidRequest: documents.0.text: blank"))
        trace.error("Task %s raised unexpected: %r", "memory.ingest_brain[j1]", failure[1], exc_info=failure)
        unknown = _raised(KeyError("memory.nope"))
        consumer.error(UNKNOWN_TASK_ERROR, unknown[1], "b'[]' (3b)", {"id": "u1"}, {}, exc_info=unknown)
        boom = _raised(RuntimeError("boom"))
        trace.error("Task %s raised unexpected: %r", "memory.ingest_brain[j2]", boom[1], exc_info=boom)
    kept = [r for r in caplog.records if r.name != "workers.transport"]
    assert [r.getMessage() for r in kept] == ["Task memory.ingest_brain[j2] raised unexpected: RuntimeError('boom')"]
    assert kept[0].exc_info is not None and "Traceback" in caplog.text  # an unexpected error keeps its traceback


@pytest.mark.redis
@pytest.mark.slow
def test_a_worker_logs_each_expected_dead_letter_once_without_a_traceback(flow: Flow, spawn: Spawn) -> None:
    queue = f"{flow.uid}-letters-ingest"  # this worker's own: a session worker on the flow queues cannot take them
    worker = spawn(
        "letters-worker", memory_core_argv("worker", "-c", "1", "-n", f"letters-{flow.uid}@%h"), queue_ingest=queue
    )
    client = flow.client()
    shapes = crash_shapes(queue)
    blank = {"job": "ingest_brain", "documents": [{"text": "", "source": "files"}]}
    ids = {f"inval-{flow.uid}": "memory.ingest_brain", f"unk-{flow.uid}": "memory.nope"}
    entries = [raw for _, raw in shapes.values()]
    for job_id, task in ids.items():
        headers = {"task": task, "id": job_id, "lang": "py", "argsrepr": "", "kwargsrepr": ""}
        entries.append(envelope(queue, json.dumps([[blank], {}, {}]), headers=headers))
    for raw in entries:
        client.lpush(queue, raw)
    letters = open_dead_letters(flow.settings())
    expected = [*ids, *(job_id for job_id, _ in shapes.values() if job_id)]
    wait_until(lambda: all(j in worker.text() for j in expected) and client.llen(queue) == 0, 40, what="the letters")
    wait_until(lambda: all(_has(letters, j) for j in expected), 10, what="the letters in the store")
    log = worker.text()
    assert "Traceback" not in log and "The full contents of the message body" not in log, log
    for job_id in expected:
        said = [line for line in log.splitlines() if job_id in line and ("WARNING" in line or "ERROR" in line)]
        assert len(said) == 1, (job_id, said)
    assert len([line for line in log.splitlines() if "dead letter raw-" in line]) == 1  # the one nested 100k deep


def _has(letters: DeadLetterStore, job_id: str) -> bool:
    try:
        letters.get(job_id)
    except NotFound:
        return False
    return True

"""The table of job kinds (``workers.kinds``): a kind added as one row is routed, parsed, submitted and dispatched.

``EchoJob`` exists only here: a third kind next to ``build_beliefs`` and ``ingest_brain``, so a two-way branch
anywhere ("not a build, so an ingest") would misroute, misparse or misdispatch it.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, Literal

import pytest

from memory_core._model import ContractModel
from memory_core.consolidation import ConsolidateRequest
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import ConfigError, InvalidRequest
from memory_core.lifecycle.jobs import BuildBeliefs
from memory_core.namespace import Reach
from memory_core.settings import Settings
from workers.celery_app import create_app
from workers.config import celery_config, queue_for
from workers.coordination import SqliteCoordination, engine_key
from workers.dead_letters import SqliteDeadLetters
from workers.execution import Delivery, Runtime, Verdict, execute
from workers.kinds import JOB_KINDS, JobKind
from workers.queue import JobQueue


class EchoJob(ContractModel):
    """A test-only job kind: echo ``text``."""

    job: Literal["test_echo"] = "test_echo"
    text: str


SEEN: list[tuple[str, str]] = []


def run_echo(rt: Runtime, d: Delivery, job: EchoJob) -> dict[str, Any]:
    SEEN.append((d.job_id, job.text))
    return {"job": "test_echo", "echo": job.text}


ECHO = JobKind(EchoJob, "memory.test_echo", "queue_ingest", run_echo, lambda j: f"echo {j.text!r}")
TABLE = JOB_KINDS.with_kind(ECHO)
BUILD = BuildBeliefs(request=ConsolidateRequest(reach=Reach.exact("agent:a")))


def settings(tmp_path: Path) -> Settings:
    return Settings(_env_file=None, var_dir=tmp_path / "var", queue_ingest="t-ingest", queue_beliefs="t-beliefs")


def test_a_third_kind_is_routed_to_its_rows_queue(tmp_path: Path) -> None:
    s = settings(tmp_path)
    routes = celery_config(s, TABLE)["task_routes"]
    assert routes["memory.test_echo"] == {"queue": "t-ingest"}
    assert routes["memory.build_beliefs"] == {"queue": "t-beliefs"}
    assert queue_for(s, "memory.test_echo", TABLE) == "t-ingest"
    with pytest.raises(ConfigError):
        queue_for(s, "memory.test_echo")  # the default table has no such kind
    app = create_app(s, TABLE)
    assert {"memory.test_echo", "memory.build_beliefs", "memory.ingest_brain", "memory.build_due"} <= set(app.tasks)
    # the flow caps attempts itself: Celery's default cap (3) would dead-letter a job deferred a fourth time
    assert all(app.tasks[name].max_retries is None for name in TABLE.queues())


def test_a_third_kind_is_parsed_by_its_tag_and_refused_by_a_table_without_it() -> None:
    echo = TABLE.parse({"job": "test_echo", "text": "hi"})
    assert isinstance(echo, EchoJob) and echo.text == "hi"
    assert TABLE.parse('{"job":"test_echo","text":"hi"}') == echo
    assert isinstance(TABLE.parse(BUILD.to_json()), BuildBeliefs)
    assert TABLE.of(echo) is ECHO and TABLE.describe(echo) == "echo 'hi'"
    with pytest.raises(InvalidRequest) as caught:
        JOB_KINDS.parse({"job": "test_echo", "text": "hi"})
    assert caught.value.field == "job"
    with pytest.raises(InvalidRequest) as caught:
        TABLE.parse({"job": "test_echo"})
    assert caught.value.field == "text"


def test_a_row_whose_tag_or_task_is_taken_is_refused() -> None:
    with pytest.raises(ConfigError):
        TABLE.with_kind(ECHO)
    with pytest.raises(ConfigError):
        JOB_KINDS.with_kind(JobKind(EchoJob, "memory.build_beliefs", "queue_ingest", run_echo, str))


def test_a_third_kind_is_submitted_under_its_task_and_queue(tmp_path: Path) -> None:
    s = settings(tmp_path)
    queue = JobQueue(s, kinds=TABLE)
    try:
        job_id = queue.submit({"job": "test_echo", "text": "hi"})
    finally:
        queue.close()
    files = list((tmp_path / "var/broker/queue").glob("*.t-ingest.msg"))
    assert len(files) == 1
    message = json.loads(files[0].read_text())
    assert message["headers"]["id"] == job_id and message["headers"]["task"] == "memory.test_echo"
    assert message["headers"]["argsrepr"] == "echo 'hi'"
    args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
    assert args == [{"job": "test_echo", "text": "hi"}] and set(kwargs) == {"engine"}  # no pending mark: no coalesce


@pytest.fixture
def rt(tmp_path: Path) -> Runtime:
    return Runtime(
        settings(tmp_path),
        engine=ReferenceEngine(),
        coordination=SqliteCoordination(tmp_path / "c.db", "t", 60, 60),
        letters=SqliteDeadLetters(tmp_path / "c.db", 100),
        kinds=TABLE,
    )


def test_a_third_kind_is_dispatched_to_its_handler(rt: Runtime) -> None:
    key = engine_key(rt.settings.engine)
    out = execute(rt, Delivery("memory.test_echo", "e1", ({"job": "test_echo", "text": "hi"},), {"engine": key}))
    assert out.verdict is Verdict.DONE and out.result == {"job": "test_echo", "echo": "hi"}
    assert ("e1", "hi") in SEEN and rt.coordination.is_done("e1")


@pytest.mark.parametrize(
    ("task", "payload", "kwargs"),
    [
        ("memory.ingest_brain", {"job": "test_echo", "text": "hi"}, {}),  # the third kind under another task
        ("memory.build_beliefs", {"job": "test_echo", "text": "hi"}, {}),
        ("memory.test_echo", BUILD.to_dict(), {}),  # a build under the third kind's task
        ("memory.test_echo", {"job": "test_echo", "text": "hi"}, {"pending": "x"}),  # it does not coalesce
    ],
)
def test_a_job_under_another_kinds_task_is_dead_lettered_unrun(
    rt: Runtime, task: str, payload: dict[str, Any], kwargs: dict[str, Any]
) -> None:
    before = len(SEEN)
    out = execute(rt, Delivery(task, "x1", (payload,), kwargs))
    assert out.verdict is Verdict.DEAD and out.letter is not None and out.letter.error == "InvalidRequest"
    assert len(SEEN) == before
    assert rt.letters.get("x1").payload == payload

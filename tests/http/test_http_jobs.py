"""``GET /v1/jobs/{job_id}``: a token sees the jobs issued to its own root and nothing else; another root's job,
started or not, reads exactly like an id never issued (``memory_core.http.jobs``)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from httpkit import TOKEN_A, TOKEN_A_BOT, TOKEN_B, TOKENS, Api, RecordingQueue
from typer.testing import CliRunner

from memory_core.cli import load_commands
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import ConfigError, NotFound
from memory_core.http import TokenTable, create_app
from memory_core.http.jobs import MIN_KEY_BYTES, TAG_HEX, JobHandles
from memory_core.namespace import Namespace
from memory_core.settings import get_settings

KEY = "k" * MIN_KEY_BYTES
DOCS = [{"source": "notes", "title": "Trip", "text": "Kyoto in April."}]
INGEST = {"job": "ingest_brain", "documents": DOCS}
REPLY = {"thread_id": "t1", "turn_index": 9, "assistant_text": "Noted."}  # makes a build due


@dataclass(frozen=True)
class State:
    id: str
    state: str
    follow_ups: tuple[str, ...] = ()
    error: str | None = None


@dataclass
class Monitor:
    """A JobMonitor double: states by task id (unknown: PENDING, as Celery says), and every id it was asked."""

    states: dict[str, State] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    def state(self, job_id: str) -> State:
        self.asked.append(job_id)
        return self.states.get(job_id, State(job_id, "PENDING"))

    def close(self) -> None:
        pass


@dataclass
class UuidQueue(RecordingQueue):
    """A queue double handing out random task ids, as ``JobQueue`` does."""

    def send(self, job):  # type: ignore[no-untyped-def]
        sent = super().send(job)
        sent.id = str(uuid.uuid4())
        return sent


def make(monitor: Monitor, key: str | None = KEY) -> Api:
    engine, queue = ReferenceEngine(), UuidQueue()
    app = create_app(engine, TokenTable.from_json(TOKENS), queue=lambda: queue, monitor=lambda: monitor, job_key=key)
    return Api(engine, queue, app)


def ingest(api: Api, token: str) -> str:
    response = api.post("/v1/ingest", INGEST, token)
    assert response.status_code == 202, response.text
    return str(response.json()["job_id"])


def same_answer(a: httpx.Response, b: httpx.Response) -> bool:
    return (a.status_code, a.content, a.headers.get("content-type")) == (
        b.status_code,
        b.content,
        b.headers.get("content-type"),
    )


def test_a_token_reads_its_roots_job_and_its_follow_ups_as_handles() -> None:
    monitor = Monitor()
    api = make(monitor)
    handle = ingest(api, TOKEN_A)
    task_id, _, tag = handle.rpartition(".")
    assert len(tag) == TAG_HEX and uuid.UUID(task_id)  # the Celery task id stays the handle's prefix
    monitor.states[task_id] = State(task_id, "SUCCESS", ("build-7",))
    seen = api.call("GET", f"/v1/jobs/{handle}", TOKEN_A)
    assert seen.status_code == 200, seen.text
    body = seen.json()
    assert body["id"] == handle and body["state"] == "SUCCESS"
    [follow_up] = body["follow_ups"]
    assert follow_up.startswith("build-7.")
    assert api.call("GET", f"/v1/jobs/{follow_up}", TOKEN_A).json()["state"] == "PENDING"
    assert monitor.asked == [task_id, "build-7"]
    # the job belongs to the root, not to the token: another token of team:a reads it too
    assert api.call("GET", f"/v1/jobs/{handle}", TOKEN_A_BOT).json()["state"] == "SUCCESS"


def test_post_turn_jobs_are_handles_of_the_tokens_root() -> None:
    monitor = Monitor()
    api = make(monitor)
    [handle] = api.post("/v1/post_turn", REPLY, TOKEN_A).json()["job_ids"]
    assert api.call("GET", f"/v1/jobs/{handle}", TOKEN_A).status_code == 200
    assert api.call("GET", f"/v1/jobs/{handle}", TOKEN_B).status_code == 404


@pytest.mark.parametrize("started", [False, True])
def test_another_roots_job_reads_exactly_like_an_unknown_one_and_nothing_is_looked_up(started: bool) -> None:
    monitor = Monitor()
    api = make(monitor)
    theirs = ingest(api, TOKEN_B)
    task_id = theirs.rpartition(".")[0]
    if started:  # the worker has it: the backend would say STARTED and hold its args
        monitor.states[task_id] = State(task_id, "STARTED")
    unknown = f"{uuid.uuid4()}.{'0' * TAG_HEX}"
    answers = [
        api.call("GET", f"/v1/jobs/{theirs}", TOKEN_A),  # another root's job, by its full handle
        api.call("GET", f"/v1/jobs/{task_id}", TOKEN_A),  # its bare task id
        api.call("GET", f"/v1/jobs/{task_id}.{'f' * TAG_HEX}", TOKEN_A),  # a forged tag
        api.call("GET", f"/v1/jobs/{unknown}", TOKEN_A),  # an id never issued
        api.call("GET", f"/v1/jobs/{uuid.uuid4()}", TOKEN_A),
    ]
    first = answers[0]
    assert first.status_code == 404
    assert first.json() == {"error": "NotFound", "message": "no job with that id for this token's root"}
    assert all(same_answer(first, other) for other in answers[1:])
    assert monitor.asked == []  # refused before anything was read: no timing difference from a lookup either
    own = api.call("GET", f"/v1/jobs/{theirs}", TOKEN_B)  # its own root sees it
    assert own.status_code == 200 and own.json()["state"] == ("STARTED" if started else "PENDING")
    assert monitor.asked == [task_id]


def test_handles_outlive_a_restart_with_the_same_key_and_not_with_a_fresh_one() -> None:
    monitor = Monitor()
    handle = ingest(make(monitor), TOKEN_A)
    assert make(monitor).call("GET", f"/v1/jobs/{handle}", TOKEN_A).status_code == 200  # same key
    assert make(monitor, key=None).call("GET", f"/v1/jobs/{handle}", TOKEN_A).status_code == 404  # a random key


def test_a_malformed_job_id_is_400_naming_it() -> None:
    api = make(Monitor())
    for bad in ("a%00b", "x" * 301):
        response = api.call("GET", f"/v1/jobs/{bad}", TOKEN_A)
        assert response.status_code == 400 and response.json()["field"] == "job_id"


def test_job_handles_are_pure_and_root_bound() -> None:
    handles = JobHandles(KEY)
    a, b = Namespace.parse("team:a"), Namespace.parse("team:b")
    handle = handles.issue(a, "task-1")
    assert handle == JobHandles(KEY).issue(a, "task-1") != handles.issue(b, "task-1")
    assert handles.task_id(a, handle) == "task-1"
    for other in (b, Namespace.parse("team:a/agent:x"), Namespace.parse("root")):
        with pytest.raises(NotFound):
            handles.task_id(other, handle)
    with pytest.raises(ConfigError) as short:
        JobHandles("short-secret-key")
    assert "short-secret-key" not in str(short.value)
    assert KEY not in repr(handles)


def test_the_real_monitor_reads_pending_for_an_own_job_and_404_for_anothers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default monitor (``workers.monitor.JobMonitor``, the server-less result backend): no double."""
    monkeypatch.setenv("MEMORY_CORE_VAR_DIR", str(tmp_path / "var"))
    monkeypatch.setenv("MEMORY_CORE_BROKER_URL", "")
    get_settings.cache_clear()
    engine = ReferenceEngine()
    app = create_app(engine, TokenTable.from_json(TOKENS), queue=UuidQueue, job_key=KEY)
    api = Api(engine, RecordingQueue(), app)
    handle = ingest(api, TOKEN_A)
    mine = api.call("GET", f"/v1/jobs/{handle}", TOKEN_A)
    assert mine.status_code == 200 and mine.json() == {"id": handle, "state": "PENDING", "follow_ups": []}
    assert api.call("GET", f"/v1/jobs/{handle}", TOKEN_B).status_code == 404


def test_serve_refuses_a_short_job_key_without_showing_it(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    env = {
        "MEMORY_CORE_VAR_DIR": str(tmp_path / "var"),
        "MEMORY_CORE_ENGINE": f"sqlite:///{tmp_path / 'memory.db'}",
        "MEMORY_CORE_HTTP_JOB_KEY": "too-short-a-key",
    }
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(load_commands(), ["serve", "--tokens", str(tokens)], env=env)
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 2
    assert "MEMORY_CORE_HTTP_JOB_KEY" in result.stderr and "too-short-a-key" not in result.output
    assert not (tmp_path / "memory.db").exists()  # refused before the engine was opened


ADDRESS = "postgresql://mc:***@db.internal:5432/memory"


@pytest.mark.parametrize(
    ("worker_text", "error"),
    [
        (f"EngineUnavailable: {ADDRESS}: connection refused", "EngineUnavailable"),
        ("InvalidRequest: documents.0.text: at most 200000 characters", "InvalidRequest"),
        ("GaveUp: started 5 times, more than 4: earlier runs were lost (killed or timed out)", "GaveUp"),
        (f"WrongEngine: job for engine {ADDRESS} reached a worker of engine sqlite:///srv/m.db", "WrongEngine"),
        (f"OperationalError: {ADDRESS}: relation items does not exist", "EngineError"),
        (f"{ADDRESS}: server closed the connection unexpectedly", "EngineError"),
        ("TimeLimitExceeded(600,)", "EngineError"),
    ],
)
def test_a_failed_jobs_error_is_its_category_and_a_fixed_message_and_the_detail_is_logged(
    worker_text: str, error: str, caplog: pytest.LogCaptureFixture
) -> None:
    monitor = Monitor()
    api = make(monitor)
    handle = ingest(api, TOKEN_A)
    task_id = handle.rpartition(".")[0]
    monitor.states[task_id] = State(task_id, "FAILURE", error=worker_text)
    with caplog.at_level("WARNING", logger="memory_core.http.service"):
        seen = api.call("GET", f"/v1/jobs/{handle}", TOKEN_A)
    assert seen.status_code == 200, seen.text
    body = seen.json()
    assert body["state"] == "FAILURE" and body["error"] == error
    assert body["message"] and "server's log" in body["message"]
    for leak in ("postgresql", "db.internal", "5432", "sqlite:", "/srv/", "documents.0", "Limit"):
        assert leak not in seen.text
    assert worker_text in caplog.text  # the operator keeps the detail


def test_a_job_that_did_not_fail_has_no_error() -> None:
    monitor = Monitor()
    api = make(monitor)
    handle = ingest(api, TOKEN_A)
    body = api.call("GET", f"/v1/jobs/{handle}", TOKEN_A).json()
    assert body["state"] == "PENDING" and "error" not in body and "message" not in body

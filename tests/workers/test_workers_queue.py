"""``JobQueue.submit``: at once, a stable id, JSON on the wire, coalescing, and an outbox when Redis is away."""

from __future__ import annotations

import base64
import json
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flowkit import Flow

from memory_core.errors import InvalidRequest
from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain
from memory_core.namespace import Reach
from memory_core.settings import Settings
from workers.coordination import engine_key, pending_key
from workers.kinds import JOB_KINDS
from workers.queue import JobQueue, OutboxEntry

ALICE = BuildBeliefs(request={"reach": Reach.exact("agent:alice").to_dict(), "kinds": ["conversation"]})
DOC = IngestBrain(documents=(BrainDocument.new("notion", "Queues live in Redis.", title="Queues"),))


@pytest.fixture
def lone(flow: Flow) -> dict[str, Any]:
    """Queue names nobody consumes, so the published messages stay where the test can read them."""
    tag = uuid.uuid4().hex[:6]
    return {f"queue_{q}": f"{flow.uid}-{tag}-{q}" for q in ("beliefs", "ingest", "maintenance")}


def message(flow: Flow, queue: str) -> dict[str, Any]:
    raw = flow.client().rpop(queue)
    assert raw is not None, f"nothing on {queue}"
    return dict(json.loads(raw))


def test_describe_gives_flower_a_short_readable_summary() -> None:
    assert JOB_KINDS.describe(ALICE) == "build_beliefs agent:alice [conversation]"
    assert JOB_KINDS.describe(BuildBeliefs(request={"reach": Reach.subtree("source:notion").to_dict()})) == (
        "build_beliefs source:notion/** [all kinds]"
    )
    assert JOB_KINDS.describe(DOC) == "ingest_brain 1 document (notion)"


@pytest.mark.redis
def test_submit_publishes_the_jobs_json_under_the_returned_id(flow: Flow, lone: dict[str, Any]) -> None:
    queue = JobQueue(flow.settings(**lone))
    job_id = queue.submit(DOC)
    msg = message(flow, lone["queue_ingest"])
    assert msg["content-type"] == "application/json"
    assert msg["headers"]["id"] == job_id and msg["headers"]["task"] == "memory.ingest_brain"
    assert msg["headers"]["argsrepr"] == "ingest_brain 1 document (notion)"
    args, kwargs, _ = json.loads(base64.b64decode(msg["body"]))
    assert args == [DOC.to_dict()] and kwargs == {"engine": engine_key(queue.settings.engine)}
    queue.close()


@pytest.mark.redis
def test_identical_builds_while_one_is_queued_share_its_id(flow: Flow, lone: dict[str, Any]) -> None:
    queue = JobQueue(flow.settings(**lone))
    first = queue.submit(ALICE)
    assert [queue.submit(ALICE) for _ in range(5)] == [first] * 5
    other = queue.submit(BuildBeliefs(request={"reach": Reach.exact("agent:bob").to_dict()}))
    assert other != first
    assert flow.client().llen(lone["queue_beliefs"]) == 2
    msg = message(flow, lone["queue_beliefs"])
    _, kwargs, _ = json.loads(base64.b64decode(msg["body"]))
    assert set(kwargs) == {"pending", "engine"}  # the trigger's stamp is the job's mark in the store
    assert kwargs["engine"] == engine_key(queue.settings.engine)  # the host's engine: no other deployment runs it
    assert len({queue.submit(DOC) for _ in range(3)}) == 3  # ingest jobs are never coalesced
    queue.close()


@pytest.mark.redis
def test_a_build_message_goes_as_serialised_and_its_claims_stamp_is_kept_as_the_jobs_mark(
    flow: Flow, lone: dict[str, Any]
) -> None:
    queue = JobQueue(flow.settings(**lone))
    job = BuildBeliefs(request={"reach": Reach.exact(f"agent:{uuid.uuid4().hex[:6]}").to_dict()})
    client, prefix = flow.client(), queue.settings.redis_prefix
    try:
        job_id = queue.submit(job)
        entry = message(flow, lone["queue_beliefs"])
        mark = client.get(f"{prefix}:pending:{pending_key(queue.engine, job)}")
        stamp = client.get(f"{prefix}:job:{job_id}:stamp")
        started = queue.coordination.begin_job(job_id, pending_key(queue.engine, job))  # as the worker does
    finally:
        queue.close()
    args, kwargs, _ = json.loads(base64.b64decode(entry["body"]))
    assert entry["headers"]["id"] == job_id and args == [job.to_dict()]
    assert kwargs == {"engine": queue.engine, "pending": pending_key(queue.engine, job)}  # no stamp in the message
    assert mark is not None and mark.split("|")[0] == job_id
    assert stamp is not None and int(stamp) == int(mark.split("|")[1]) == started.stamp_us  # Redis's clock


def test_a_malformed_job_raises_and_nothing_is_kept(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, broker_url="redis://127.0.0.1:1/0", var_dir=tmp_path)
    queue = JobQueue(settings)
    with pytest.raises(InvalidRequest, match="documents"):
        queue.submit({"job": "ingest_brain", "documents": []})
    assert queue.outbox.waiting() == 0
    queue.close()


@pytest.mark.parametrize(
    ("job_id", "says"),
    [(5, "must be a string, not int"), ({"a": 1}, "must be a string, not dict"), ("  ", "must not be blank")]
    + [("x" * 256, "at most 255"), ("a\nb", "control characters")],
)
def test_a_job_id_that_cannot_name_a_job_is_refused_and_nothing_is_kept(tmp_path: Path, job_id: Any, says: str) -> None:
    settings = Settings(_env_file=None, broker_url="redis://127.0.0.1:1/0", var_dir=tmp_path)
    queue = JobQueue(settings)
    with pytest.raises(InvalidRequest, match=says) as caught:
        queue.submit(DOC, job_id=job_id)
    assert caught.value.field == "job_id"
    assert queue.outbox.waiting() == 0  # refused before the broker is tried or the job parked
    queue.close()


def test_send_says_whether_a_job_was_parked(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, broker_url="redis://127.0.0.1:1/0", var_dir=tmp_path, publish_timeout_s=0.5)
    queue = JobQueue(settings)
    sent = queue.send(DOC, job_id="parked-one")
    assert (sent.id, sent.state) == ("parked-one", "parked")
    queue.close()


@pytest.mark.redis
def test_send_says_published_then_coalesced_for_an_identical_queued_build(flow: Flow, lone: dict[str, Any]) -> None:
    queue = JobQueue(flow.settings(**lone))
    job = BuildBeliefs(request={"reach": Reach.exact(f"agent:send-{uuid.uuid4().hex[:6]}").to_dict()})
    first = queue.send(job)
    again = queue.send(job)
    assert first.state == "published" and (again.id, again.state) == (first.id, "coalesced")
    queue.close()


def test_an_unreachable_broker_parks_the_job_under_the_same_id(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, broker_url="redis://127.0.0.1:1/0", var_dir=tmp_path, publish_timeout_s=0.5)
    queue = JobQueue(settings)
    ids = [queue.submit(ALICE), queue.submit(DOC, job_id="chosen-id")]
    assert ids[1] == "chosen-id"
    rows = queue.outbox.claim("inspect")
    assert [r.id for r in rows] == ids
    assert json.loads(rows[0].payload) == ALICE.to_dict() and rows[0].task == "memory.build_beliefs"
    for row in rows:
        queue.outbox.release(row.id, "inspect", "peeked")
    report = queue.drain()
    assert report.delivered == 0 and report.error is not None  # still down: left parked, reported, not raised
    queue.close()


@pytest.fixture
def blackhole() -> Iterator[int]:
    """A TCP port that accepts connections and never answers (a hung or partitioned Redis)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    server.close()


def test_a_hung_broker_cannot_hang_submit(tmp_path: Path, blackhole: int) -> None:
    settings = Settings(
        _env_file=None, broker_url=f"redis://127.0.0.1:{blackhole}/0", var_dir=tmp_path, publish_timeout_s=0.3
    )
    queue = JobQueue(settings)
    returned: list[str] = []
    worker = threading.Thread(target=lambda: returned.extend([queue.submit(DOC), queue.submit(ALICE)]))
    worker.start()
    worker.join(60)  # liveness, not speed: without socket timeouts this never returns (celery#4556)
    assert not worker.is_alive() and len(returned) == 2
    assert queue.outbox.waiting() == 2
    queue.close()


def test_without_a_broker_url_jobs_are_files_under_var_dir(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, var_dir=tmp_path / "var")
    queue = JobQueue(settings)
    job_id = queue.submit(DOC)
    files = list((tmp_path / "var/broker/queue").glob(f"*.{settings.queue_ingest}.msg"))
    assert len(files) == 1
    assert json.loads(files[0].read_text())["headers"]["id"] == job_id
    assert queue.submit(ALICE) == queue.submit(ALICE)  # coalesced in var_dir/coordination.db
    queue.close()


def test_a_backlog_and_a_hung_broker_cost_one_publish_per_breaker_window(
    tmp_path: Path, blackhole: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(
        _env_file=None, broker_url=f"redis://127.0.0.1:{blackhole}/0", var_dir=tmp_path, publish_timeout_s=0.3
    )
    queue = JobQueue(settings)
    queue.outbox.put(OutboxEntry(id="parked", task="memory.ingest_brain", payload=DOC.to_json(), created=0.0))
    tried: list[str] = []
    publish = queue._publish

    def counted(job: Any, job_id: str, **kwargs: Any) -> str:
        tried.append(job_id)
        return publish(job, job_id, **kwargs)

    monkeypatch.setattr(queue, "_publish", counted)
    job_id = queue.submit(DOC)
    assert tried == ["parked"]  # the drain's publish timed out and opened the breaker: the new job is parked
    assert queue.submit(ALICE) != job_id and tried == ["parked"]  # still inside the window: no publish at all
    assert queue.outbox.waiting() == 3
    queue.close()


def test_after_the_window_one_submit_probes_a_hung_broker_while_the_others_park(
    tmp_path: Path, blackhole: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(
        _env_file=None, broker_url=f"redis://127.0.0.1:{blackhole}/0", var_dir=tmp_path, publish_timeout_s=1.0
    )
    queue = JobQueue(settings)
    tried: list[str] = []
    publish = queue._publish

    def counted(job: Any, job_id: str, **kwargs: Any) -> str:
        tried.append(job_id)
        return publish(job, job_id, **kwargs)

    monkeypatch.setattr(queue, "_publish", counted)
    queue.submit(DOC)  # times out and opens the breaker for 0.5 s
    assert len(tried) == 1
    threading.Event().wait(0.6)  # the window is over: the next submit probes the broker
    start = threading.Barrier(4)
    returned: list[str] = []

    def submit() -> None:
        start.wait(10)
        returned.append(queue.submit(DOC))

    threads = [threading.Thread(target=submit) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(returned) == 4 and len(tried) == 2  # one probe; three submits parked without a publish
    assert queue.outbox.waiting() == 5
    queue.close()


BAD_ROW = '{"job": "ingest_brain", "documents": []}'  # JSON, but never a job: documents must not be empty


def test_a_row_that_can_never_be_published_is_dead_lettered_after_a_few_tries(tmp_path: Path) -> None:
    from workers.queue import MAX_FAULTS, open_dead_letters

    settings = Settings(_env_file=None, var_dir=tmp_path / "var")
    queue = JobQueue(settings)
    queue.outbox.put(OutboxEntry(id="bad-row", task="memory.ingest_brain", payload=BAD_ROW, created=0.0))
    for _ in range(MAX_FAULTS - 1):
        report = queue.drain()
        assert report.left == 1 and report.error is not None and "InvalidRequest" in report.error
    report = queue.drain()
    assert report.left == 0 and report.delivered == 0
    letter = open_dead_letters(settings).get("bad-row")
    assert letter.error == "InvalidRequest" and letter.attempts == MAX_FAULTS
    assert letter.task == "memory.ingest_brain" and letter.payload == json.loads(BAD_ROW)
    assert "outbox" in letter.message and "documents" in letter.message

    claims: list[str] = []
    claim = queue.outbox.claim

    def counted(token: str, limit: int = 100) -> list[OutboxEntry]:
        claims.append(token)
        return claim(token, limit)

    queue.outbox.claim = counted  # type: ignore[method-assign]
    queue.submit(DOC)
    queue.submit(DOC)
    assert claims == []  # the outbox is empty: submits no longer open a transaction on it
    queue.close()


def test_broker_errors_keep_rows_parked_however_often_they_fail(tmp_path: Path) -> None:
    from workers.queue import MAX_FAULTS

    settings = Settings(_env_file=None, broker_url="redis://127.0.0.1:1/0", var_dir=tmp_path, publish_timeout_s=0.3)
    queue = JobQueue(settings)
    queue.outbox.put(OutboxEntry(id="bad", task="memory.ingest_brain", payload=BAD_ROW, created=0.0))
    queue.outbox.put(OutboxEntry(id="good", task="memory.ingest_brain", payload=DOC.to_json(), created=1.0))
    for _ in range(MAX_FAULTS + 2):
        queue.drain()
    rows = {row.id: row for row in queue.outbox.claim("inspect")}
    assert set(rows) == {"good", "bad"}  # "bad" could not reach the dead letters (they live in that Redis)
    assert rows["good"].tries == MAX_FAULTS + 2 and rows["good"].faults == 0
    assert rows["bad"].faults >= MAX_FAULTS
    queue.close()


# issue 11 §3: a job id names one payload ------------------------------------------------------------------
OTHER = IngestBrain(documents=(BrainDocument.new("notion", "A different page.", title="Other"),))


def test_a_used_job_id_with_another_payload_is_refused_and_the_first_job_is_kept(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, var_dir=tmp_path / "var")  # server-less: files and coordination.db
    queue = JobQueue(settings)
    try:
        assert queue.submit(DOC, job_id="reused") == "reused"
        with pytest.raises(InvalidRequest, match="another job") as caught:
            queue.submit(OTHER, job_id="reused")
        assert caught.value.field == "job_id"
        with pytest.raises(InvalidRequest) as caught:
            queue.submit(ALICE, job_id="reused")  # another kind under the id: refused too
        assert caught.value.field == "job_id"
        assert queue.submit(DOC, job_id="reused") == "reused"  # the same payload again: a replay, accepted
    finally:
        queue.close()
    files = list((tmp_path / "var/broker/queue").glob(f"*.{settings.queue_ingest}.msg"))
    bodies = [json.loads(base64.b64decode(json.loads(f.read_text())["body"]))[0][0] for f in files]
    assert bodies == [DOC.to_dict()] * 2  # the refused payloads were never queued


def test_a_parked_job_id_with_another_payload_is_refused_not_dropped(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, broker_url="redis://127.0.0.1:1/0", var_dir=tmp_path, publish_timeout_s=0.5)
    queue = JobQueue(settings)
    try:
        assert queue.send(DOC, job_id="parked").state == "parked"
        with pytest.raises(InvalidRequest) as caught:
            queue.send(OTHER, job_id="parked")
        assert caught.value.field == "job_id"
        assert queue.send(DOC, job_id="parked").state == "parked"  # a replay of the parked job
        rows = queue.outbox.claim("inspect")
        assert [(r.id, json.loads(r.payload)) for r in rows] == [("parked", DOC.to_dict())]
    finally:
        queue.close()


@pytest.mark.redis
def test_a_used_job_id_is_refused_through_redis_too(flow: Flow, lone: dict[str, Any]) -> None:
    queue = JobQueue(flow.settings(**lone))
    job_id = f"reuse-{uuid.uuid4().hex[:6]}"
    try:
        assert queue.send(DOC, job_id=job_id).state == "published"
        with pytest.raises(InvalidRequest) as caught:
            queue.send(OTHER, job_id=job_id)
        assert caught.value.field == "job_id"
        assert queue.send(DOC, job_id=job_id).id == job_id
    finally:
        queue.close()
    assert flow.client().llen(lone["queue_ingest"]) == 2

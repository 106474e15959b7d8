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
from workers.queue import JobQueue, describe

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
    assert describe(ALICE) == "build_beliefs agent:alice [conversation]"
    assert describe(BuildBeliefs(request={"reach": Reach.subtree("source:notion").to_dict()})) == (
        "build_beliefs source:notion/** [all kinds]"
    )
    assert describe(DOC) == "ingest_brain 1 document (notion)"


@pytest.mark.redis
def test_submit_publishes_the_jobs_json_under_the_returned_id(flow: Flow, lone: dict[str, Any]) -> None:
    queue = JobQueue(flow.settings(**lone))
    job_id = queue.submit(DOC)
    msg = message(flow, lone["queue_ingest"])
    assert msg["content-type"] == "application/json"
    assert msg["headers"]["id"] == job_id and msg["headers"]["task"] == "memory.ingest_brain"
    assert msg["headers"]["argsrepr"] == "ingest_brain 1 document (notion)"
    args, kwargs, _ = json.loads(base64.b64decode(msg["body"]))
    assert args == [DOC.to_dict()] and kwargs == {}
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
    assert set(kwargs) == {"triggered_us", "pending"} and isinstance(kwargs["triggered_us"], int)
    assert len({queue.submit(DOC) for _ in range(3)}) == 3  # ingest jobs are never coalesced
    queue.close()


def test_a_malformed_job_raises_and_nothing_is_kept(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, broker_url="redis://127.0.0.1:1/0", var_dir=tmp_path)
    queue = JobQueue(settings)
    with pytest.raises(InvalidRequest, match="documents"):
        queue.submit({"job": "ingest_brain", "documents": []})
    assert queue.outbox.waiting() == 0
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

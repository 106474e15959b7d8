"""The compose services' commands run as subprocesses: the two workers, beat, Flower; and the server-less setup."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from flowkit import BIN, REPO, Flow, Proc, Spawn, crash_shapes, memory_core_argv, wait_until

from memory_core.engines.sqlite import SQLiteEngine
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.jobs import IngestBrain
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.namespace import Reach
from workers.queue import JobQueue, open_coordination, open_dead_letters

pytestmark = [pytest.mark.redis, pytest.mark.slow]

LAYOUT = MemoryLayout()


def compose_command(service: str, **replace: str) -> list[str]:
    """A compose service's command, with ``memory-core`` resolved to this environment's script."""
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    argv = [
        str(BIN / "memory-core") if part == "memory-core" else part for part in compose["services"][service]["command"]
    ]
    return [replace.get(part, part) for part in argv]


def dedicated(flow: Flow, tag: str) -> dict[str, str]:
    return {f"queue_{q}": f"{flow.uid}-{tag}-{q}" for q in ("beliefs", "ingest", "maintenance")}


def brain_text(engine: SQLiteEngine, source: str) -> str:
    page = engine.list({"filter": {"reach": Reach.subtree(LAYOUT.brain(source)).to_dict()}, "limit": 200})
    return " ".join(h.text for h in page.items)


def brain_beliefs(engine: SQLiteEngine, source: str) -> list[str]:
    return [h.text for h in engine.beliefs({"reach": Reach.subtree(LAYOUT.brain(source)).to_dict(), "limit": 50})]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_compose_workers_ingest_on_one_queue_and_build_on_the_other(flow: Flow, spawn: Spawn) -> None:
    queues = dedicated(flow, "compose")  # custom MEMORY_CORE_QUEUE_* names; compose's --queues stays logical
    spawn("worker-ingest", compose_command("worker-ingest"), **queues)
    spawn("worker-beliefs", compose_command("worker-beliefs"), **queues)
    engine = SQLiteEngine(flow.db_path)
    queue = JobQueue(flow.settings(**queues))
    doc = BrainDocument.new("compose", "Compose runs one worker per queue. Beat runs alone.", title="Compose notes")
    job_id = queue.submit(IngestBrain(documents=(doc,)))
    wait_until(lambda: "Compose runs one worker per queue" in brain_text(engine, "compose"), 40, what="the ingest")
    wait_until(lambda: brain_beliefs(engine, "compose"), 40, what="the follow-up build on the beliefs worker")
    coordination = open_coordination(flow.settings())
    assert coordination.is_done(job_id)
    queue.close()
    engine.close()


def test_beat_builds_scopes_written_since_their_last_build_and_drains_the_outbox(flow: Flow, spawn: Spawn) -> None:
    queues = dedicated(flow, "beat")
    timing = {"build_due_interval_s": 1.0, "outbox_drain_interval_s": 1.0}
    every_queue = ",".join(queues[f"queue_{q}"] for q in ("beliefs", "maintenance", "ingest"))
    spawn("beat-worker", compose_command("worker-beliefs", **{"beliefs,maintenance": every_queue}), **queues)
    engine = SQLiteEngine(flow.db_path)
    mem = AgentMemory(engine, LAYOUT, "erin-beat")
    mem.post_turn({"thread_id": "t", "turn_index": 0, "assistant_text": "Noted."})
    mem.pre_turn({"thread_id": "t", "turn_index": 1, "user_text": "I moved to Porto last spring."})
    queue = JobQueue(flow.settings(**queues, **timing))
    parked = IngestBrain(documents=(BrainDocument.new("beat", "Parked by a host during an outage.", title="parked"),))
    from workers.queue import OutboxEntry

    queue.outbox.put(
        OutboxEntry(id="parked-for-beat", task="memory.ingest_brain", payload=parked.to_json(), created=0.0)
    )

    spawn("beat", compose_command("beat"), ready="beat: Starting", **queues, **timing)  # nobody submits a job
    node = Reach.exact(LAYOUT.conversations("erin-beat")).to_dict()
    wait_until(lambda: engine.beliefs({"reach": node}), 40, what="build-due to build the written scope")
    wait_until(lambda: "Parked by a host" in brain_text(engine, "beat"), 40, what="the drain-outbox tick")
    queue.close()
    engine.close()


def test_flower_refuses_without_credentials_and_lists_a_finished_job_with_them(
    flow: Flow, spawn: Spawn, session_worker: Proc
) -> None:
    port = free_port()
    spawn("flower", compose_command("flower", **{"0.0.0.0": "127.0.0.1"}), ready=None, flower_port=port)
    base = f"http://127.0.0.1:{port}"
    auth = (flow.fields["flower_user"], flow.fields["flower_password"])

    def answers() -> httpx.Response | None:
        try:
            return httpx.get(f"{base}/api/workers", timeout=2)
        except httpx.HTTPError:
            return None

    assert wait_until(answers, 40, what="flower to listen").status_code == 401
    assert httpx.get(f"{base}/api/tasks", timeout=5).status_code == 401
    assert httpx.get(f"{base}/", timeout=5).status_code == 401
    assert httpx.get(f"{base}/api/workers", auth=(auth[0], "wrong"), timeout=5).status_code == 401
    hostname = f"main-{flow.uid}@"
    wait_until(
        lambda: any(hostname in w for w in httpx.get(f"{base}/api/workers?refresh=1", auth=auth, timeout=10).json()),
        40,
        what="flower to see the session worker",
    )

    engine = SQLiteEngine(flow.db_path)
    mem = AgentMemory(engine, LAYOUT, "frank-flower")
    mem.pre_turn({"thread_id": "t", "turn_index": 0, "user_text": "I keep bees on my roof."})
    queue = JobQueue(flow.settings())
    job_id = queue.submit(mem.history_build())

    def listed() -> dict[str, Any] | None:
        tasks = httpx.get(f"{base}/api/tasks", auth=auth, timeout=5).json()
        task = tasks.get(job_id)
        return task if task and task.get("state") == "SUCCESS" else None

    task = wait_until(listed, 40, what="flower to list the finished job")
    assert task["name"] == "memory.build_beliefs"
    assert task["args"] == "build_beliefs agent:frank-flower [conversation]"
    queue.close()
    engine.close()


def serverless(tmp_path: Path) -> dict[str, Any]:
    """Settings fields for a worker without Redis: jobs, results and letters under ``tmp_path/var``."""
    return {"broker_url": None, "var_dir": str(tmp_path / "var"), "engine": f"sqlite:///{tmp_path / 'm.db'}"}


def test_without_redis_a_worker_runs_jobs_from_var_dir_and_survives_garbage(
    flow: Flow, spawn: Spawn, tmp_path: Path
) -> None:
    fields = serverless(tmp_path)
    settings = flow.settings(**fields)
    spawn("serverless", [str(BIN / "memory-core"), "worker", "--concurrency", "1"], **fields)
    queue_dir = tmp_path / "var/broker/queue"
    (queue_dir / f"0000_garbage.{settings.queue_ingest}.msg").write_text("not a message")
    shapes = crash_shapes(settings.queue_ingest)  # each stopped a server-less worker too (issue 5 audit)
    for n, (_, raw) in enumerate(shapes.values()):
        (queue_dir / f"000{n + 1}_shape.{settings.queue_ingest}.msg").write_text(raw)
    engine = SQLiteEngine(tmp_path / "m.db")
    queue = JobQueue(settings)
    doc = BrainDocument.new("local", "The demo needs no server. Files carry the jobs.", title="server-less")
    queue.submit(IngestBrain(documents=(doc,)))
    wait_until(lambda: "The demo needs no server" in brain_text(engine, "local"), 40, what="the server-less ingest")
    wait_until(lambda: brain_beliefs(engine, "local"), 40, what="the server-less follow-up build")
    letters = open_dead_letters(settings).list()
    assert "not a message" in [letter.payload for letter in letters]
    assert len(letters) == 1 + len(shapes)
    assert {j for j, _ in shapes.values() if j} <= {letter.id for letter in letters}
    queue.close()
    engine.close()


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"engine": "foo://"}, "unknown engine scheme 'foo'"),
        ({"engine_plugins": "probe=no_such_probe_module:open_probe"}, "no_such_probe_module:open_probe"),
    ],
    ids=["unknown-scheme", "bad-plugin-target"],
)
def test_a_worker_whose_engine_cannot_be_configured_exits_at_once_with_the_reason(
    flow: Flow, spawn: Spawn, fields: dict[str, str], named: str
) -> None:
    queues = dedicated(flow, "misconfigured")
    proc = spawn("misconfigured", memory_core_argv("worker", "--concurrency", "1"), ready=None, **queues, **fields)
    wait_until(lambda: not proc.alive(), 40, what="the misconfigured worker to exit")
    assert proc.popen.returncode == 2  # as the memory-core CLI exits on a MemoryCoreError
    out = proc.text()
    assert "ConfigError" in out and named in out, out[-2000:]
    assert "ready." not in out  # it never consumed a job (which it would have dead-lettered)


def test_a_worker_stopped_by_an_unrecoverable_error_exits_non_zero_like_celery(
    flow: Flow, spawn: Spawn, tmp_path: Path
) -> None:
    """Celery.start() dropped click's status: ``memory-core worker`` exited 0 where ``celery … worker`` exits 1."""
    fields = {
        **serverless(tmp_path),
        "result_backend": f"file://{tmp_path / 'no-such-folder'}",  # Celery's file backend refuses to start
    }
    proc = spawn("unrecoverable", memory_core_argv("worker", "--concurrency", "1"), ready=None, **fields)
    wait_until(lambda: not proc.alive(), 60, what="the worker to stop")
    out = proc.text()
    assert "Unrecoverable error" in out, out[-2000:]
    assert proc.popen.returncode == 1

"""Queued learn/forget as ``tool_write`` jobs (issue 15 §6): delivered by a real worker in the order they were
made, a redelivery changes nothing, held in the flow's outbox while Redis is down and delivered after, and
dead-lettered with a reason when they cannot run."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from flowkit import Flow, Proc, Spawn, celery_worker_argv, wait_until

from memory_core.consolidation import WriteOptions
from memory_core.engine import AnyItem
from memory_core.engines.reference import ReferenceEngine
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.errors import EngineUnavailable
from memory_core.items import Learning
from memory_core.meta import MemoryMeta
from memory_core.namespace import Namespace, Reach
from memory_core.query import ForgetReport, ForgetTarget, StoreReceipt
from memory_core.settings import Settings
from memory_core.tools import ToolScope
from memory_core.tools.jobs import ToolWrite
from memory_core.tools.writes import ToolWrites
from workers.coordination import SqliteCoordination
from workers.dead_letters import SqliteDeadLetters
from workers.execution import Delivery, Runtime, Verdict, execute
from workers.kinds import JOB_KINDS
from workers.queue import JobQueue, QueueSink, open_coordination, open_tool_writes

AWS = "AKIAIOSFODNN7EXAMPLE"
TASK = "memory.tool_write"


class Away(ReferenceEngine):
    """The host's engine, not answering: every write raises ``EngineUnavailable`` (so requests are queued)."""

    def _store_with(self, item: AnyItem, options: WriteOptions) -> StoreReceipt:
        raise EngineUnavailable("connection refused")

    def _forget(self, target: ForgetTarget) -> ForgetReport:
        raise EngineUnavailable("connection refused")

    def _forget_within(self, ids: Sequence[str], reach: Reach) -> ForgetReport:
        raise EngineUnavailable("connection refused")


class Recording(QueueSink):
    """The job flow's sink, keeping each job it submitted by id (to deliver one again)."""

    def __init__(self, queue: JobQueue) -> None:
        super().__init__(queue)
        self.sent: dict[str, ToolWrite] = {}

    def submit(self, job: ToolWrite) -> str:
        job_id = super().submit(job)
        self.sent[job_id] = job
        return job_id


def _texts(engine: SQLiteEngine, place: Namespace) -> list[str]:
    page = engine.list({"filter": {"reach": Reach.subtree(place).to_dict()}, "limit": 100})
    return sorted(h.text for h in page.items)


def _done(settings: Settings, *job_ids: str) -> bool:
    coordination = open_coordination(settings)
    try:
        return all(coordination.is_done(j) for j in job_ids)
    finally:
        coordination.close()


# in process: the flow around the handler ----------------------------------------------------------------------
@pytest.fixture
def rt(tmp_path: Path) -> Runtime:
    settings = Settings(_env_file=None, max_retries=2, retry_backoff_s=0.1, retry_backoff_max_s=0.2)
    return Runtime(
        settings,
        engine=ReferenceEngine(),
        coordination=SqliteCoordination(tmp_path / "c.db", "t", 60, 60),
        letters=SqliteDeadLetters(tmp_path / "c.db", 100),
    )


def _learn(text: str, place: str = "agent:writer", after: str | None = None) -> ToolWrite:
    meta = MemoryMeta(namespace=Namespace.parse(place))
    return ToolWrite(
        op="learn", place=place, learning=Learning(text=text, meta=meta), after=after, made_at=datetime.now(UTC)
    )


def _delivery(rt: Runtime, job_id: str, payload: Any) -> Delivery:
    return Delivery(TASK, job_id, (payload,), {"engine": rt.engine_key})


def test_tool_write_is_a_row_of_the_one_table_of_job_kinds() -> None:
    row = JOB_KINDS.of(_learn("Prefers tea"))
    assert (row.task, row.queue, row.tag, row.coalesce) == (TASK, "queue_ingest", "tool_write", False)
    assert JOB_KINDS.describe(_learn(f"key {AWS}")) == "tool_write learn agent:writer"  # Flower never sees text


def test_a_redelivered_tool_write_is_a_no_op(rt: Runtime) -> None:
    job = _learn("Prefers tea")
    first = execute(rt, _delivery(rt, "j1", job.to_dict()))
    assert first.verdict is Verdict.DONE and first.result is not None and first.result["replayed"] is False
    again = execute(rt, _delivery(rt, "j1", job.to_dict()))  # the same message delivered again
    assert again.verdict is Verdict.DUPLICATE
    twin = execute(rt, _delivery(rt, "j1-twin", job.to_dict()))  # the same request under another id
    assert twin.verdict is Verdict.DONE and twin.result is not None and twin.result["replayed"] is True
    assert [h.text for h in rt.engine.list({"limit": 10}).items] == ["Prefers tea"]


def test_a_tool_write_waits_for_the_one_queued_before_it(rt: Runtime) -> None:
    later = _learn("Prefers green tea", after="j-before")
    held = execute(rt, _delivery(rt, "j2", later.to_dict()))
    assert held.verdict is Verdict.DEFER and not rt.engine.list({"limit": 10}).items
    rt.coordination.mark_done("j-before")
    assert execute(rt, _delivery(rt, "j2", later.to_dict())).verdict is Verdict.DONE


def test_a_tool_write_that_cannot_run_is_dead_lettered_with_its_reason(rt: Runtime) -> None:
    bad = {"job": "tool_write", "op": "forget", "place": "agent:writer", "made_at": "2026-12-01T12:00:00Z"}
    out = execute(rt, _delivery(rt, "j3", bad))
    assert out.verdict is Verdict.DEAD and out.letter is not None
    letter = rt.letters.get("j3")
    assert (letter.error, letter.task, letter.payload) == ("InvalidRequest", TASK, bad)
    assert "ids" in letter.message


def test_a_tool_write_whose_engine_stays_away_is_retried_then_dead_lettered(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, max_retries=2, retry_backoff_s=0.1, retry_backoff_max_s=0.2)
    rt = Runtime(
        settings,
        engine=Away(),
        coordination=SqliteCoordination(tmp_path / "c.db", "t", 60, 60),
        letters=SqliteDeadLetters(tmp_path / "c.db", 100),
    )
    verdicts = [execute(rt, _delivery(rt, "j4", _learn("Prefers tea").to_dict())).verdict for _ in range(3)]
    assert verdicts == [Verdict.RETRY, Verdict.RETRY, Verdict.DEAD]
    letter = rt.letters.get("j4")
    assert letter.error == "EngineUnavailable" and "connection refused" in letter.message and letter.attempts == 3


# a real worker -----------------------------------------------------------------------------------------------
@pytest.mark.redis
@pytest.mark.slow
def test_queued_learn_and_forget_are_delivered_by_a_worker_in_order_and_redelivery_changes_nothing(
    flow: Flow, session_worker: Proc
) -> None:
    place = Namespace.parse(f"agent:tw-{uuid.uuid4().hex[:6]}")
    queue = JobQueue(flow.settings())
    sink = Recording(queue)
    writes = ToolWrites(Away(), sink, ToolScope.at(place))
    first = writes.learn(f"The deploy key is {AWS}")
    second = writes.learn("Prefers green tea")
    forget = writes.forget([str(first.id)])
    assert [a.state for a in (first, second, forget)] == ["queued"] * 3
    jobs = [str(a.job_id) for a in (first, second, forget)]
    engine = SQLiteEngine(flow.db_path)
    try:
        wait_until(lambda: _done(flow.settings(), *jobs), 60, what="the three tool_write jobs")
        assert _texts(engine, place) == ["Prefers green tea"]  # the forget ran after the learn it names
        # the first learn delivered again after the forget: the worker drops it, nothing comes back
        learn = sink.sent[jobs[0]]
        queue.app.send_task(
            TASK,
            args=(learn.to_dict(),),
            kwargs={"engine": queue.engine},
            task_id=jobs[0],
            queue=queue.settings.queue_ingest,
        )
        dropped = f"job {jobs[0]}: a twin of a finished job, dropped"
        wait_until(lambda: dropped in session_worker.text(), 30, what="the redelivery dropped")
        assert _texts(engine, place) == ["Prefers green tea"]
        assert AWS not in session_worker.text()
    finally:
        engine.close()
        queue.close()


@pytest.mark.redis
@pytest.mark.slow
def test_while_redis_is_down_tool_writes_wait_in_the_outbox_and_are_delivered_when_it_returns(
    flow: Flow, spawn: Spawn, redis_server: Any, tmp_path: Path
) -> None:
    server = redis_server()
    engine_url = flow.fields["engine"].replace(str(flow.db_path), str(tmp_path / "m.db"))
    fields = {"broker_url": server.url, "var_dir": str(tmp_path / "var"), "engine": engine_url}
    queue = JobQueue(flow.settings(**fields))
    place = Namespace.parse("agent:outage")
    writes = open_tool_writes(Away(), queue, ToolScope.at(place))
    server.stop()
    learned = writes.learn(f"The deploy key is {AWS}")
    kept = writes.learn("Deploys run on Tuesdays")
    assert (learned.state, kept.state) == ("queued", "queued") and queue.outbox.waiting() == 2
    outbox = (tmp_path / "var").rglob("*")
    assert not any(p.name == "tool_writes.db" for p in outbox)  # one outbox: the job flow's
    assert all(AWS.encode() not in p.read_bytes() for p in (tmp_path / "var").rglob("*") if p.is_file())
    server.start()
    worker = spawn("tool-writes-after-outage", celery_worker_argv(flow, "tool-writes"), **fields)
    engine = SQLiteEngine(tmp_path / "m.db")
    try:
        wait_until(lambda: len(_texts(engine, place)) == 2, 60, what="the parked tool_write jobs")
        assert _texts(engine, place) == ["Deploys run on Tuesdays", "The deploy key is [REDACTED]"]
        wait_until(lambda: _done(flow.settings(**fields), str(learned.job_id), str(kept.job_id)), 30, what="done")
        assert queue.outbox.waiting() == 0 and worker.alive()
    finally:
        engine.close()
        queue.close()

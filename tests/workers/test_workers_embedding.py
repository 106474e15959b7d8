"""The embedding job kind (``embed_items``): the model runs in its own job, never in a build or on a write."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flowkit import Flow, Proc, wait_until

from memory_core.consolidation import ConsolidateRequest
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.jobs import BuildBeliefs
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.namespace import Reach
from memory_core.settings import Settings
from tests._embedding_doubles import REPLY, Counting, Submitted
from workers.coordination import SqliteCoordination
from workers.dead_letters import SqliteDeadLetters
from workers.execution import Delivery, Runtime, Verdict, execute
from workers.handlers import EMBED_PER_JOB, EmbedItems
from workers.kinds import JOB_KINDS
from workers.queue import JobQueue, open_coordination

LAYOUT = MemoryLayout()


@pytest.fixture
def model() -> Counting:
    return Counting()


@pytest.fixture
def engine(tmp_path: Path, model: Counting) -> Iterator[SQLiteEngine]:
    with SQLiteEngine(tmp_path / "m.db", embedder=model) as eng:
        yield eng


@pytest.fixture
def rt(tmp_path: Path, engine: SQLiteEngine) -> Runtime:
    return Runtime(
        Settings(_env_file=None, build_min_interval_s=0),
        engine=engine,
        coordination=SqliteCoordination(tmp_path / "c.db", "t", 60, 60),
        letters=SqliteDeadLetters(tmp_path / "c.db", 100),
        queue=Submitted(),  # type: ignore[arg-type]
    )


def turns(engine: SQLiteEngine, n: int) -> None:
    """``n`` live turns (each logs the user's text, then the reply: two items stored ``accepted``)."""
    mem = AgentMemory(engine, LAYOUT, "alice")
    for i in range(n):
        mem.pre_turn({"thread_id": "t", "turn_index": i, "user_text": f"I planted {i} olive trees in Lisbon."})
        mem.post_turn({"thread_id": "t", "turn_index": i, "assistant_text": REPLY})


def done(flow: Flow, job_id: str) -> bool:
    coordination = open_coordination(flow.settings())
    try:
        return coordination.is_done(job_id)
    finally:
        coordination.close()


def queued(rt: Runtime) -> list[Any]:
    queue = rt.queue
    assert isinstance(queue, Submitted)
    return queue.jobs


def test_the_kind_is_one_row_of_the_table_and_its_jobs_parse_from_json() -> None:
    row = JOB_KINDS.of(EmbedItems())
    assert (row.task, row.queue, row.coalesce) == ("memory.embed_items", "queue_beliefs", True)
    assert JOB_KINDS.parse('{"job": "embed_items", "limit": 5}') == EmbedItems(limit=5)
    assert JOB_KINDS.maintenance_task("memory.embed_due") is not None


def test_a_build_job_embeds_nothing_and_submits_the_embedding_job(rt: Runtime, engine: SQLiteEngine, model: Counting):
    turns(engine, 3)
    waiting = engine.stats()["embedding_wait"]
    assert waiting == 6 and model.texts == []  # stored, never encoded on the host
    job = BuildBeliefs(request=ConsolidateRequest(reach=Reach.subtree(LAYOUT.root)))
    out = execute(rt, Delivery("memory.build_beliefs", "b1", (job.to_dict(),)))
    assert out.verdict is Verdict.DONE and out.result is not None
    assert model.texts == [] and engine.stats()["embedding_wait"] == waiting  # the build ran no model
    assert out.result["embedding"] == "follow-1" and queued(rt) == [EmbedItems()]


def test_the_embedding_job_encodes_its_limit_and_chains_until_nothing_waits(
    rt: Runtime, engine: SQLiteEngine, model: Counting
) -> None:
    turns(engine, 3)
    first = execute(rt, Delivery("memory.embed_items", "e1", (EmbedItems(limit=4).to_dict(),)))
    assert first.verdict is Verdict.DONE and first.result is not None
    assert first.result == {"job": "embed_items", "embedded": 4, "waiting": 2, "follow_up": "follow-1"}
    assert queued(rt) == [EmbedItems(limit=4)] and 0 < len(model.texts) <= 4
    second = execute(rt, Delivery("memory.embed_items", "e2", (queued(rt)[0].to_dict(),)))
    assert second.result == {"job": "embed_items", "embedded": 2, "waiting": 0, "follow_up": None}
    assert engine.stats()["embedding_wait"] == 0 and len(queued(rt)) == 1


def test_beat_submits_an_embedding_job_only_while_items_wait(rt: Runtime, engine: SQLiteEngine) -> None:
    idle = execute(rt, Delivery("memory.embed_due", "d1"))
    assert idle.result == {"waiting": 0, "job": None} and queued(rt) == []
    turns(engine, 1)
    due = execute(rt, Delivery("memory.embed_due", "d2"))
    assert due.result == {"waiting": 2, "job": "follow-1"} and queued(rt) == [EmbedItems()]


@pytest.mark.parametrize("limit", [0, -1, EMBED_PER_JOB + 1, "ten"])
def test_an_embedding_job_with_a_bad_limit_is_dead_lettered_unrun(
    rt: Runtime, engine: SQLiteEngine, model: Counting, limit: Any
) -> None:
    turns(engine, 1)
    out = execute(rt, Delivery("memory.embed_items", f"bad-{limit}", ({"job": "embed_items", "limit": limit},)))
    assert out.verdict is Verdict.DEAD and "limit" in str(out.letter)
    assert model.texts == [] and engine.stats()["embedding_wait"] == 2


@pytest.mark.redis
@pytest.mark.slow
def test_a_worker_embeds_what_live_turns_stored_once_the_job_is_submitted(flow: Flow, session_worker: Proc) -> None:
    engine = SQLiteEngine(flow.db_path)
    mem = AgentMemory(engine, LAYOUT, "embed-e2e")
    mem.pre_turn({"thread_id": "t", "turn_index": 0, "user_text": "I keep bees on the roof of my flat in Porto."})
    mem.post_turn({"thread_id": "t", "turn_index": 0, "assistant_text": REPLY})
    assert engine.stats()["embedding_wait"] >= 2  # stored accepted: waiting for the model
    queue = JobQueue(flow.settings())
    job_id = queue.submit(EmbedItems())
    wait_until(lambda: done(flow, job_id), 60, what="the embedding job")
    assert engine.stats()["embedding_wait"] == 0
    queue.close()
    engine.close()

"""Redis round trips per job (issue 13 §4), counted on the wire so they cannot creep back up.

A round trip is one write of commands to the socket (``Connection.send_packed_command``: a pipeline of many
commands is one); scripts are loaded before counting (``EVALSHA`` of a script Redis has not seen costs a
``SCRIPT LOAD`` once per server).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from flowkit import Flow
from test_workers_execution import FakeQueue, FlakyEngine, build_delivery, converse
from test_workers_queue import ALICE, DOC

from memory_core.namespace import Reach
from memory_core.settings import Settings
from workers.coordination import RedisCoordination, pending_key
from workers.dead_letters import SqliteDeadLetters
from workers.execution import Runtime, Verdict, execute
from workers.queue import JobQueue


class Counting(redis.connection.Connection):
    """A Redis connection that counts its round trips (class-wide, reset by each test)."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        Counting.sent += 1
        super().send_packed_command(command, check_health)


@pytest.fixture
def counted(workers_redis: str) -> Iterator[RedisCoordination]:
    prefix = f"mc-rt-{uuid.uuid4().hex[:8]}"
    pool = redis.ConnectionPool.from_url(workers_redis, decode_responses=True, connection_class=Counting)
    client: redis.Redis[str] = redis.Redis(connection_pool=pool, decode_responses=True)
    yield RedisCoordination(client, prefix, job_ttl_s=60, keep_s=60)
    keys = list(client.scan_iter(match=f"{prefix}*"))
    if keys:
        client.delete(*keys)
    client.close()


def worker(counted: RedisCoordination, tmp_path: Path) -> Runtime:
    settings = Settings(_env_file=None, build_min_interval_s=0)
    return Runtime(
        settings,
        engine=FlakyEngine(),
        coordination=counted,
        letters=SqliteDeadLetters(tmp_path / "letters.db", 100),
        queue=FakeQueue(),  # type: ignore[arg-type]
    )


def trips(fn: Any, *args: Any) -> tuple[int, Any]:
    before = Counting.sent
    got = fn(*args)
    return Counting.sent - before, got


def test_a_single_scope_build_costs_four_round_trips(counted: RedisCoordination, tmp_path: Path) -> None:
    rt = worker(counted, tmp_path)
    engine = rt.engine
    assert isinstance(engine, FlakyEngine)
    converse(engine, "warm", "I live in Oslo.")
    converse(engine, "a", "I play the cello.")
    warm = execute(rt, build_delivery("warm", Reach.exact("agent:warm")))  # loads the scripts once
    assert warm.verdict is Verdict.DONE
    key = pending_key(rt.engine_key, ALICE)
    n, out = trips(execute, rt, build_delivery("j1", Reach.exact("agent:a"), pending=key, triggered_us=None))
    assert out.verdict is Verdict.DONE and [s["enter"] for s in out.result["scopes"]] == ["acquired"]
    assert engine.calls == ["agent:warm", "agent:a"]
    # begin (clear pending, done?, count, progress) + gate enter + gate leave + done: it was 8 before issue 13
    assert n == 4
    n, out = trips(execute, rt, build_delivery("j1", Reach.exact("agent:a")))
    assert out.verdict is Verdict.DUPLICATE and n == 2  # a twin of a finished job: begin, and its count taken back
    assert counted.attempts("j1") == 1


def test_each_more_scope_costs_three_more_round_trips(counted: RedisCoordination, tmp_path: Path) -> None:
    rt = worker(counted, tmp_path)
    engine = rt.engine
    assert isinstance(engine, FlakyEngine)
    for agent in ("a", "b", "c"):
        converse(engine, agent, "I play the cello.")
    assert execute(rt, build_delivery("warm", Reach.exact("agent:a"))).verdict is Verdict.DONE
    n, out = trips(execute, rt, build_delivery("j3", Reach.subtree()))
    assert out.verdict is Verdict.DONE and len(out.result["scopes"]) == 3
    assert n == 4 + 2 * 3  # each scope before the last: enter, leave, and its progress mark


@pytest.mark.redis
def test_a_submit_asks_the_coordination_store_once(flow: Flow, counted: RedisCoordination) -> None:
    tag = uuid.uuid4().hex[:6]
    lone = {f"queue_{q}": f"{flow.uid}-{tag}-{q}" for q in ("beliefs", "ingest", "maintenance")}
    queue = JobQueue(flow.settings(**lone), coordination=counted)
    try:
        queue.submit(DOC)  # the first publish connects to the broker
        for job in (ALICE, DOC):
            n, _ = trips(queue.submit, job)
            assert n == 1  # bind the id and claim the pending mark together
        n, _ = trips(queue.submit, ALICE)  # coalesced into the queued one: still one
        assert n == 1
    finally:
        queue.close()
        client = flow.client()
        client.delete(*lone.values())

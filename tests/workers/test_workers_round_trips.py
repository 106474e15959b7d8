"""Redis round trips per job (issue 13 §4), counted on the wire so they cannot creep back up.

A round trip is one write of commands to the socket (``Connection.send_packed_command``: a pipeline of many
commands is one); scripts are loaded before counting (``EVALSHA`` of a script Redis has not seen costs a
``SCRIPT LOAD`` once per server).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from flowkit import Flow
from test_workers_execution import FakeQueue, FlakyEngine, build_delivery, converse
from test_workers_queue import ALICE, DOC, OTHER

from memory_core.errors import InvalidRequest
from memory_core.lifecycle.jobs import BuildBeliefs
from memory_core.namespace import Reach
from memory_core.settings import Settings
from workers.baseline import NOOP, create_baseline
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
    n, out = trips(execute, rt, build_delivery("j1", Reach.exact("agent:a"), pending=key))
    assert out.verdict is Verdict.DONE and [s["enter"] for s in out.result["scopes"]] == ["acquired"]
    assert engine.calls == ["agent:warm", "agent:a"]
    # begin (clear pending, its stamp, done?, count, progress) + gate enter + gate leave + done: 8 before issue 13
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


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every write of commands to a Redis socket in this process (the broker's and the stores'), health PINGs aside."""
    sent: list[bytes] = []
    real = redis.connection.AbstractConnection.send_packed_command

    def counting(self: Any, command: Any, check_health: bool = True) -> None:
        packed = b"".join(bytes(c) for c in ([command] if isinstance(command, str | bytes) else command))
        if not packed.startswith(b"*1\r\n$4\r\nPING"):  # redis-py's health check, every redis_health_check_s
            sent.append(packed)
        real(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
    return sent


def writes(sent: list[bytes], fn: Any) -> int:
    del sent[:]
    fn()
    return len(sent)


@pytest.mark.redis
def test_a_submit_costs_celerys_publish_alone(flow: Flow, wire: list[bytes]) -> None:
    tag = uuid.uuid4().hex[:6]
    lone = {f"queue_{q}": f"{flow.uid}-{tag}-{q}" for q in ("beliefs", "ingest", "maintenance")}
    sink = f"{flow.uid}-{tag}-sink"
    settings = flow.settings(**lone)
    queue, raw = JobQueue(settings), create_baseline(settings, producer=True)
    builds = [BuildBeliefs(request={"reach": Reach.exact(f"agent:rt-{tag}-{i}").to_dict()}) for i in range(2)]
    same = {"args": (DOC.to_dict(),), "kwargs": {"engine": queue.engine}, "argsrepr": "doc", "kwargsrepr": ""}
    try:
        queue.submit(DOC)  # connect to the broker and the store, declare the queues
        queue.submit(builds[0])
        raw.send_task(NOOP, queue=sink, **same)
        publish = writes(wire, lambda: raw.send_task(NOOP, queue=sink, **same))
        assert publish == 2  # Celery's own: the push, then the task-sent event
        ids: list[str] = []
        assert writes(wire, lambda: ids.append(queue.submit(DOC))) == publish  # the fresh id's bind rides the push
        assert sum(b"$3\r\nSET\r\n" in w and b"LPUSH" in w for w in wire) == 1
        # the claim, the bind and the push are one script: the claim's answer decides inside Redis
        assert writes(wire, lambda: ids.append(queue.submit(builds[1]))) == publish
        assert b"EVAL" in wire[0] and b"memory.build_beliefs" in wire[0] and b"PUBLISH" in wire[1]
        mark = flow.client().get(f"{settings.redis_prefix}:pending:{pending_key(queue.engine, builds[1])}")
        assert mark is not None and mark.split("|")[0] == ids[1]
        entry = json.loads(flow.client().lindex(lone["queue_beliefs"], 0) or "null")  # the last pushed
        assert entry["headers"]["id"] == ids[1]
        _, kwargs, _ = json.loads(base64.b64decode(entry["body"]))
        assert "triggered_us" not in kwargs  # the claim's stamp is kept in the store, the message goes as serialised
        assert flow.client().get(f"{settings.redis_prefix}:job:{ids[1]}:stamp") == mark.split("|")[1]
        assert writes(wire, lambda: ids.append(queue.submit(builds[1]))) == 1  # coalesced: no push, no event
        assert ids[2] == ids[1] and b"PUBLISH" not in wire[0]
        assert flow.client().llen(lone["queue_beliefs"]) == 2
        # the binds that rode with the pushes hold: each id names its payload and no other
        for job_id, job, other in ((ids[0], DOC, OTHER), (ids[1], builds[1], DOC)):
            with pytest.raises(InvalidRequest) as caught:
                queue.publish(other, job_id)
            assert caught.value.field == "job_id"
            assert queue.publish(job, job_id) == job_id
    finally:
        queue.close()
        raw.close()
        flow.client().delete(sink, *lone.values())


@pytest.mark.redis
def test_a_push_redis_refuses_gets_no_task_sent_event_and_its_job_is_parked(flow: Flow, wire: list[bytes]) -> None:
    tag = uuid.uuid4().hex[:6]
    lone = {f"queue_{q}": f"{flow.uid}-{tag}-{q}" for q in ("beliefs", "ingest", "maintenance")}
    settings = flow.settings(**lone, var_dir=str(flow.base / f"var-{tag}"))
    build = BuildBeliefs(request={"reach": Reach.exact(f"agent:refused-{tag}").to_dict()})
    queues = [JobQueue(settings), JobQueue(settings)]  # one each: a failed publish opens its breaker
    client = flow.client()
    try:
        queues[0].submit(DOC)  # each declares its queue: kombu's declaration would meet the string first
        queues[1].submit(BuildBeliefs(request={"reach": Reach.exact(f"agent:warm-{tag}").to_dict()}))
        client.delete(lone["queue_ingest"], lone["queue_beliefs"])
        client.set(lone["queue_ingest"], "not a list")  # LPUSH answers WRONGTYPE
        client.set(lone["queue_beliefs"], "not a list")
        del wire[:]
        sent = [queues[0].send(DOC), queues[1].send(build)]
        assert [s.state for s in sent] == ["parked", "parked"]
        assert sum(b"LPUSH" in w for w in wire) == 2  # both pushes were tried, in the script or beside the bind
        assert not any(b"PUBLISH" in w for w in wire)  # Flower is told of no task that was not queued
        assert client.get(f"{settings.redis_prefix}:pending:{pending_key(queues[1].engine, build)}") is None
        assert queues[0].outbox.waiting() == 2
    finally:
        for queue in queues:
            queue.close()
        client.delete(*lone.values())


@pytest.mark.redis
def test_each_published_job_gets_one_task_sent_event_and_a_coalesced_trigger_none(flow: Flow) -> None:
    tag = uuid.uuid4().hex[:6]
    lone = {f"queue_{q}": f"{flow.uid}-{tag}-{q}" for q in ("beliefs", "ingest", "maintenance")}
    queue = JobQueue(flow.settings(**lone))
    build = BuildBeliefs(request={"reach": Reach.exact(f"agent:events-{tag}").to_dict()})
    client = flow.client()
    listener = client.pubsub()
    listener.psubscribe("*celeryev*task.sent*")
    try:
        assert listener.get_message(timeout=5) is not None  # the subscription is live
        ids = [queue.submit(DOC), queue.submit(build), queue.submit(build)]
        sent: list[dict[str, Any]] = []
        for _ in range(50):  # this session's events, among any other session's on the same database
            got = listener.get_message(timeout=0.2)
            if got is not None and got["type"] == "pmessage":
                sent.append(json.loads(base64.b64decode(json.loads(got["data"])["body"])))
            if sum(event["uuid"] in ids for event in sent) >= 2 and got is None:
                break
    finally:
        listener.close()
        queue.close()
        client.delete(*lone.values())
    ours = [event for event in sent if event["uuid"] in ids or f"events-{tag}" in str(event.get("args"))]
    assert ids[2] == ids[1] and sorted(event["uuid"] for event in ours) == sorted(ids[:2])  # none for the third
    assert {event["type"] for event in ours} == {"task-sent"}
    assert {event["name"] for event in ours} == {"memory.ingest_brain", "memory.build_beliefs"}

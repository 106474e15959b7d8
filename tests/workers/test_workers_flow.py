"""The job flow end to end: real Redis, real worker subprocesses, the SQLite engine shared with the host."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from flowkit import Flow, Proc, Spawn, celery_worker_argv, crash_shapes, wait_until

from memory_core.engines.sqlite import SQLiteEngine
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.lifecycle.runner import BackgroundRunner
from memory_core.namespace import Reach
from workers.queue import JobQueue, open_coordination, open_dead_letters

pytestmark = [pytest.mark.redis, pytest.mark.slow]

LAYOUT = MemoryLayout()
TURNS = (
    "I live in Lisbon and I work as a marine biologist.",
    "I love hiking in the Alps every summer.",
    "My sister Ana is getting married in June.",
)


def beliefs(engine: SQLiteEngine, agent: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """(id, text, evidence) of the beliefs at an agent's node, sorted."""
    hits = engine.beliefs({"reach": Reach.exact(LAYOUT.conversations(agent)).to_dict(), "limit": 100})
    return sorted((h.id, h.text, tuple(sorted(h.derived_from))) for h in hits)


def converse(engine: SQLiteEngine, agent: str, every: int = 0) -> AgentMemory:
    """Log TURNS for ``agent`` through pre_turn/post_turn; jobs are left to the caller."""
    mem = AgentMemory(engine, LAYOUT, agent).with_policy({"build_beliefs_every": every})
    for i, text in enumerate(TURNS):
        mem.pre_turn({"thread_id": "t1", "turn_index": i, "user_text": text})
        mem.post_turn({"thread_id": "t1", "turn_index": i, "assistant_text": "Noted."})
    return mem


def undisturbed(flow: Flow, tmp_path: Path, job: BuildBeliefs, agent: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """The beliefs the same job gives on a copy of the database, run in-process without interruption."""
    copy = tmp_path / "control.db"
    src, dst = sqlite3.connect(flow.db_path), sqlite3.connect(copy)
    src.backup(dst)
    src.close()
    dst.close()
    control = SQLiteEngine(copy)
    BackgroundRunner(control, LAYOUT).run(job)
    out = beliefs(control, agent)
    control.close()
    return out


def done(flow: Flow, *job_ids: str, **extra: Any) -> bool:
    coordination = open_coordination(flow.settings(**extra))
    try:
        return all(coordination.is_done(j) for j in job_ids)
    finally:
        coordination.close()


def dedicated(flow: Flow, tag: str) -> dict[str, str]:
    """Queue names no other worker of the session consumes."""
    return {f"queue_{q}": f"{flow.uid}-{tag}-{q}" for q in ("beliefs", "ingest", "maintenance")}


# ---------------------------------------------------------------------------------------------------------
def build_overlap(flow: Flow, ns: str, most: int = 2) -> int:
    """Assert between one and ``most`` builds of ``ns`` started and never two at once; return how many still run."""
    events = sorted((e for e in flow.events() if e["ns"] == ns), key=lambda e: e["t"])
    starts = [e for e in events if e["event"] == "start"]
    assert 1 <= len(starts) <= most, events
    running = 0
    for event in events:
        running += 1 if event["event"] == "start" else -1
        assert running <= 1, f"two builds of one scope at once: {events}"
    return running


def most_builds(first_s: float, last_s: float, min_interval_s: float) -> int:
    """The most builds a burst of triggers sent between ``first_s`` and ``last_s`` may cause: 1 + ⌈span / interval⌉.

    Passes of one scope start at least ``min_interval_s`` apart, and once the last trigger is in, at most one more
    pass starts (the follow-up that reads it). Taken from the triggers' own timestamps, so a burst that a busy
    machine stretches past one interval allows the builds it really earns, and no more (issue 13 "must show").
    """
    return 1 + math.ceil(max(0.0, last_s - first_s) / min_interval_s)


def test_a_post_turn_job_runs_on_a_worker_and_its_beliefs_reach_the_next_pack(flow: Flow, session_worker: Proc) -> None:
    engine = SQLiteEngine(flow.db_path)
    queue = JobQueue(flow.settings())
    mem = AgentMemory(engine, LAYOUT, "alice-e2e").with_policy({"build_beliefs_every": 2})
    ids: list[str] = []
    for i, text in enumerate(TURNS[:2]):
        mem.pre_turn({"thread_id": "t1", "turn_index": i, "user_text": text})
        report = mem.post_turn({"thread_id": "t1", "turn_index": i, "assistant_text": "Noted."})
        ids += [queue.submit(job) for job in report.jobs]
    assert len(ids) == 1  # turn index 1 completes the period of 2

    wait_until(lambda: done(flow, *ids), 30, what="the build job")
    ttl = wait_until(
        lambda: flow.client().ttl(f"celery-task-meta-{ids[0]}") > 0 and flow.client().ttl(f"celery-task-meta-{ids[0]}"),
        10,
        what="the job's stored result",
    )
    assert ttl <= flow.fields["result_expires_s"]  # test results do not linger for a day
    found = beliefs(engine, "alice-e2e")
    assert any("Lisbon" in text for _, text, _ in found)

    # A belief gives way to its source turn when the pack shows that turn (recall.repeats), so the next pack
    # reads learnings only: what a host sees once the turn itself has left the history window.
    learnings_only = mem.with_policy({"history_limit": 0, "team_limit": 0})
    pack = learnings_only.pre_turn({"thread_id": "t2", "turn_index": 0, "user_text": "Where do I live?"}).pack
    learnings = pack.markdown.split("## Learnings", 1)[1].split("\n## ", 1)[0]
    assert any(text in learnings for _, text, _ in found)
    queue.close()
    engine.close()


def test_100_triggers_for_one_scope_give_at_most_one_build_per_interval_never_two_at_once(
    flow: Flow, session_worker: Proc
) -> None:
    engine = SQLiteEngine(flow.db_path)
    mem = converse(engine, "bob-burst")
    queue = JobQueue(flow.settings())
    client = flow.client()
    hold = f"{flow.prefix}:probe:hold"
    client.set(hold, "1")  # builds wait while the burst arrives: a build longer than the burst
    try:
        first = time.time()
        ids = [queue.submit(mem.history_build()) for _ in range(100)]
        last = time.time()
        wait_until(
            lambda: any(e["ns"] == "agent:bob-burst" and e["event"] == "start" for e in flow.events()),
            30,
            what="the first build to start",
        )
    finally:
        client.delete(hold)
    wait_until(lambda: done(flow, *set(ids)), 60, what="every trigger's job")

    assert build_overlap(flow, "agent:bob-burst", most_builds(first, last, flow.settings().build_min_interval_s)) == 0
    assert beliefs(engine, "bob-burst")
    queue.close()
    engine.close()


def test_100_parallel_triggers_spread_over_a_second_give_at_most_one_build_per_interval_never_two_at_once(
    flow: Flow, session_worker: Proc
) -> None:
    """Builds far shorter than the burst: without a minimum interval each finished build let the next trigger in."""
    import threading

    engine = SQLiteEngine(flow.db_path)
    mem = converse(engine, "hana-spread")
    job = mem.history_build()
    settings = flow.settings()
    assert settings.build_min_interval_s == 1.0  # the default the README states
    ids: list[str] = []
    sent: list[tuple[float, float]] = []  # each trigger's own (before, after) submit times
    lock = threading.Lock()

    def host(n: int) -> None:  # one host process's thread: 25 triggers over ~0.9 s (longer on a busy machine)
        queue = JobQueue(settings)
        for _ in range(25):
            before = time.time()
            job_id = queue.submit(job)
            with lock:
                ids.append(job_id)
                sent.append((before, time.time()))
            time.sleep(0.036)
        queue.close()

    threads = [threading.Thread(target=host, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(ids) == 100
    wait_until(lambda: done(flow, *set(ids)), 60, what="every trigger's job")

    most = most_builds(min(b for b, _ in sent), max(a for _, a in sent), settings.build_min_interval_s)
    build_overlap(flow, "agent:hana-spread", most)
    assert beliefs(engine, "hana-spread")
    engine.close()


def test_poison_payloads_are_dead_lettered_the_worker_keeps_serving_and_requeue_works(
    flow: Flow, session_worker: Proc
) -> None:
    from typer.testing import CliRunner

    from memory_core.cli import load_commands

    settings = flow.settings()
    engine = SQLiteEngine(flow.db_path)
    queue = JobQueue(settings)
    client = flow.client()
    letters = open_dead_letters(settings)
    before = letters.count()

    client.lpush(settings.queue_ingest, "this is not json at all")  # raw garbage straight into the queue list
    client.lpush(settings.queue_ingest, json.dumps([1, 2, 3]))  # JSON, but not a message
    malformed = queue.app.send_task(  # a message whose job is malformed (documents must not be empty)
        "memory.ingest_brain", args=({"job": "ingest_brain", "documents": []},), queue=settings.queue_ingest
    ).id
    doc = BrainDocument.new("web", "Poison tests prefer Redis lists.", title="poison-ok")
    misrouted = queue.app.send_task(  # a valid job sent to the wrong task: dead-lettered, then requeued
        "memory.build_beliefs", args=(IngestBrain(documents=(doc,)).to_dict(),), queue=settings.queue_beliefs
    ).id
    unknown = queue.app.send_task("memory.no_such_task", args=({"x": 1},), queue=settings.queue_ingest).id
    pickled = queue.app.send_task(  # a foreign content type: never deserialized (accept_content is json)
        "memory.ingest_brain",
        args=(IngestBrain(documents=(doc,)).to_dict(),),
        serializer="pickle",
        queue=settings.queue_ingest,
    ).id
    good = queue.submit(IngestBrain(documents=(BrainDocument.new("web", "The worker still serves.", title="after"),)))

    wait_until(lambda: done(flow, good, malformed, misrouted), 30, what="the good job and the poisoned ones")
    assert session_worker.alive()
    wait_until(lambda: letters.count() >= before + 6, 10, what="six dead letters")
    by_id = {letter.id: letter for letter in letters.list(200)}
    assert by_id[unknown].error == "NotRegistered" and by_id[unknown].payload == {"x": 1}
    assert by_id[pickled].error == "ContentDisallowed"
    assert by_id[malformed].error == "InvalidRequest" and by_id[malformed].attempts == 1
    assert by_id[misrouted].error == "InvalidRequest"
    raw = [letter for letter in by_id.values() if letter.error == "MalformedMessage"]
    assert "this is not json at all" in [letter.payload for letter in raw]
    assert [1, 2, 3] in [letter.payload for letter in raw]

    runner = CliRunner()
    app = load_commands()
    env = flow.env()
    listed = runner.invoke(app, ["dead-letters", "list", "--limit", "200"], env=env)
    assert listed.exit_code == 0 and misrouted[:8] in listed.output
    shown = runner.invoke(app, ["dead-letters", "show", misrouted], env=env)
    assert shown.exit_code == 0 and json.loads(shown.output)["payload"]["job"] == "ingest_brain"
    cannot = runner.invoke(app, ["dead-letters", "requeue", malformed], env=env)
    assert cannot.exit_code == 1  # its payload is not a job

    requeued = runner.invoke(app, ["dead-letters", "requeue", misrouted], env=env)
    assert requeued.exit_code == 0, requeued.output
    wait_until(lambda: done(flow, misrouted), 30, what="the requeued job")
    stored = engine.list({"filter": {"reach": Reach.subtree(LAYOUT.brain("web")).to_dict()}, "limit": 200})
    assert "Poison tests prefer Redis lists." in " ".join(h.text for h in stored.items)
    with pytest.raises(Exception, match="no dead letter"):
        letters.get(misrouted)

    purged = runner.invoke(app, ["dead-letters", "purge", "--yes"], env=env)
    assert purged.exit_code == 0 and letters.count() == 0
    queue.close()
    engine.close()


def test_entries_that_used_to_crash_a_worker_are_dead_lettered_acked_and_the_worker_keeps_serving(
    flow: Flow, session_worker: Proc
) -> None:
    """Each shape the audit found stopped the worker ("Unrecoverable error"), three of them in a crash loop."""
    settings = flow.settings()
    client = flow.client()
    letters = open_dead_letters(settings)
    before = {letter.id for letter in letters.list(1000)}
    shapes = crash_shapes(settings.queue_ingest)
    for _, raw in shapes.values():
        client.lpush(settings.queue_ingest, raw)
    queue = JobQueue(settings)
    good = queue.submit(IngestBrain(documents=(BrainDocument.new("web", "Served after the crash shapes.", title="c"),)))

    wait_until(lambda: done(flow, good), 40, what="the good job after the crash shapes")
    assert session_worker.alive() and "Unrecoverable error" not in session_worker.text()
    wait_until(lambda: len({x.id for x in letters.list(1000)} - before) >= len(shapes), 10, what="five letters")
    fresh = {x.id: x for x in letters.list(1000) if x.id not in before}
    for label, (job_id, _) in shapes.items():
        if job_id is not None:
            assert job_id in fresh, f"{label}: no dead letter under its id"
    assert fresh[shapes["body null"][0] or ""].error == "TypeError"
    assert fresh[shapes["body object"][0] or ""].error == "ValueError"
    timelimit = fresh[shapes["timelimit xx"][0] or ""]
    assert timelimit.error == "MalformedMessage" and "timelimit" in timelimit.message
    rot13 = fresh[shapes["body_encoding rot13"][0] or ""]
    assert rot13.error == "MalformedMessage" and "rot13" in rot13.message
    assert any(x.error == "MalformedMessage" and "RecursionError" in x.message for x in fresh.values())
    ids = [j for j, _ in shapes.values() if j]  # acked: none waits in Redis's unacked hash to kill the next worker
    assert not [raw for raw in client.hvals("unacked") if any(j in raw for j in ids)]
    assert client.llen(settings.queue_ingest) == 0
    queue.close()


def test_an_unavailable_engine_is_retried_with_backoff_until_the_build_succeeds(
    flow: Flow, session_worker: Proc
) -> None:
    engine = SQLiteEngine(flow.db_path)
    mem = converse(engine, "gina-retry")
    flow.client().set(f"{flow.prefix}:probe:fail:agent:gina-retry", "2")  # its next two builds raise
    queue = JobQueue(flow.settings())
    job_id = queue.submit(mem.history_build())
    wait_until(lambda: done(flow, job_id), 40, what="the retried build")
    mine = [e["event"] for e in flow.events() if e["ns"] == "agent:gina-retry"]
    assert mine.count("unavailable") == 2 and mine.count("end") == 1
    assert flow.client().get(f"{flow.prefix}:job:{job_id}:attempts") == "3"
    assert beliefs(engine, "gina-retry")
    queue.close()
    engine.close()


def _frozen_pid(flow: Flow) -> int:
    return int(wait_until(lambda: flow.client().lpop(f"{flow.prefix}:probe:frozen"), 30, what="the frozen build"))


def test_kill9_of_the_pool_child_mid_build_requeues_at_once_and_gives_the_undisturbed_beliefs(
    flow: Flow, spawn: Spawn, redis_server: Any, tmp_path: Path
) -> None:
    # A private Redis whose visibility timeout and sweep (600 s) outlast the test: only the immediate requeue
    # of task_reject_on_worker_lost can bring the job back in time.
    server = redis_server()
    fields = {"broker_url": server.url, "visibility_timeout_s": 600, "redelivery_sweep_s": 600}
    engine = SQLiteEngine(flow.db_path)
    mem = converse(engine, "carol-child")
    expected = undisturbed(flow, tmp_path, mem.history_build(), "carol-child")
    assert expected
    worker = spawn("victim-child", celery_worker_argv(flow, "victim-child"), **fields)
    flow.client().set(f"{flow.prefix}:probe:freeze:agent:carol-child", "1")
    queue = JobQueue(flow.settings(**fields))
    job_id = queue.submit(mem.history_build())

    pid = _frozen_pid(flow)
    assert pid in worker.children()  # a pool child, in the middle of consolidate
    os.kill(pid, signal.SIGKILL)

    wait_until(lambda: done(flow, job_id, **fields), 40, what="the requeued build")
    assert worker.alive()
    assert beliefs(engine, "carol-child") == expected  # same beliefs as an undisturbed run, no duplicates
    attempts = redis.Redis.from_url(server.url, decode_responses=True).get(f"{flow.prefix}:job:{job_id}:attempts")
    assert attempts == "2"
    queue.close()
    engine.close()


def test_kill9_of_the_whole_worker_mid_build_redelivers_after_the_visibility_timeout(
    flow: Flow, spawn: Spawn, tmp_path: Path
) -> None:
    queues = dedicated(flow, "main")
    engine = SQLiteEngine(flow.db_path)
    mem = converse(engine, "dora-main")
    expected = undisturbed(flow, tmp_path, mem.history_build(), "dora-main")
    victim = spawn("victim-main", celery_worker_argv(flow, "victim-main", queues=queues["queue_beliefs"]), **queues)
    flow.client().set(f"{flow.prefix}:probe:freeze:agent:dora-main", "1")
    queue = JobQueue(flow.settings(**queues))
    job_id = queue.submit(mem.history_build())

    _frozen_pid(flow)
    victim.kill9()  # main process and children: nobody rejects the message; it stays in Redis's unacked hash
    unacked = flow.client().hvals("unacked")
    assert any(job_id in raw for raw in unacked)
    assert not done(flow, job_id)

    spawn("rescuer", celery_worker_argv(flow, "rescuer", queues=queues["queue_beliefs"]), **queues)
    wait_until(lambda: done(flow, job_id), 60, what="the redelivered build")
    assert beliefs(engine, "dora-main") == expected
    queue.close()
    engine.close()


def test_broker_down_during_submit_parks_the_job_and_it_runs_after_redis_returns(
    flow: Flow, spawn: Spawn, redis_server: Any, tmp_path: Path
) -> None:
    server = redis_server()
    engine_url = flow.fields["engine"].replace(str(flow.db_path), str(tmp_path / "m.db"))
    fields = {"broker_url": server.url, "var_dir": str(tmp_path / "var"), "engine": engine_url}
    queue = JobQueue(flow.settings(**fields))
    engine = SQLiteEngine(tmp_path / "m.db")
    source = LAYOUT.brain("outage")

    def doc(title: str) -> IngestBrain:
        return IngestBrain(documents=(BrainDocument.new("outage", f"{title} is kept in the brain.", title=title),))

    def stored(title: str) -> bool:
        page = engine.list({"filter": {"reach": Reach.subtree(source).to_dict()}, "limit": 200})
        return any(title in h.text for h in page.items)

    def built() -> bool:
        return bool(engine.beliefs({"reach": Reach.subtree(source).to_dict()}))

    # 1. Redis is down: submit raises nothing and parks the job; a worker started after Redis returns drains it
    server.stop()
    first = queue.submit(doc("parked-first"))
    assert queue.outbox.waiting() == 1
    server.start()
    worker = spawn("after-outage", celery_worker_argv(flow, "after-outage"), **fields)
    wait_until(lambda: stored("parked-first") and built(), 40, what="the parked job and its follow-up build")
    wait_until(lambda: done(flow, first, **fields), 30, what="the parked job marked done")

    # 2. Redis stops while a late-ack build is in flight: the worker survives and reconnects
    client = flow.client()
    client.set(f"{flow.prefix}:probe:hold", "1")
    mark = time.time()
    queue.submit(BuildBeliefs(request={"reach": Reach.subtree(source).to_dict()}))
    wait_until(lambda: any(e["ns"] == str(source) and e["t"] >= mark for e in flow.events()), 30, what="the held build")
    server.stop()
    client.delete(f"{flow.prefix}:probe:hold")

    # 3. a job submitted while Redis is down is delivered by the next submit once it is back
    second = queue.submit(doc("parked-second"))
    assert queue.outbox.waiting() == 1
    server.start()
    time.sleep(1.2)  # past the submit circuit (0.5 s, doubled once): the next submit tries the broker again
    third = queue.submit(doc("after-return"))  # drains the outbox first, then publishes its own job
    assert queue.outbox.waiting() == 0
    wait_until(lambda: stored("parked-second") and stored("after-return"), 60, what="both jobs to run")
    wait_until(lambda: done(flow, second, third, **fields), 30, what="both jobs marked done")  # stored comes first
    assert worker.alive()
    queue.close()
    engine.close()

"""Job-flow benchmarks: submit latency, throughput through one worker, and post_turn → belief in the next pack.

Run ``python -m bench.workers_bench`` (or ``--quick``). Needs Redis (``MEMORY_CORE_BROKER_URL`` when it is a
``redis://`` URL, else ``redis://127.0.0.1:6379/13``); every key and queue it makes carries a fresh prefix and
is deleted afterwards. Each figure sits beside a baseline measured in the same run:

* ``JobQueue.submit`` p50/p99 (ms) for an ``IngestBrain`` (a publish) and a ``BuildBeliefs`` (pending mark
  + publish) beside a raw Celery ``apply_async`` of a no-op task carrying the same message, made from the same
  job on each call as submit does (``job.to_dict()``; the same ``engine`` keyword, and a build's
  ``pending``; the same Flower summaries ``argsrepr``/``kwargsrepr``, so Celery does not
  ``saferepr`` the arguments for raw alone), its app configured alike (``workers.baseline``: the host's
  configuration, the same task-sent events and serializer). Goal (issue 13): p50 ≤ 1.25×. The note gives raw
  with its message prepared once beforehand too (no serialisation counted for raw). Round trips: raw is
  Celery's two (the push and the task-sent event), and so is submit: a fresh ``IngestBrain`` id's bind is sent in
  the push's write (``workers.queue.Ride``); a ``BuildBeliefs`` push is one script that claims the pending mark,
  binds the id, keeps Redis's stamp as the job's mark and runs kombu's push (``workers.queue.ClaimRide``).
* per-job time through one worker (concurrency 1) of a ``BuildBeliefs`` whose ``consolidate`` does nothing
  (the ``nop`` engine below: real scopes, an empty build) beside the raw no-op task through a worker configured
  alike (late acks, events, results). Goal (issue 13): ≤ 2×. This is the flow's own cost: kinds table,
  coordination round trips, the gate, the result.
* jobs/s through one worker of ``BuildBeliefs`` for agents holding one stored turn each (a real ``consolidate``
  per job), beside the raw no-op task and the nop build.

Each row's note says whether its goal is met in this run. A loaded machine moves both sides of a ratio, so the
sides are interleaved: the submit and raw paths call by call, the nop build and the raw no-op in alternating chunks.
* seconds from ``post_turn`` to its belief in the next ``pre_turn`` pack, through Redis and a worker, beside
  building the same job in the host's own thread (``BackgroundRunner``) and reading the pack.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis

from bench.common import Row, machine, percentile, print_table
from memory_core.consolidation import ConsolidateReceipt, ConsolidateRequest, ConsolidateStatus
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.namespace import Reach
from memory_core.settings import Settings, get_settings

DEFAULT_REDIS = "redis://127.0.0.1:6379/13"
BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parent.parent
SUBMIT_GOAL = 1.25
"""Issue 13: ``submit`` p50 at most this many times raw ``apply_async``'s."""
PER_JOB_GOAL = 2.0
"""Issue 13: a job whose consolidate does nothing at most this many times a raw no-op task's time."""


class NopEngine(SQLiteEngine):
    """The SQLite engine whose ``consolidate`` does nothing (the scopes are real): the flow's own cost per job."""

    def _consolidate(self, request: ConsolidateRequest) -> ConsolidateReceipt:
        return ConsolidateReceipt(status=ConsolidateStatus.COMPLETED, scopes=1, built=0)


def open_nop(url: str) -> NopEngine:
    """``nop:///abs/memory.db`` (an engine plugin: ``MEMORY_CORE_ENGINE_PLUGINS=nop=bench.workers_bench:open_nop``)."""
    return NopEngine(urlsplit(url).path[1:])


def goal(ratio: float | None, limit: float) -> str:
    """``goal ≤ 2×: met`` / ``… not met`` for a ratio measured in this run."""
    if ratio is None:
        return f"goal ≤ {limit:g}×: no baseline"
    return f"goal ≤ {limit:g}×: {'met' if ratio <= limit else 'not met'}"


class Bench:
    """One run's environment: Redis URL, fresh prefix and queues, a temp folder, worker subprocesses."""

    def __init__(self, quick: bool) -> None:
        configured = get_settings().broker_url
        self.url = configured if configured and configured.startswith("redis") else DEFAULT_REDIS
        self.uid = uuid.uuid4().hex[:8]
        self.tmp = Path(tempfile.mkdtemp(prefix="workers-bench-"))
        self.quick = quick
        self.fields: dict[str, Any] = {
            "broker_url": self.url,
            "engine": f"sqlite:///{self.tmp / 'memory.db'}",
            "var_dir": str(self.tmp / "var"),
            "redis_prefix": f"bench-{self.uid}",
            "queue_beliefs": f"bench-{self.uid}-beliefs",
            "queue_ingest": f"bench-{self.uid}-ingest",
            "queue_maintenance": f"bench-{self.uid}-maintenance",
        }
        self.procs: list[subprocess.Popen[bytes]] = []
        self.results: list[str] = []

    def settings(self, **extra: Any) -> Settings:
        return Settings(_env_file=None, **{**self.fields, **extra})

    def env(self, **extra: Any) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_CORE_")}
        env.update({f"MEMORY_CORE_{k.upper()}": str(v) for k, v in {**self.fields, **extra}.items()})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        return env

    def worker(self, app: str, queue: str, **extra: Any) -> None:
        """Start a concurrency-1 worker on ``queue`` and wait until it is ready."""
        log = self.tmp / f"{app}-{queue}.log"
        argv = [
            str(BIN / "celery"),
            "-A",
            app,
            "worker",
            f"--queues={queue}",
            "--concurrency=1",
            f"--hostname={queue}@%h",
            "--without-mingle",
            "--without-gossip",
            "--loglevel=warning",
        ]
        out = log.open("wb")
        proc = subprocess.Popen(
            argv, env=self.env(**extra), cwd=self.tmp, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.procs.append(proc)
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 60
        while not any(queue.encode() in k for k in client.keys("_kombu.binding.*")) or not _consuming(client, queue):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker for {queue} did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.1)

    def close(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)
        client = redis.Redis.from_url(self.url)
        for pattern in (f"bench-{self.uid}*", f"_kombu.binding*.bench-{self.uid}*"):
            keys = list(client.scan_iter(match=pattern, count=500))
            if keys:
                client.delete(*keys)
        for start in range(0, len(self.results), 500):
            client.delete(*(f"celery-task-meta-{i}" for i in self.results[start : start + 500]))
        shutil.rmtree(self.tmp, ignore_errors=True)


def _consuming(client: redis.Redis[bytes], queue: str) -> bool:
    """True once a worker's consumer registered (kombu binds the queue when the consumer starts)."""
    return bool(client.exists(f"_kombu.binding.{queue}"))


def _wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.002)


def _submit_rows(b: Bench) -> list[Row]:
    from workers.baseline import NOOP, create_baseline
    from workers.queue import JobQueue

    n = 200 if b.quick else 1000
    queue = JobQueue(b.settings())
    raw = create_baseline(b.settings(), producer=True)
    sink = f"bench-{b.uid}-sink"
    doc = IngestBrain(documents=(BrainDocument.new("bench", "A small document.", title="t"),))
    coalesce = {"pending": "0" * 32}  # a build message's one more keyword

    def raw_send(job: IngestBrain | BuildBeliefs, more: dict[str, Any]) -> None:
        """The same message as submit's, built from the same job: body, and the summaries Flower shows."""
        raw.send_task(
            NOOP,
            queue=sink,
            args=(job.to_dict(),),
            kwargs={"engine": queue.engine, **more},
            argsrepr=queue.kinds.describe(job),
            kwargsrepr="",
        )

    prepared = {  # raw's message made once, outside the timing: the job's serialisation not counted for raw
        "args": (doc.to_dict(),),
        "kwargs": {"engine": queue.engine},
        "argsrepr": queue.kinds.describe(doc),
        "kwargsrepr": "",
    }
    builds = [BuildBeliefs(request={"reach": Reach.exact(f"agent:b{i}").to_dict()}) for i in range(n + 20)]
    for i in range(20):  # warm both producers' connections and the store's
        queue.submit(doc)
        queue.submit(builds[n + i])
        raw_send(doc, {})
    cpu: list[list[float]] = []
    ingest, build, raw_ingest, raw_build, raw_prepared = interleaved(
        [
            lambda i: queue.submit(doc),
            lambda i: queue.submit(builds[i]),
            lambda i: raw_send(doc, {}),
            lambda i: raw_send(builds[i], coalesce),
            lambda i: raw.send_task(NOOP, queue=sink, **prepared),
        ],
        n,
        cpu,
    )
    queue.close()
    raw.close()
    setup = f"redis, {n} calls, nobody consuming"
    rows = []
    for label, samples, base, (own, raw_own) in (
        ("IngestBrain", ingest, raw_ingest, (cpu[0], cpu[2])),
        ("BuildBeliefs", build, raw_build, (cpu[1], cpu[3])),
    ):
        for q in (50, 99):
            row = Row(
                f"JobQueue.submit({label}) p{q}",
                setup,
                percentile(samples, q),
                "ms",
                percentile(base, q),
                "raw celery apply_async of the same message from the same job, configured alike",
                "both publish Flower's task-sent event; submit: "
                + ("the id's bind in the push's write" if label == "IngestBrain" else "claim, bind, push: one script"),
                extra={
                    "raw_prepared_ms": percentile(raw_prepared, q),
                    "cpu_ms": percentile(own, q),
                    "raw_cpu_ms": percentile(raw_own, q),
                },
            )
            if q == 50:
                row.note += f"; {goal(row.ratio, SUBMIT_GOAL)}"
                row.note += f"; raw with its message prepared beforehand: {percentile(raw_prepared, q):.3f} ms"
                mine, theirs = percentile(own, q), percentile(raw_own, q)
                row.note += f"; CPU time p50 {mine:.3f} vs {theirs:.3f} ms ({mine / theirs:.2f}×)"
            rows.append(row)
    return rows


def interleaved(
    calls: list[Callable[[int], object]], n: int, cpu: list[list[float]] | None = None
) -> list[list[float]]:
    """Each of ``calls`` timed ``n`` times (ms), round by round, the order rotating each round: a loaded machine's
    swings fall on every side alike (the comparison the brief asks for: A/B in one run, interleaved).

    ``cpu``, when given, receives each call's CPU time of this thread too (ms, ``time.thread_time``): what the call
    itself costs, which waiting for a core on a loaded machine does not inflate.
    """
    out: list[list[float]] = [[] for _ in calls]
    if cpu is not None:
        cpu[:] = [[] for _ in calls]
    for i in range(n):
        for k in range(len(calls)):
            j = (i + k) % len(calls)
            used = time.thread_time()
            start = time.perf_counter()
            calls[j](i)
            out[j].append((time.perf_counter() - start) * 1000.0)
            if cpu is not None:
                cpu[j].append((time.thread_time() - used) * 1000.0)
    return out


def _finished(client: redis.Redis[bytes], task_id: str) -> bool:
    """True once Celery stored SUCCESS for ``task_id`` (both apps keep results in the same Redis)."""
    raw = client.get(f"celery-task-meta-{task_id}")
    return raw is not None and b'"SUCCESS"' in raw


def _rate(b: Bench, client: redis.Redis[bytes], publish: Callable[[int], str], n: int, warm: bool = True) -> float:
    """Jobs/s: a warm-up job (the worker opens its connections and engine), then ``n``, first publish to last done."""
    if warm:
        first = publish(-1)
        _wait(lambda: _finished(client, first), 120, "the warm-up job")
        b.results.append(first)
    start = time.perf_counter()
    ids = [publish(i) for i in range(n)]
    _wait(lambda: _finished(client, ids[-1]), 600, "the last job")
    b.results += ids
    return n / (time.perf_counter() - start)


def _paired_rates(
    b: Bench, client: redis.Redis[bytes], publishers: tuple[Callable[[int], str], Callable[[int], str]], n: int
) -> tuple[float, float]:
    """Jobs/s of two publishers, each through its own worker, in alternating chunks of ``n // 10`` whose order flips
    every round: a loaded machine's swings fall on both sides alike (A/B in one run, interleaved)."""
    chunk, seconds = max(1, n // 10), [0.0, 0.0]
    for r, start in enumerate(range(0, n, chunk)):
        count = min(chunk, n - start)
        for which in (0, 1) if r % 2 == 0 else (1, 0):
            publish = partial(lambda i, p, s: p(s + i), p=publishers[which], s=start)
            seconds[which] += count / _rate(b, client, publish, count, warm=r == 0)
    return n / seconds[0], n / seconds[1]


def _one_turn_agents(b: Bench, n: int) -> list[BuildBeliefs]:
    """``n + 1`` agents (a warm-up one first) holding one stored turn each, and the build job of each."""
    engine = SQLiteEngine(b.tmp / "memory.db")  # also creates the schema before the worker opens the file
    layout = MemoryLayout()
    jobs = []
    for i in range(-1, n):
        mem = AgentMemory(engine, layout, f"t{i + 1}").with_policy({"build_beliefs_every": 0})
        mem.pre_turn({"thread_id": "t", "turn_index": 0, "user_text": f"I keep {i + 2} bee hives in Town{i + 1}."})
        mem.post_turn({"thread_id": "t", "turn_index": 0, "assistant_text": "Noted."})
        jobs.append(mem.history_build())
    engine.close()
    return jobs


def _built_a_scope(client: redis.Redis[bytes], task_id: str) -> bool:
    """True when the job's stored result shows a scope it built under the lock (not an empty reach)."""
    import json

    raw = client.get(f"celery-task-meta-{task_id}")
    scopes = json.loads(raw or b"{}").get("result", {}).get("scopes", []) if raw else []
    return any(s.get("enter") == "acquired" and s.get("passes", 0) >= 1 for s in scopes)


def _throughput_rows(b: Bench) -> list[Row]:
    from workers.baseline import NOOP, create_baseline
    from workers.queue import JobQueue

    n = 100 if b.quick else 500
    settings = b.settings()
    client = redis.Redis.from_url(b.url)
    jobs = _one_turn_agents(b, n)
    b.worker("workers.celery_app", settings.queue_beliefs)
    queue = JobQueue(settings)
    flow_rate = _rate(b, client, lambda i: queue.submit(jobs[i + 1]), n)
    queue.close()
    if not all(_built_a_scope(client, task_id) for task_id in b.results[-n:]):
        raise RuntimeError("a throughput job built no scope: the row would not measure a consolidate")

    nop = {  # the same jobs on the same file, through an engine whose consolidate does nothing
        "engine": f"nop:///{b.tmp / 'memory.db'}",
        "engine_plugins": "nop=bench.workers_bench:open_nop",
        "queue_beliefs": f"bench-{b.uid}-nop",
    }
    b.worker("workers.celery_app", nop["queue_beliefs"], **nop)
    nop_queue = JobQueue(b.settings(**nop))
    raw_queue = f"bench-{b.uid}-raw"
    b.worker("workers.baseline", raw_queue)
    raw = create_baseline(settings, producer=True)
    nop_ids: list[str] = []

    def nop_publish(i: int) -> str:
        nop_ids.append(nop_queue.submit(jobs[i + 1]))
        return nop_ids[-1]

    nop_rate, raw_rate = _paired_rates(
        b, client, (nop_publish, lambda i: str(raw.send_task(NOOP, queue=raw_queue).id)), n
    )
    nop_queue.close()
    raw.close()
    if not all(_built_a_scope(client, task_id) for task_id in nop_ids[1:]):
        raise RuntimeError("a nop job entered no scope: the row would not measure the flow")
    per_job = Row(
        "per-job time, consolidate doing nothing",
        f"BuildBeliefs, one scope each, {n} jobs, concurrency 1",
        1000 / nop_rate,
        "ms/job",
        1000 / raw_rate,
        "raw celery no-op, worker configured alike; chunks interleaved",
        "the flow's own cost: kinds, coordination round trips, gate, result",
    )
    per_job.note += f"; {goal(per_job.ratio, PER_JOB_GOAL)}"
    return [
        per_job,
        Row(
            "jobs through one worker",
            f"BuildBeliefs, one stored turn per agent, {n} jobs, concurrency 1",
            flow_rate,
            "jobs/s",
            raw_rate,
            "raw celery no-op",
            f"each job: scope lock + a real consolidate; the nop build did {nop_rate:.0f} jobs/s in this run",
            extra={"nop_jobs_per_s": nop_rate},
        ),
    ]


def _pack_rows(b: Bench) -> list[Row]:
    from workers.queue import JobQueue

    k = 3 if b.quick else 8
    engine = SQLiteEngine(b.tmp / "memory.db")
    layout = MemoryLayout()
    queue = JobQueue(b.settings())
    queued: list[float] = []
    inline: list[float] = []
    for i in range(2 * k):
        agent = f"pack-{i}"
        mem = AgentMemory(engine, layout, agent).with_policy({"build_beliefs_every": 1})
        city = f"Town{i}ville"
        mem.pre_turn({"thread_id": "t", "turn_index": 0, "user_text": f"I live in {city} with my two cats."})
        start = time.perf_counter()
        report = mem.post_turn({"thread_id": "t", "turn_index": 0, "assistant_text": "Good to know."})
        if i % 2 == 0:
            for job in report.jobs:
                queue.submit(job)
        else:
            for job in report.jobs:
                mem.run_background(job)
        _wait(partial(_believes, mem, city), 60, "the belief in the pack")
        (queued if i % 2 == 0 else inline).append(time.perf_counter() - start)
    queue.close()
    engine.close()
    return [
        Row(
            "post_turn → belief in the next pack p50",
            f"sqlite + redis + 1 worker, {k} turns",
            percentile(queued, 50),
            "s",
            percentile(inline, 50),
            "the same build inline in the host",
            "polls the pack every ~2 ms",
        )
    ]


def _believes(mem: AgentMemory, fact: str) -> bool:
    """True once the pack for ``fact`` holds it in its Learnings section.

    The pack reads learnings only: a belief gives way to its source turn when the pack shows that turn too
    (``recall.repeats``), so with the history section on, the turn would stand in for the belief.
    """
    markdown = mem.with_policy({"history_limit": 0, "team_limit": 0}).recall(fact).markdown
    return "## Learnings" in markdown and fact in markdown.split("## Learnings", 1)[1].split("\n## ", 1)[0]


def run(quick: bool = False) -> list[Row]:
    """Every job-flow row (``quick``: fewer calls and jobs).

    Rows carry a note instead when Redis is absent, and a section that fails (a wait that times out) gives one
    row saying so, with its error, while the other sections still run.
    """
    b = Bench(quick)
    try:
        redis.Redis.from_url(b.url, socket_connect_timeout=1).ping()
    except redis.RedisError as exc:
        b.close()
        return [Row("job flow", "redis", float("nan"), "—", note=f"skipped: redis unreachable ({exc})")]
    try:
        rows: list[Row] = []
        for name, section in (("submit", _submit_rows), ("throughput", _throughput_rows), ("pack", _pack_rows)):
            try:
                rows += section(b)
            except RuntimeError as exc:
                rows.append(Row(f"job flow: {name}", "redis", float("nan"), "—", note=f"failed: {exc}"))
        return rows
    finally:
        b.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and jobs, seconds")
    args = parser.parse_args()
    print_table(run(quick=args.quick), title="Job flow (Celery on Redis)")
    print(f"\nmachine: {machine()}")

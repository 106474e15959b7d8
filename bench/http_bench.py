"""The HTTP API and the prefetch cache on a real conversation: a LoCoMo replay over ``/v1/pre_turn`` and
``/v1/post_turn`` against ``memory-core serve`` with a worker running, beside the same replay in process.

Run ``python -m bench.http_bench`` (``--quick``: the first 60 turns). Rows, each beside a baseline from the same
run:

* HTTP ``pre_turn`` p50/p99 (client wall time: a token-checked request over loopback, the pack as JSON) beside
  in-process ``AgentMemory.pre_turn`` replaying the same turns on its own SQLite file;
* HTTP ``post_turn`` p50/p99 (the server queues the builds for the worker) beside in-process ``post_turn``; the
  note says how many of the builds it queued the worker finished, read back through ``GET /v1/jobs/{job_id}``
  (untimed, after the replay);
* ``PrefetchMemory.pre_turn`` p50/p99 with the cache hot (each refresh allowed to finish before the agent's next
  turn, as a model's reply time would; that wait is not timed) beside ``AgentMemory.pre_turn``; the note gives
  the share of turns served from the cache;
* the same calls split: a cache hit (a completed pack answered) beside a miss (no pack yet: an empty one
  answered, the refresh queued), each with its count;
* HTTP ``pre_turn`` against ``serve --prefetch`` (``THINK_S`` untimed between turns) beside HTTP without it.

The server and worker share one SQLite file and the server-less transport (or ``MEMORY_CORE_BROKER_URL`` when it
is a Redis URL) under a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from bench.common import Row, machine, print_table
from bench.locomo_bench import QUICK_SAMPLE, _locomo
from memory_core.cli._procs import WorkerProcess
from memory_core.consolidation import ConsolidateRequest
from memory_core.engines.sqlite import SQLiteEngine
from memory_core.host import PrefetchedTurn, PrefetchMemory
from memory_core.http.models import PostTurnResult
from memory_core.lifecycle.agent import PostTurn, PostTurnReport, PreTurn, TurnContext
from memory_core.lifecycle.jobs import BuildBeliefs
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.meta import ItemKind
from memory_core.namespace import Reach
from memory_core.replay import load_conversations
from memory_core.replay.driver import Replayer, ReplayReport
from memory_core.replay.formats import ConversationFile
from memory_core.settings import get_settings
from memory_core.timing import percentile

__all__ = ["run"]

ROOT = "team:bench"
QUICK_TURNS = 60
THINK_S = 0.05
"""Seconds between an agent's turns in the ``serve --prefetch`` replay (untimed): the refresh's chance to finish."""


def _history_build(layout: MemoryLayout, agent_id: str) -> BuildBeliefs:
    request = ConsolidateRequest(reach=Reach.exact(layout.conversations(agent_id)), kinds=(ItemKind.CONVERSATION,))
    return BuildBeliefs(request=request)


class HttpAgent:
    """``AgentMemory``'s live-turn calls over the HTTP API (what a host in another language would send)."""

    def __init__(self, client: httpx.Client, layout: MemoryLayout, agent_id: str, think_s: float = 0.0) -> None:
        self.client, self.layout, self.agent_id, self.think_s = client, layout, agent_id, think_s
        self.hits = 0
        self.job_ids: list[str] = []

    def _post(self, path: str, body: str) -> bytes:
        response = self.client.post(path, content=body, params={"agent": self.agent_id})
        if response.status_code != 200:
            raise RuntimeError(f"{path}: {response.status_code} {response.text[:300]}")
        return response.content

    def pre_turn(self, request: PreTurn) -> TurnContext:
        context = PrefetchedTurn.model_validate_json(self._post("/v1/pre_turn", request.to_json()))
        self.hits += context.earlier_lookup
        return context

    def settle(self) -> None:
        time.sleep(self.think_s)  # a model's reply time, in which a prefetch refresh completes; not timed

    def post_turn(self, request: PostTurn) -> PostTurnReport:
        result = PostTurnResult.model_validate_json(self._post("/v1/post_turn", request.to_json()))
        self.job_ids.extend(result.job_ids)
        return PostTurnReport(receipt=result.receipt)  # the server queued the jobs itself

    def history_build(self) -> BuildBeliefs:
        return _history_build(self.layout, self.agent_id)


class PrefetchAgent:
    """``AgentMemory``'s live-turn calls through ``PrefetchMemory``, waiting (untimed) for the refresh it queued."""

    def __init__(self, cache: PrefetchMemory, agent_id: str, threads: set[str]) -> None:
        self.cache, self.agent_id, self.threads = cache, agent_id, threads
        self.hits = 0
        self.hit_ms: list[float] = []
        self.miss_ms: list[float] = []

    def pre_turn(self, request: PreTurn) -> TurnContext:
        start = time.perf_counter()
        context = self.cache.pre_turn(self.agent_id, request)
        took = (time.perf_counter() - start) * 1000.0
        self.hits += context.earlier_lookup
        (self.hit_ms if context.earlier_lookup else self.miss_ms).append(took)
        return context

    def settle(self) -> None:
        deadline = time.monotonic() + 60
        while any(self.cache.pending(self.agent_id, t) for t in self.threads) and time.monotonic() < deadline:
            time.sleep(0.002)

    def post_turn(self, request: PostTurn) -> PostTurnReport:
        return self.cache.post_turn(self.agent_id, request)

    def history_build(self) -> BuildBeliefs:
        return _history_build(self.cache.layout, self.agent_id)


class _Replayer(Replayer):
    """A ``Replayer`` whose agents are made by ``make`` (HTTP or prefetch doubles of ``AgentMemory``)."""

    def __init__(self, make: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._make = make
        self._made: dict[str, Any] = {}

    def agent(self, agent_id: str) -> Any:
        if agent_id not in self._made:
            self._made[agent_id] = self._make(agent_id)
        return self._made[agent_id]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(tmp: Path) -> dict[str, str]:
    settings = get_settings()
    configured = settings.broker_url or ""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_CORE_")}
    env.update(
        {
            "MEMORY_CORE_BUILD_BELIEFS_EVERY": str(settings.build_beliefs_every),  # the in-process replay's policy
            "MEMORY_CORE_ENGINE": f"sqlite:///{tmp / 'served.db'}",
            "MEMORY_CORE_VAR_DIR": str(tmp / "var"),
            "MEMORY_CORE_BROKER_URL": configured if configured.startswith("redis") else "",
            "MEMORY_CORE_REDIS_PREFIX": f"http-bench-{uuid.uuid4().hex[:8]}",
        }
    )
    return env


def _wait_until(ready: Any, proc: subprocess.Popen[bytes], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start (exit {proc.poll()})")
        time.sleep(0.1)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


class _Settling(_Replayer):
    """A replayer whose agents ``settle()`` (untimed) before each ``pre_turn``, as a live host's reply time."""

    def _pre_turn(self, agent_id, turn, actor, report):
        self.agent(agent_id).settle()
        super()._pre_turn(agent_id, turn, actor, report)


JOBS_WAIT_S = 300.0
"""How long the bench waits, after the replay, for the worker to finish the builds the server queued."""


def _finished(client: httpx.Client, job_ids: list[str], timeout_s: float = JOBS_WAIT_S) -> int:
    """How many of ``job_ids`` reach ``SUCCESS`` within ``timeout_s``, polled through ``GET /v1/jobs/{job_id}``."""
    waiting, done = set(job_ids), 0
    deadline = time.monotonic() + timeout_s
    while waiting and time.monotonic() < deadline:
        for job_id in sorted(waiting):
            state = client.get(f"/v1/jobs/{job_id}").json().get("state")
            if state in {"SUCCESS", "FAILURE", "REVOKED"}:
                waiting.discard(job_id)
                done += state == "SUCCESS"
        if waiting:
            time.sleep(0.25)
    return done


def _http_replay(
    conv: ConversationFile, tmp: Path, layout: MemoryLayout, *, prefetch: bool = False
) -> tuple[ReplayReport, int, tuple[int, int]]:
    """The replay over HTTP: its report, the pre_turns served from the cache, and (builds finished, queued)."""
    tmp.mkdir(parents=True, exist_ok=True)
    env = _env(tmp)
    token = uuid.uuid4().hex
    tokens = tmp / "tokens.json"
    tokens.write_text(json.dumps([{"token": token, "root": ROOT}]))
    port = _free_port()
    with WorkerProcess(tmp / "worker.log", "beliefs,ingest,maintenance", 1, f"http-bench-{port}@%h", env) as worker:
        argv = [sys.executable, "-m", "memory_core", "serve", "--port", str(port), "--tokens", str(tokens)]
        argv += ["--prefetch"] if prefetch else []
        log = (tmp / "serve.log").open("wb")
        server = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_until(lambda: _answers(f"http://127.0.0.1:{port}/health"), server, "memory-core serve")
            if not worker.alive():
                raise RuntimeError(f"the worker exited:\n{worker.tail()}")
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=60) as client:
                agents: list[HttpAgent] = []

                def make(agent: str) -> HttpAgent:
                    agents.append(HttpAgent(client, layout, agent, THINK_S if prefetch else 0.0))
                    return agents[-1]

                report = _Settling(make, engine=None, layout=layout, submit=lambda j: None).replay(conv)
                queued = list(dict.fromkeys(j for a in agents for j in a.job_ids))  # coalesced builds share an id
                return report, sum(a.hits for a in agents), (_finished(client, queued), len(queued))
        finally:
            server.terminate()
            server.wait(timeout=30)
            log.close()


def _in_process(conv: ConversationFile, path: Path, layout: MemoryLayout) -> ReplayReport:
    engine = SQLiteEngine(path)
    try:
        return Replayer(engine, layout, lambda job: None).replay(conv)
    finally:
        engine.close()


def _prefetch(conv: ConversationFile, path: Path, layout: MemoryLayout) -> tuple[ReplayReport, list[PrefetchAgent]]:
    engine = SQLiteEngine(path)
    agents: dict[str, PrefetchAgent] = {}
    try:
        with PrefetchMemory(engine, layout) as cache:

            def make(agent_id: str) -> PrefetchAgent:
                agents[agent_id] = PrefetchAgent(cache, agent_id, {t.thread_id for t in conv.turns})
                return agents[agent_id]

            report = _Settling(make, engine=engine, layout=layout, submit=lambda j: None).replay(conv)
            return report, list(agents.values())
    finally:
        engine.close()


def _rows(name: str, setup: str, value: list[float], base: list[float], base_name: str, note: str = "") -> list[Row]:
    return [
        Row(f"{name} p{q}", setup, percentile(value, q), "ms", percentile(base, q), base_name, note) for q in (50, 99)
    ]


def run(quick: bool = False, sample: str = QUICK_SAMPLE) -> list[Row]:
    """The HTTP and prefetch rows (``quick``: the first ``QUICK_TURNS`` turns of ``sample``).

    Raises:
        FileNotFoundError: no LoCoMo file under ``MEMORY_CORE_DATA_DIR``.
        RuntimeError: the server or the worker did not start.
    """
    conv = load_conversations(_locomo(), "locomo", [sample])
    if quick:
        conv = replace(conv, turns=conv.turns[:QUICK_TURNS])
    layout = MemoryLayout(ROOT)
    with tempfile.TemporaryDirectory(prefix="http-bench-") as folder:
        tmp = Path(folder)
        http, _, (built, queued) = _http_replay(conv, tmp / "http", layout)
        served, served_hits, _ = _http_replay(conv, tmp / "http-prefetch", layout, prefetch=True)
        local = _in_process(conv, tmp / "local.db", layout)
        cached, prefetchers = _prefetch(conv, tmp / "prefetch.db", layout)
    hits = sum(a.hits for a in prefetchers)
    hit_ms = [ms for a in prefetchers for ms in a.hit_ms]
    miss_ms = [ms for a in prefetchers for ms in a.miss_ms]
    setup = f"replay {sample}, {len(conv.turns)} turns"
    share = f"{hits} of {len(cached.pre_turn_ms)} pre_turns from the cache"
    split = f"{len(hit_ms)} hits, {len(miss_ms)} misses (a miss answers an empty pack and queues the refresh)"
    return [
        *_rows("HTTP pre_turn", setup + ", worker running", http.pre_turn_ms, local.pre_turn_ms, "in-process"),
        *_rows(
            "HTTP post_turn",
            setup + ", worker running",
            http.post_turn_ms,
            local.post_turn_ms,
            "in-process",
            f"{built} of {queued} queued builds finished (GET /v1/jobs)",
        ),
        *_rows("prefetch pre_turn, cache hot", setup, cached.pre_turn_ms, local.pre_turn_ms, "no cache", share),
        *_rows("prefetch pre_turn, hit", setup, hit_ms, miss_ms, "miss", split),
        *_rows(
            "HTTP pre_turn, serve --prefetch",
            setup + ", worker running",
            served.pre_turn_ms,
            http.pre_turn_ms,
            "HTTP, no cache",
            f"{served_hits} of {len(served.pre_turn_ms)} from the cache, {THINK_S * 1000:.0f} ms between turns",
        ),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"the first {QUICK_TURNS} turns")
    args = parser.parse_args()
    print_table(run(quick=args.quick), title="HTTP API and prefetch cache on LoCoMo")
    print(f"\nmachine: {machine()}")

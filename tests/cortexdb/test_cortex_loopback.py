"""The doubles as real servers on loopback: the CLI's conformance, a Celery worker, the live server (opt-in).

``memory-core cortex-double`` runs as a subprocess; the conformance command, a ``memory-core worker`` and the
engine in this process all reach it over HTTP, and its ``GET /_seen`` shows what each sent.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from memory_core.cli import load_commands
from memory_core.conformance import CHECK_NAMES, FAULT_CHECKS, LOG_FAULTS, Fault, run
from memory_core.engines import open_engine
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.settings import Settings, get_settings

BIN = Path(sys.executable).parent
CI = os.environ.get("CI") == "true"
LIVE_URL = os.environ.get("MEMORY_CORE_LIVE_CORTEXDB_URL")
"""Read at import: the suite's autouse fixture strips ``MEMORY_CORE_`` variables from each test's environment."""
LIVE_KEY = os.environ.get("MEMORY_CORE_LIVE_CORTEXDB_KEY", "tinymemory-cortex-test")
KEY = "loopback-key"
VARIABLE = {"direct": "MEMORY_CORE_CORTEXDB_KEY", "hosted": "MEMORY_CORE_TINYHUMANS_TOKEN"}


def _wait(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


class _Server:
    """``memory-core cortex-double`` in its own process group; ``url`` is the engine URL it printed."""

    def __init__(self, wire: str, log: Path) -> None:
        self._log = log
        self._out = log.open("wb")
        argv = [str(BIN / "memory-core"), "cortex-double", "--wire", wire, "--port", "0"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_CORE_")}
        self.popen = subprocess.Popen(argv, stdout=self._out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        line = _wait(self._engine_line, 60, "the double to print its URL")
        self.url = line.split()[2]
        self.base = "http://" + self.url.split("://", 1)[1]

    def _engine_line(self) -> str | None:
        if self.popen.poll() is not None:
            pytest.fail(f"cortex-double exited: {self._log.read_text()}")
        return next((x for x in self._log.read_text().splitlines() if x.startswith("engine URL: ")), None)

    def seen(self) -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = httpx.get(f"{self.base}/_seen", timeout=30).json()
        return data

    def stop(self) -> None:
        try:
            os.killpg(self.popen.pid, signal.SIGTERM)
            self.popen.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)
        self._out.close()


@pytest.fixture(params=["direct", "hosted"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, _Server]]:
    srv = _Server(request.param, tmp_path / "double.log")
    yield request.param, srv
    srv.stop()


@pytest.fixture
def direct_server(tmp_path: Path) -> Iterator[_Server]:
    srv = _Server("direct", tmp_path / "double.log")
    yield srv
    srv.stop()


def _keyed(monkeypatch: pytest.MonkeyPatch, wire: str) -> None:
    monkeypatch.setenv(VARIABLE[wire], KEY)
    get_settings.cache_clear()


def _param(entry: dict[str, Any], name: str) -> str | None:
    return next((v for k, v in entry["query"] if k == name), None)


def test_the_cli_conformance_passes_against_the_running_double(
    server: tuple[str, _Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    wire, srv = server
    _keyed(monkeypatch, wire)
    result = CliRunner().invoke(load_commands(), ["conformance", "--engine", srv.url, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["passed"] is True and [c["name"] for c in data["checks"]] == list(CHECK_NAMES)
    seen = srv.seen()
    prefix = "v1/" if wire == "direct" else "memory/"
    assert seen and all(entry["path"].startswith(prefix) for entry in seen)
    assert all("authorization" not in entry["headers"] for entry in seen)


@pytest.mark.slow
def test_the_cli_faults_are_each_caught_by_their_check_over_loopback(
    server: tuple[str, _Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    wire, srv = server
    _keyed(monkeypatch, wire)
    result = CliRunner().invoke(load_commands(), ["conformance", "--engine", srv.url, "--faults", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["faults"]
    expected = [(f.value, FAULT_CHECKS[f]) for f in Fault if f not in LOG_FAULTS]  # the wires keep no log
    assert [(r["fault"], r["caught_by"]) for r in rows] == expected


def test_knobs_set_over_http_reach_the_engine(direct_server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    _keyed(monkeypatch, "direct")
    assert httpx.post(f"{direct_server.base}/_knobs", json={"fail_all": True}, timeout=30).status_code == 200
    assert httpx.post(f"{direct_server.base}/_knobs", json={"nope": 1}, timeout=30).status_code == 400
    with open_engine(direct_server.url) as engine:
        health = engine.health()
    assert not health.is_serving and "503" in (health.reason or "")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, SIGKILL it past 20 s; nothing when it already ended."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def throwaway_redis(tmp_path: Path) -> Iterator[str]:
    """A ``redis-server`` on a free port (never the shared one); skips without the binary, fails when CI=true."""
    if shutil.which("redis-server") is None:
        if CI:
            pytest.fail("redis-server is not installed (CI=true: a missing service fails the run)")
        pytest.skip("redis-server is not installed")
    port = _free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip

    def pings() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            return False

    _wait(pings, 15, "the throwaway redis-server")
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.mark.slow
def test_a_celery_worker_on_the_direct_double_builds_each_scope_and_turns_never_wait(
    direct_server: _Server, throwaway_redis: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers.queue import JobQueue, open_coordination

    fields: dict[str, Any] = {
        "engine": direct_server.url,
        "cortexdb_key": KEY,
        "broker_url": throwaway_redis,
        "var_dir": str(tmp_path / "var"),
        "task_time_limit_s": 20,
        "task_soft_time_limit_s": 15,
        "visibility_timeout_s": 30,
        "lock_ttl_s": 6,
        "max_retries": 3,
        "retry_backoff_s": 0.2,
        "retry_backoff_max_s": 1.0,
        "redelivery_sweep_s": 2,
        "result_expires_s": 600,
        "build_min_interval_s": 0,
        "publish_timeout_s": 2.0,
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_CORE_")}
    env |= {f"MEMORY_CORE_{k.upper()}": str(v) for k, v in fields.items()} | {"PYTHONUNBUFFERED": "1"}
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [str(BIN / "memory-core"), "worker", "--concurrency", "1", "--hostname", f"cortex-{os.getpid()}@%h"],
            env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            _wait(lambda: worker.poll() is not None or "ready." in log.read_text(errors="replace"), 120, "the worker")
            assert worker.poll() is None, log.read_text()
            settings = Settings(_env_file=None, **fields)  # type: ignore[call-arg]
            _keyed(monkeypatch, "direct")
            queue = JobQueue(settings)
            ids: list[str] = []
            with open_engine(direct_server.url) as engine:
                for agent in ("alice", "bob"):
                    memory = AgentMemory(engine, MemoryLayout(), agent).with_policy({"build_beliefs_every": 2})
                    memory.pre_turn({"thread_id": "t1", "turn_index": 0, "user_text": "I live in Lisbon."})
                    report = memory.post_turn({"thread_id": "t1", "turn_index": 1, "assistant_text": "Noted."})
                    ids += [queue.submit(job) for job in report.jobs]
            assert len(set(ids)) == 2  # one build per agent's scope (a due build repeats its job id)
            coordination = open_coordination(settings)
            _wait(lambda: all(coordination.is_done(i) for i in set(ids)), 120, "the build jobs")
            coordination.close()
            queue.close()
        finally:
            _stop(worker)
    seen = direct_server.seen()
    builds = [entry["body"]["scope"] for entry in seen if entry["path"] == "v1/beliefs/build"]
    assert sorted(builds) == [
        "app:tinymemory/agent:alice/app:conversations",
        "app:tinymemory/agent:bob/app:conversations",
    ]  # one build per scope, through v1/beliefs/build, answered
    assert all(e["status"] == 200 for e in seen if e["path"] == "v1/beliefs/build")
    turns = [e for e in seen if e["path"].startswith("v1/experience")]
    assert len(turns) == 4 and all(_param(e, "wait") is None for e in turns)  # accepted turns never wait


@pytest.mark.skipif(LIVE_URL is None, reason="set MEMORY_CORE_LIVE_CORTEXDB_URL to test a live CortexDB")
def test_a_live_cortexdb_conforms(monkeypatch: pytest.MonkeyPatch) -> None:
    assert LIVE_URL is not None
    monkeypatch.setenv("MEMORY_CORE_CORTEXDB_KEY", LIVE_KEY)
    get_settings.cache_clear()
    with open_engine(LIVE_URL) as engine:
        health = engine.health()
        assert health.is_serving, f"{LIVE_URL} is set but not serving: {health.reason}"
        report = run(engine)
    assert report.passed, report.render()


@pytest.mark.slow
def test_the_demo_runs_the_main_job_on_the_loopback_double(
    direct_server: _Server, tmp_path: Path, tiny_data_dir: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_CORE_")}
    env |= {
        "MEMORY_CORE_DATA_DIR": str(tiny_data_dir),
        "MEMORY_CORE_VAR_DIR": str(tmp_path / "var"),
        "MEMORY_CORE_CORTEXDB_KEY": KEY,
        "COLUMNS": "200",
    }
    argv = [sys.executable, "-m", "memory_core", "demo", "--sample", "tiny-1", "--questions", "1"]
    done = subprocess.run(
        [*argv, "--engine", direct_server.url], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert f"engine  {direct_server.url}" in output
    assert "8 turns → 16 turn items" in output and "0 failed, 0 still pending" in output
    assert not (tmp_path / "var" / "demo" / "memory.db").exists()  # the double held everything
    seen = direct_server.seen()
    paths = {entry["path"] for entry in seen}
    assert {"v1/experience", "v1/experience/bulk", "v1/beliefs/build", "v1/recall"} <= paths
    builds = [entry["body"]["scope"] for entry in seen if entry["path"] == "v1/beliefs/build"]
    assert builds and all(scope.startswith("app:tinymemory/") for scope in builds)

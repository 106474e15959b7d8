"""Fixtures for the job-flow tests: a dedicated Redis db, per-session prefixes and queues, worker subprocesses.

Redis: db 14 of the server ``tests/conftest.py`` checks (its ``require_service``: skipped on a laptop without
Redis, a failure when CI=true). Every session gets its own key prefix and queue names, and deletes them at the
end. Worker subprocesses run in their own process group and are always stopped (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from flowkit import (
    FAST,
    WORKERS_DB,
    Flow,
    Proc,
    Spawn,
    cleanup,
    memory_core_argv,
    pings,
    require_program,
    root_conftest,
    wait_until,
)


@pytest.fixture(scope="session")
def workers_redis(request: pytest.FixtureRequest) -> str:
    """``redis://host:port/14`` (skips without Redis; fails when CI=true)."""
    root = root_conftest(request.config)
    root.require_service("redis", root.REDIS_HOST, root.REDIS_PORT)
    return f"redis://{root.REDIS_HOST}:{root.REDIS_PORT}/{WORKERS_DB}"


@pytest.fixture(scope="session")
def flow(workers_redis: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flow]:
    """The session's environment; keys and queues are deleted at the end."""
    uid = uuid.uuid4().hex[:8]
    base = tmp_path_factory.mktemp(f"flow-{uid}")
    prefix = f"mc-{uid}"
    fields = {
        **FAST,
        "broker_url": workers_redis,
        "redis_prefix": prefix,
        "queue_beliefs": f"{uid}-beliefs",
        "queue_ingest": f"{uid}-ingest",
        "queue_maintenance": f"{uid}-maintenance",
        "var_dir": str(base / "var"),
        "engine": f"probe:///{base / 'memory.db'}?redis={workers_redis}&prefix={prefix}:probe",
        "engine_plugins": "probe=probe_engine:open_probe",
        "build_due_interval_s": 3600,
    }
    yield Flow(workers_redis, uid, base, fields)
    cleanup(workers_redis, uid)


@pytest.fixture
def spawn(flow: Flow, tmp_path: Path) -> Iterator[Spawn]:
    """Start subprocesses for one test: ``spawn(name, argv, ready="ready.", **settings)``; all stopped after."""
    procs: list[Proc] = []

    def start(name: str, argv: list[str], ready: str | None = "ready.", timeout: float = 60.0, **extra: Any) -> Proc:
        proc = Proc(name, argv, flow.env(**extra), tmp_path, tmp_path)
        procs.append(proc)
        if ready:
            proc.wait_for(ready, timeout)
        return proc

    yield start
    for proc in reversed(procs):
        proc.stop()


@pytest.fixture(scope="session")
def session_worker(flow: Flow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """One ``memory-core worker`` on every queue (concurrency 2), shared by the session's flow tests."""
    logs = tmp_path_factory.mktemp("session-worker")
    proc = Proc(
        "session-worker",
        memory_core_argv("worker", "--concurrency", "2", "--hostname", f"main-{flow.uid}@%h"),
        flow.env(),
        logs,
        logs,
    )
    try:
        proc.wait_for("ready.", 90)
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def redis_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """A throwaway ``redis-server`` on a free port (never the shared 6379): ``make() -> handle``.

    The handle has ``url``, ``stop()`` (SHUTDOWN NOSAVE) and ``start()`` (same port again). ``make(password=…)``
    starts it with ``--requirepass`` (the handle's ``url`` carries the password). Without a ``redis-server``
    binary the test skips, and fails when CI=true (``require_program``).
    """
    require_program(request.config, "redis-server")
    servers: list[Any] = []

    class Throwaway:
        def __init__(self, password: str | None = None) -> None:
            import socket

            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
            self.password = password
            self.url = f"redis://{f':{password}@' if password else ''}127.0.0.1:{self.port}/0"
            self.proc: subprocess.Popen[bytes] | None = None

        def start(self) -> None:
            self.proc = subprocess.Popen(
                [
                    "redis-server",
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(tmp_path),
                    *(["--requirepass", self.password] if self.password else []),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            client = redis.Redis(port=self.port, password=self.password, socket_connect_timeout=0.2)
            wait_until(lambda: pings(client), 10, 0.05, "the throwaway redis-server")

        def stop(self) -> None:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.terminate()
                self.proc.wait(timeout=10)

    def make(password: str | None = None) -> Throwaway:
        server = Throwaway(password)
        server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()

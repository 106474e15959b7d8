"""Helpers for the job-flow tests: a dedicated Redis db, per-session prefixes and queues, worker subprocesses.

Redis: db 14 of the server ``tests/conftest.py`` checks (its ``require_service``: skipped on a laptop without
Redis, a failure when CI=true). Every session gets its own key prefix and queue names, and deletes them at the
end. Worker subprocesses run in their own process group and are always stopped (SIGTERM, then SIGKILL).
Timings are shrunk (visibility 12 s, hard limit 8 s, sweep 2 s) so redelivery tests stay short.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from memory_core.settings import Settings

WORKERS_DB = int(os.environ.get("TEST_WORKERS_REDIS_DB", "14"))
"""The Redis database the job-flow tests use (``TEST_WORKERS_REDIS_DB``: parallel checkouts pick their own)."""
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BIN = Path(sys.executable).parent
ROOT_CONFTEST = REPO / "tests" / "conftest.py"

FAST: dict[str, Any] = {
    "task_time_limit_s": 8,
    "task_soft_time_limit_s": 6,
    "visibility_timeout_s": 12,
    "redelivery_sweep_s": 2,
    "lock_ttl_s": 6,
    "max_retries": 3,
    "retry_backoff_s": 0.2,
    "retry_backoff_max_s": 1.0,
    "publish_timeout_s": 1.0,
    "result_expires_s": 600,  # results of a test run are gone in 10 min, not Celery's day (also cleaned at the end)
    "redis_socket_timeout_s": 5.0,
    "flower_user": "tester",
    "flower_password": "s3cret-flower",
}


def wait_until(check: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def root_conftest(config: pytest.Config) -> Any:
    """The module object of ``tests/conftest.py`` (for its ``require_service`` and Redis address)."""
    for plugin in config.pluginmanager.get_plugins():
        path = getattr(plugin, "__file__", None)
        if path and Path(path).resolve() == ROOT_CONFTEST:
            return plugin
    raise RuntimeError("tests/conftest.py is not loaded")


def require_program(config: pytest.Config, program: str) -> None:
    """Skip when ``program`` is not on PATH, unless CI=true, where that is a failure (as ``require_service``)."""
    if shutil.which(program) is not None:
        return
    message = f"{program} is not installed"
    if root_conftest(config).CI:
        pytest.fail(f"{message} (CI=true: a missing service fails the run)")
    pytest.skip(message)


@dataclass
class Flow:
    """One test session's job-flow environment: Redis URL, prefix, queues, var folder, engine file."""

    redis_url: str
    uid: str
    base: Path
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def prefix(self) -> str:
        return str(self.fields["redis_prefix"])

    @property
    def db_path(self) -> Path:
        return self.base / "memory.db"

    def settings(self, **extra: Any) -> Settings:
        """Settings for in-process use (no environment, no .env file)."""
        return Settings(_env_file=None, **{**self.fields, **extra})

    def env(self, **extra: Any) -> dict[str, str]:
        """The environment of a subprocess: this process's minus MEMORY_CORE_*, plus the session's settings."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_CORE_")}
        for name, value in {**self.fields, **extra}.items():
            if value is not None:
                env[f"MEMORY_CORE_{name.upper()}"] = str(value)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def client(self) -> redis.Redis[str]:
        return redis.Redis.from_url(self.redis_url, decode_responses=True)

    def events(self) -> list[dict[str, Any]]:
        """The probe engine's build events so far."""
        import json

        return [json.loads(e) for e in self.client().lrange(f"{self.prefix}:probe:events", 0, -1)]


def cleanup(url: str, uid: str) -> None:
    """Delete the session's keys, queue lists, kombu bindings and job results.

    Results (``celery-task-meta-<id>``) carry no session prefix; ``result_extended`` stores the queue and the
    worker's name in each, and every queue and worker of a session names its ``uid``. Results of other
    sessions sharing db 14 are left alone (they expire after ``result_expires_s``).
    """
    client = redis.Redis.from_url(url, decode_responses=True)
    for pattern in (f"mc-{uid}*", f"{uid}-*", f"_kombu.binding.{uid}-*", f"_kombu.binding_permanent.{uid}-*"):
        keys = list(client.scan_iter(match=pattern, count=500))
        if keys:
            client.delete(*keys)
    results = list(client.scan_iter(match="celery-task-meta-*", count=1000))
    for start in range(0, len(results), 500):
        batch = results[start : start + 500]
        mine = [key for key, raw in zip(batch, client.mget(batch), strict=True) if raw and _of_session(raw, uid)]
        if mine:
            client.delete(*mine)
    client.close()


def _of_session(raw: str, uid: str) -> bool:
    import json

    try:
        meta = json.loads(raw)
    except ValueError:
        return False
    if not isinstance(meta, dict):
        return False
    return str(meta.get("queue") or "").startswith(f"{uid}-") or uid in str(meta.get("worker") or "")


class Proc:
    """A subprocess in its own process group, logging to a file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], cwd: Path, log_dir: Path) -> None:
        self.name = name
        self.log = log_dir / f"{name}.log"
        self._out = self.log.open("wb")
        self.popen = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait_for(self, needle: str, timeout: float = 60.0) -> None:
        def seen() -> bool:
            if not self.alive():
                pytest.fail(f"{self.name} exited ({self.popen.returncode}):\n{self.text()[-3000:]}")
            return needle in self.text()

        wait_until(seen, timeout, 0.1, f"{self.name} to log {needle!r}")

    def children(self) -> list[int]:
        path = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        return [int(p) for p in path.read_text().split()] if path.exists() else []

    def kill9(self) -> None:
        """SIGKILL the whole process group (the main process and its pool children)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.popen.wait(timeout=10)

    def stop(self, grace: float = 15.0) -> None:
        if self.alive():
            try:
                os.killpg(self.pid, signal.SIGTERM)
                self.popen.wait(timeout=grace)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.pid, signal.SIGKILL)  # stragglers of the group, if any
        except (ProcessLookupError, PermissionError):
            pass
        if self.popen.poll() is None:
            self.popen.wait(timeout=10)
        self._out.close()


Spawn = Callable[..., Proc]


def memory_core_argv(*args: str) -> list[str]:
    return [str(BIN / "memory-core"), *args]


def celery_worker_argv(flow: Flow, name: str, queues: str | None = None, concurrency: int = 2) -> list[str]:
    """``celery -A workers.celery_app worker`` for ``queues`` (default: the session's three), without mingle/gossip."""
    names = queues or ",".join(flow.fields[k] for k in ("queue_beliefs", "queue_ingest", "queue_maintenance"))
    return [
        str(BIN / "celery"),
        "-A",
        "workers.celery_app",
        "worker",
        f"--queues={names}",
        f"--concurrency={concurrency}",
        f"--hostname={name}-{flow.uid}@%h",
        "--without-mingle",
        "--without-gossip",
        "--loglevel=info",
    ]


def pings(client: redis.Redis[bytes]) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def envelope(
    queue: str, body: str, *, headers: dict[str, Any] | None = None, properties: dict[str, Any] | None = None
) -> str:
    """A raw kombu queue entry (what a producer LPUSHes, or writes as a server-less message file)."""
    import base64
    import json
    import uuid

    props = {"delivery_tag": str(uuid.uuid4()), "body_encoding": "base64", "priority": 0}
    props["delivery_info"] = {"exchange": "", "routing_key": queue}
    return json.dumps(
        {
            "body": base64.b64encode(body.encode()).decode(),
            "content-type": "application/json",
            "content-encoding": "utf-8",
            "headers": headers or {"task": "memory.ingest_brain", "id": str(uuid.uuid4()), "lang": "py"},
            "properties": {**props, **(properties or {})},
        }
    )


def crash_shapes(queue: str) -> dict[str, tuple[str | None, str]]:
    """The raw entries that stopped a worker with "Unrecoverable error" (issue 5 audit): label → (job id, entry).

    The job id is the one in the entry's headers (its dead letter's id), None for the entry that has none.
    """
    import json
    import uuid

    def ids(**extra: Any) -> dict[str, Any]:
        return {"task": "memory.ingest_brain", "id": str(uuid.uuid4()), "lang": "py", **extra}

    job = {"job": "ingest_brain", "documents": []}
    shapes: dict[str, tuple[dict[str, Any] | None, str, dict[str, Any] | None]] = {
        "body null": (ids(), "null", None),
        "body object": (ids(), '{"a": 1}', None),
        "body_encoding rot13": (ids(), "x", {"body_encoding": "rot13"}),
        "timelimit xx": (ids(timelimit="xx", argsrepr="", kwargsrepr=""), json.dumps([[job], {}, {}]), None),
    }
    out: dict[str, tuple[str | None, str]] = {
        label: (str(h["id"]) if h else None, envelope(queue, body, headers=h, properties=p))
        for label, (h, body, p) in shapes.items()
    }
    out["nested 100k deep"] = (None, "[" * 100_000 + "]" * 100_000)
    return out

"""The operator's view of the job flow (``memory-core status``, ``demo``): job states, queue depths, running jobs.

Every read is bounded; a ``read_only`` monitor creates nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import redis
from celery import Celery
from celery.result import AsyncResult

from memory_core.errors import ConfigError
from memory_core.settings import Settings, get_settings
from workers.config import (
    broker_problem,
    broker_url,
    celery_result_backend,
    host_config,
    is_redis_url,
    prepare,
    redact,
    var_paths,
)
from workers.coordination import redis_client
from workers.queue import Outbox

__all__ = ["BrokerProbe", "JobMonitor", "JobState", "WaitReport", "probe_broker", "redact", "require_broker"]

FINISHED = frozenset({"SUCCESS", "FAILURE", "REVOKED"})  # Celery states after which a job will not run again
PIDBOX_BINDING = "celery.pidbox.exchange"  # made in broker/control once a worker binds its remote control there
_PRIORITY_SEP = "\x06\x16"  # kombu's separator of a Redis queue's priority sub-lists


@dataclass(frozen=True)
class BrokerProbe:
    """Whether the broker answered one bounded probe; else the error, and ``config_error`` when the URL is wrong."""

    url: str
    reachable: bool
    reason: str | None
    seconds: float
    config_error: str | None = None


def probe_broker(url: str, timeout_s: float) -> BrokerProbe:
    """One bounded PING of a Redis broker (connect, TLS and reply within ``timeout_s``); never raises."""
    start = time.monotonic()
    try:
        client = redis_client(url, timeout_s, 0)  # no health-check PING first: one PING, one bound
        try:
            client.ping()
        finally:
            client.close()
    except (redis.RedisError, OSError) as exc:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        problem = broker_problem(url, exc, timeout_s)
        return BrokerProbe(redact(url), False, reason, time.monotonic() - start, problem)
    return BrokerProbe(redact(url), True, None, time.monotonic() - start)


def require_broker(settings: Settings, timeout_s: float) -> None:
    """Refuse a Redis broker URL the server answers but rejects; an unreachable broker passes.

    Raises:
        ConfigError: ``broker redis://:***@host:port/0: AuthenticationError: …`` (the URL without its password).
    """
    url = broker_url(settings)
    if not is_redis_url(url):
        return
    probe = probe_broker(url, timeout_s)
    if probe.config_error is not None:
        raise ConfigError(f"broker {probe.url}: {probe.config_error}")


@dataclass(frozen=True)
class JobState:
    """One job's Celery state, and the follow-up job ids its result names (ingest → builds)."""

    id: str
    state: str
    follow_ups: tuple[str, ...] = ()
    error: str | None = None


@dataclass
class WaitReport:
    """What ``JobMonitor.wait`` saw: jobs finished, failed, and still pending when it stopped."""

    done: list[str] = field(default_factory=list)
    failed: list[JobState] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True when nothing is pending."""
        return not self.pending


class JobMonitor:
    """Read job states and queue depths; ``read_only`` (``status``) creates no file or folder."""

    def __init__(self, settings: Settings | None = None, *, read_only: bool = False) -> None:
        self.settings = settings or get_settings()
        self.read_only = read_only
        if not read_only:
            prepare(self.settings)
        self.app = Celery("memory-core-monitor", set_as_current=False)
        conf = host_config(self.settings)  # bounded publishes (remote control), no reconnect loop
        conf["result_backend"] = celery_result_backend(self.settings)
        self.app.conf.update(conf)

    def close(self) -> None:
        """Release connections."""
        self.app.close()

    def state(self, job_id: str) -> JobState:
        """The job's state (``PENDING`` also means "unknown": queued, or never seen)."""
        result: Any = AsyncResult(job_id, app=self.app)
        state = str(result.state)
        follow_ups: tuple[str, ...] = ()
        error: str | None = None
        if state == "SUCCESS" and isinstance(result.result, dict):
            follow_ups = tuple(str(x) for x in result.result.get("follow_ups", []) or [])
        elif state == "FAILURE":
            error = str(result.result)
        return JobState(job_id, state, follow_ups, error)

    def wait(
        self,
        ids: Iterable[str],
        *,
        timeout_s: float,
        poll_s: float = 0.25,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> WaitReport:
        """Wait for every job and the follow-ups they name, at most ``timeout_s``; ``on_progress(finished, known)``."""
        known: list[str] = list(dict.fromkeys(ids))
        finished: dict[str, JobState] = {}
        deadline = time.monotonic() + timeout_s
        while True:
            for job_id in [j for j in known if j not in finished]:
                st = self.state(job_id)
                if st.state in FINISHED:
                    finished[job_id] = st
                    known.extend(f for f in st.follow_ups if f not in known)
            if on_progress is not None:
                on_progress(len(finished), len(known))
            if len(finished) == len(known) or time.monotonic() > deadline:
                break
            time.sleep(poll_s)
        report = WaitReport()
        for job_id in known:
            seen = finished.get(job_id)
            if seen is None:
                report.pending.append(job_id)
            elif seen.state == "SUCCESS":
                report.done.append(job_id)
            else:
                report.failed.append(seen)
        return report

    def probe(self, timeout_s: float = 1.0) -> BrokerProbe:
        """Ask the broker once within ``timeout_s`` seconds (server-less: its folder exists); never raises."""
        url = broker_url(self.settings)
        start = time.monotonic()
        if not is_redis_url(url):
            folder = var_paths(self.settings)["broker_queue"]
            ok = folder.is_dir() or (self.read_only and not folder.exists())
            reason = None if ok else f"the server-less queue folder {folder} does not exist"
            return BrokerProbe(url, ok, reason, time.monotonic() - start)
        return probe_broker(url, timeout_s)

    def outbox_waiting(self) -> int | None:
        """Jobs parked in this machine's outbox (``var_dir/outbox.db``), 0 when there is none; None if unreadable."""
        path = var_paths(self.settings)["outbox"]
        if not path.exists():
            return 0
        try:
            outbox = Outbox(path)
            try:
                return outbox.waiting()
            finally:
                outbox.close()
        except Exception:  # a locked or damaged file: shown as unknown
            return None

    def queue_depths(self, timeout_s: float = 2.0) -> dict[str, int]:
        """Messages waiting per queue; -1 when unreadable (each Redis call bounded by ``timeout_s``)."""
        names = (self.settings.queue_beliefs, self.settings.queue_ingest, self.settings.queue_maintenance)
        url = broker_url(self.settings)
        if is_redis_url(url):
            try:
                client = redis_client(url, timeout_s, 0)
                try:
                    return {n: sum(int(client.llen(k)) for k in self._redis_keys(client, n)) for n in names}
                finally:
                    client.close()
            except (redis.RedisError, OSError):
                return dict.fromkeys(names, -1)
        folder = var_paths(self.settings)["broker_queue"]
        files = [p.name for p in folder.glob("*.msg")] if folder.exists() else []
        return {n: sum(1 for f in files if f.endswith(f".{n}.msg")) for n in names}

    @staticmethod
    def _redis_keys(client: redis.Redis[str], queue: str) -> list[str]:
        return [queue, *(k for k in client.scan_iter(match=f"{queue}{_PRIORITY_SEP}*", count=100))]

    def active(self, timeout_s: float = 1.0) -> dict[str, list[dict[str, Any]]] | None:
        """Running jobs per worker (remote control); None when no worker answered (``read_only``: or ever bound)."""
        if self.read_only and not is_redis_url(broker_url(self.settings)):
            if not (var_paths(self.settings)["broker_control"] / PIDBOX_BINDING).is_file():
                return None
        try:
            replies: Any = self.app.control.inspect(timeout=timeout_s).active()
        except Exception:  # remote control is best-effort: an unreachable broker means "no answer"
            return None
        if not replies:
            return None
        return {str(worker): list(tasks or []) for worker, tasks in replies.items()}

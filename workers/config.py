"""The Celery configuration as data (``celery_config(settings)`` → ``app.conf``), broker diagnosis, Flower's argv.

``[n.n]`` cites reference ``celery-reliability.md``; why each item is set: docs/jobs.md ("Celery configuration").
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis

from beat_schedule import ENTRIES
from memory_core.engines import mask_url as redact  # the one masking rule: ``redis://user:***@host:6379/0``
from memory_core.errors import ConfigError
from memory_core.settings import Settings
from workers.coordination import redis_options
from workers.dead_letters import TRANSIENT
from workers.kinds import JOB_KINDS, MAINTENANCE_QUEUE, JobKinds, queue_name

__all__ = [
    "ATOMIC_FILE_BACKEND",
    "DEFAULT_PASSWORD",
    "SAFE_FILESYSTEM_TRANSPORT",
    "SAFE_REDIS_TRANSPORT",
    "TRANSIENT",
    "beat_config",
    "broker_problem",
    "broker_url",
    "celery_config",
    "celery_result_backend",
    "check_timeouts",
    "flower_argv",
    "host_config",
    "is_redis_url",
    "known_queues",
    "max_countdown_s",
    "prepare",
    "queue_for",
    "redact",
    "redis_url_of",
    "resolve_queues",
    "result_backend_url",
    "var_paths",
]

SAFE_REDIS_TRANSPORT = "workers.transport:SafeRedisTransport"
SAFE_FILESYSTEM_TRANSPORT = "workers.transport:SafeFilesystemTransport"
FILESYSTEM_POLL_S = 0.2  # seconds between the server-less transport's folder scans (kombu's default: 1)
SOFT_SHUTDOWN_S = 10.0  # on a warm shutdown, seconds before running tasks are cancelled and requeued [1.18]


def is_redis_url(url: str | None) -> bool:
    """True for ``redis://`` and ``rediss://`` URLs."""
    return url is not None and urlsplit(url).scheme.lower() in {"redis", "rediss"}


_AUTH_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.AuthenticationError,
    redis.exceptions.AuthenticationWrongNumberOfArgsError,
    redis.exceptions.AuthorizationError,
    redis.exceptions.NoPermissionError,
)
_AUTH_REPLIES = ("WRONGPASS", "NOAUTH", "NOPERM", "invalid username-password pair", "Authentication required")
_DB_REPLIES = ("DB index is out of range", "invalid DB index")  # a SELECT of a database the server lacks
_AWAY_ERRORS = (ConnectionRefusedError, socket.gaierror)  # nothing listens there: no other protocol is tried


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not e for e in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def config_problem(exc: BaseException) -> str | None:
    """Why ``exc`` (or an error it came from) says the URL is wrong (auth, TLS, db number), None for an outage.

    Retrying cannot fix a configuration error (issue 11 §4).
    """
    for error in _chain(exc):
        text = str(error)
        if isinstance(error, _AUTH_ERRORS) or any(reply in text for reply in _AUTH_REPLIES):
            return f"AuthenticationError: {text or type(error).__name__} (check the user and password in the URL)"
        if any(reply in text for reply in _DB_REPLIES):
            return f"DB: {text} (the server has no such database: check the number at the end of the URL)"
        if isinstance(error, ssl.SSLError) or "[SSL" in text:
            return f"TLS: {text or type(error).__name__} (check the URL's scheme: rediss:// is TLS, redis:// is not)"
    return None


def speaks(url: str, tls: bool, timeout_s: float) -> bool:
    """True when ``url``'s server completes a TLS handshake (``tls``, unverified), or answers a plain ``PING``."""
    parts = urlsplit(url)
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((parts.hostname or "localhost", parts.port or 6379), timeout_s) as raw:
            if tls:
                context.wrap_socket(raw, server_hostname=parts.hostname).close()
                return True
            raw.settimeout(timeout_s)
            raw.sendall(b"*1\r\n$4\r\nPING\r\n")
            return raw.recv(64).startswith((b"+", b"-"))
    except (OSError, ValueError):
        return False


def broker_problem(url: str, exc: BaseException, timeout_s: float) -> str | None:
    """``config_problem(exc)``, or that the server speaks the other protocol than the URL's scheme (None: an outage).

    A TLS-only server reached with ``redis://`` only resets the connection, a plain one reached with ``rediss://``
    lets the handshake time out: a failure that is no refusal is tried once (``timeout_s``) in the other protocol.
    """
    problem = config_problem(exc)
    if problem is not None:
        return problem
    scheme, chain = urlsplit(url).scheme.lower(), _chain(exc)
    away = _AWAY_ERRORS + ((TimeoutError,) if scheme == "redis" else ())
    if scheme not in ("redis", "rediss") or any(isinstance(error, away) for error in chain):
        return None
    if not speaks(url, scheme == "redis", timeout_s):
        return None
    if scheme == "redis":
        return "TLS: the server speaks TLS only (use a rediss:// URL)"
    return "TLS: the server does not speak TLS (use a redis:// URL, or enable TLS on the server)"


def var_paths(settings: Settings) -> dict[str, Path]:
    """The local state under ``var_dir``: broker folders, results, outbox, coordination store, beat schedule."""
    var = settings.var_dir.resolve()
    return {
        "var": var,
        "broker_queue": var / "broker" / "queue",
        "broker_control": var / "broker" / "control",
        "broker_processed": var / "broker" / "processed",
        "results": var / "results",
        "outbox": var / "outbox.db",
        "coordination": var / "coordination.db",
        "beat_schedule": var / "celerybeat-schedule",
    }


def broker_url(settings: Settings) -> str:
    """The broker URL: the configured one, or ``filesystem://`` (server-less, under ``var_dir``)."""
    return settings.broker_url or "filesystem://"


ATOMIC_FILE_BACKEND = "workers.transport.AtomicFilesystemBackend"  # serves file:// results, each replaced whole


def celery_result_backend(settings: Settings) -> str:
    """``result_backend_url`` as Celery takes it: ``<class>+<url>`` (``by_url``) for a ``file://`` folder."""
    url = result_backend_url(settings)
    return f"{ATOMIC_FILE_BACKEND}+{url}" if url.startswith("file://") else url


def result_backend_url(settings: Settings) -> str:
    """The configured result backend, else the Redis broker's, else ``file://`` under ``var_dir``.

    A ``rediss://`` URL gets ``ssl_cert_reqs=required`` unless it says otherwise (Celery refuses it without).
    """
    if settings.result_backend:
        return settings.result_backend
    url = settings.broker_url
    if is_redis_url(url):
        parts = urlsplit(str(url))
        if parts.scheme.lower() == "rediss" and "ssl_cert_reqs" not in parts.query:
            query = "&".join(q for q in (parts.query, "ssl_cert_reqs=required") if q)
            return urlunsplit(parts._replace(query=query))
        return str(url)
    return f"file://{var_paths(settings)['results']}"


def redis_url_of(settings: Settings) -> str | None:
    """The Redis holding locks, pending marks and dead letters: the broker's, or None (SQLite under var_dir)."""
    return settings.broker_url if is_redis_url(settings.broker_url) else None


def queue_for(settings: Settings, task_name: str, kinds: JobKinds = JOB_KINDS) -> str:
    """The queue a task is routed to (its row of the table of job kinds).

    Raises:
        ConfigError: an unknown task name.
    """
    attr = kinds.queues().get(task_name)
    if attr is None:
        raise ConfigError(f"no queue for task {task_name!r}")
    return queue_name(settings, attr)


def known_queues(settings: Settings) -> dict[str, str]:
    """Logical queue name → its configured name, for every queue a task is routed to (``beliefs`` → ``beliefs``).

    The queues are the ``Settings`` fields ``JOB_KINDS.queues()`` names (the job kinds and the maintenance tasks),
    in table order; the logical name is the field's without ``queue_``, the configured one its value.
    """
    fields = dict.fromkeys(JOB_KINDS.queues().values())  # queue_beliefs, queue_ingest, queue_maintenance, …
    return {attr.removeprefix("queue_"): queue_name(settings, attr) for attr in fields}


def resolve_queues(settings: Settings, spec: str | None) -> tuple[list[str], list[str]]:
    """The queues a worker consumes for ``--queues spec`` (None or blank: all), and the unknown entries (kept too).

    ``memory-core worker`` refuses a spec with unknown entries (no job is routed there); ``known_queues`` lists
    what it takes.
    """
    configured = known_queues(settings)
    entries = [e.strip() for e in (spec or "").split(",") if e.strip()] or list(configured.values())
    known = set(configured.values())
    names = [configured.get(e, e) if e not in known else e for e in entries]
    return list(dict.fromkeys(names)), [e for e in entries if e not in known and e not in configured]


def max_countdown_s(settings: Settings) -> float:
    """The longest countdown the flow puts on a message, seconds (a retry's backoff, or a deferral: capped here)."""
    return max(settings.retry_backoff_max_s, settings.build_min_interval_s)


def check_timeouts(settings: Settings) -> None:
    """Refuse time settings that would run a job twice or never (docs/jobs.md, "Time settings are checked" [1.5-1.7]).

    Raises:
        ConfigError: naming the setting that breaks a rule.
    """
    soft, hard, vis = settings.task_soft_time_limit_s, settings.task_time_limit_s, settings.visibility_timeout_s
    if soft >= hard:
        raise ConfigError(f"task_soft_time_limit_s ({soft}) must be below task_time_limit_s ({hard})")
    if hard >= vis:
        raise ConfigError(f"task_time_limit_s ({hard}) must be below visibility_timeout_s ({vis})")
    if settings.lock_ttl_s > vis:
        raise ConfigError(f"lock_ttl_s ({settings.lock_ttl_s}) must not exceed visibility_timeout_s ({vis})")
    for name in ("retry_backoff_max_s", "build_min_interval_s"):
        countdown = float(getattr(settings, name))
        if countdown + hard >= vis:
            raise ConfigError(
                f"{name} ({countdown:g}) plus task_time_limit_s ({hard}) must stay below visibility_timeout_s "
                f"({vis}): a message waiting out that countdown and then running would be handed out again"
            )


def restore_sweep(period_s: int) -> tuple[int, int]:
    """Kombu's ``(unacked_restore_interval, unacked_restore_throttle)``: their product is the sweep's period.

    Kombu 5.7 ``transport/redis.py``; 100 s gives kombu's (10, 10).
    """
    interval = max(1, period_s // 10)
    return interval, max(1, round(period_s / interval))


def _broker_options(settings: Settings, url: str) -> tuple[str | None, dict[str, Any]]:
    """The transport class and its options for the broker URL."""
    if is_redis_url(url):
        interval, throttle = restore_sweep(settings.redelivery_sweep_s)
        return SAFE_REDIS_TRANSPORT, {
            "visibility_timeout": settings.visibility_timeout_s,
            "unacked_restore_interval": interval,
            "unacked_restore_throttle": throttle,
            **redis_options(settings.redis_socket_timeout_s, settings.redis_health_check_s),
        }
    if urlsplit(url).scheme.lower() == "filesystem":
        paths = var_paths(settings)
        return SAFE_FILESYSTEM_TRANSPORT, {
            "data_folder_in": str(paths["broker_queue"]),
            "data_folder_out": str(paths["broker_queue"]),
            "control_folder": str(paths["broker_control"]),
            "processed_folder": str(paths["broker_processed"]),
            "store_processed": False,
            "polling_interval": FILESYSTEM_POLL_S,
        }
    return None, {"visibility_timeout": settings.visibility_timeout_s}


def celery_config(settings: Settings, kinds: JobKinds = JOB_KINDS) -> dict[str, Any]:
    """The worker-side Celery configuration (docs/jobs.md says why each item is set); routes from ``kinds``.

    Raises:
        ConfigError: time settings that break ``check_timeouts``.
    """
    check_timeouts(settings)
    url = broker_url(settings)
    backend = celery_result_backend(settings)
    transport, transport_options = _broker_options(settings, url)
    vis = settings.visibility_timeout_s
    conf: dict[str, Any] = {
        "broker_url": url,
        "result_backend": backend,
        "broker_transport_options": transport_options,
        "result_backend_transport_options": {"visibility_timeout": vis},
        "visibility_timeout": vis,
        # JSON only, both ways [1.10]
        "task_serializer": "json",
        "result_serializer": "json",
        "event_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        # at-least-once delivery; the tasks are idempotent [1.1-1.3]
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_acks_on_failure_or_timeout": True,
        "worker_prefetch_multiplier": 1,
        "task_time_limit": settings.task_time_limit_s,
        "task_soft_time_limit": settings.task_soft_time_limit_s,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "worker_soft_shutdown_timeout": SOFT_SHUTDOWN_S,
        "worker_consumer": "workers.transport:Consumer",
        # connections [1.9, 1.18]
        "broker_connection_retry_on_startup": True,
        "broker_connection_retry": True,
        "broker_connection_max_retries": None,
        "redis_socket_timeout": settings.redis_socket_timeout_s,
        "redis_socket_connect_timeout": settings.redis_socket_timeout_s,
        "redis_socket_keepalive": True,
        "redis_retry_on_timeout": True,
        "redis_backend_health_check_interval": settings.redis_health_check_s,
        # monitoring [1.11, 1.12] and results [1.13]
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "task_track_started": True,
        "result_expires": settings.result_expires_s,
        "result_extended": True,
        # routing [1.14]
        "task_routes": {task: {"queue": queue_name(settings, attr)} for task, attr in kinds.queues().items()},
        "task_default_queue": queue_name(settings, MAINTENANCE_QUEUE),
        "timezone": "UTC",
        "enable_utc": True,
        "beat_schedule": beat_config(settings),
        "beat_schedule_filename": str(var_paths(settings)["beat_schedule"]),
    }
    if transport is not None:
        conf["broker_transport"] = transport
    if urlsplit(url).scheme.lower() == "rediss":
        # the guarded transport is named by class, so kombu's rediss:// default (TLS without certificate
        # checks, with a warning) does not apply: TLS is on here, and certificates are verified
        conf["broker_use_ssl"] = {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    return conf


def host_config(settings: Settings, kinds: JobKinds = JOB_KINDS) -> dict[str, Any]:
    """The producer-only configuration ``JobQueue`` publishes with.

    No result backend (celery#6963), no publish retries, ``publish_timeout_s`` sockets, no reconnect loop (celery#4556).
    """
    conf = celery_config(settings, kinds)
    conf["result_backend"] = None
    conf["task_publish_retry"] = False
    conf["task_send_sent_event"] = True
    options = dict(conf["broker_transport_options"])
    if is_redis_url(conf["broker_url"]):
        options.update(redis_options(settings.publish_timeout_s, settings.redis_health_check_s))
        options["max_retries"] = 0
    conf["broker_transport_options"] = options
    conf["broker_connection_timeout"] = settings.publish_timeout_s
    return conf


def beat_config(settings: Settings) -> dict[str, dict[str, Any]]:
    """``beat_schedule`` from ``beat_schedule.ENTRIES``; a tick expires after one period, so none pile up."""
    out: dict[str, dict[str, Any]] = {}
    for name, entry in ENTRIES.items():
        every = entry["every"]
        period = float(getattr(settings, every)) if isinstance(every, str) else float(every)
        task = str(entry["task"])
        out[name] = {
            "task": task,
            "schedule": period,
            "kwargs": dict(entry.get("kwargs", {})),
            "options": {"queue": queue_for(settings, task), "expires": period},
        }
    return out


def prepare(settings: Settings) -> None:
    """Create the local folders: ``var_dir`` always (outbox, beat schedule), the server-less ones without Redis.

    Raises:
        ConfigError: a folder cannot be created, naming ``MEMORY_CORE_VAR_DIR``.
    """
    paths = var_paths(settings)
    keys = ["var"]
    if broker_url(settings) == "filesystem://":
        keys += ["broker_queue", "broker_control", "broker_processed"]
        if result_backend_url(settings).startswith("file://"):
            keys.append("results")
    for key in keys:
        try:
            paths[key].mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"MEMORY_CORE_VAR_DIR: cannot create {paths[key]}: {exc.strerror or type(exc).__name__}"
            ) from None


DEFAULT_PASSWORD = "change-me"  # the settings' placeholder Flower password: ``memory-core flower`` warns


def flower_argv(settings: Settings, port: int | None = None, address: str = "127.0.0.1") -> list[str]:
    """``celery`` arguments that start Flower with basic auth on ``address:port`` (reference §6.2: always).

    Raises:
        ValueError: a blank user or password, or a ``:``/``,`` in the user (Flower splits on them).
    """
    user = settings.flower_user.strip()
    password = settings.flower_password.get_secret_value()
    if not user or not password:
        raise ValueError("flower needs MEMORY_CORE_FLOWER_USER and MEMORY_CORE_FLOWER_PASSWORD")
    if ":" in user or "," in user or "," in password:
        raise ValueError("flower user may not contain ':' or ',', nor the password ','")
    return [
        "flower",
        f"--port={port or settings.flower_port}",
        f"--address={address}",
        f"--basic-auth={user}:{password}",
        "--purge_offline_workers=60",
    ]

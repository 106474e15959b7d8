"""Open what the job flow keeps, from settings: coordination, dead letters, outbox, and the engine with plugins.

| broker | coordination and dead letters | outbox |
| --- | --- | --- |
| ``redis://`` / ``rediss://`` | that Redis, keys under ``Settings.redis_prefix`` | ``var_dir/outbox.db`` |
| none (server-less) | ``var_dir/coordination.db`` | ``var_dir/outbox.db`` |
"""

from __future__ import annotations

from memory_core.engine import MemoryEngine
from memory_core.engines import open_engine, register_engine
from memory_core.errors import ConfigError
from memory_core.settings import Settings
from workers.config import redis_url_of, var_paths
from workers.coordination import Coordination, SqliteCoordination
from workers.dead_letters import DeadLetterStore, RedisDeadLetters, SqliteDeadLetters
from workers.outbox import Outbox
from workers.redis_coordination import RedisCoordination, redis_client

__all__ = ["open_coordination", "open_dead_letters", "open_outbox", "open_worker_engine", "parse_plugins"]


def open_coordination(settings: Settings, timeout_s: float | None = None) -> Coordination:
    """The coordination store for these settings.

    Args:
        settings: The settings.
        timeout_s: Redis socket timeout, seconds (hosts pass ``publish_timeout_s``); default
            ``redis_socket_timeout_s``.
    """
    job_ttl_s = 2 * settings.visibility_timeout_s
    url = redis_url_of(settings)
    if url is None:
        return SqliteCoordination(var_paths(settings)["coordination"], settings.redis_prefix, job_ttl_s, job_ttl_s)
    client = redis_client(url, timeout_s or settings.redis_socket_timeout_s, settings.redis_health_check_s)
    return RedisCoordination(client, settings.redis_prefix, job_ttl_s, max(job_ttl_s, settings.result_expires_s))


def open_dead_letters(settings: Settings, timeout_s: float | None = None) -> DeadLetterStore:
    """The dead-letter store for these settings.

    Args:
        settings: The settings.
        timeout_s: Redis socket timeout, seconds (hosts pass ``publish_timeout_s``); default
            ``redis_socket_timeout_s``.
    """
    url = redis_url_of(settings)
    if url is None:
        return SqliteDeadLetters(var_paths(settings)["coordination"], settings.dead_letter_max)
    client = redis_client(url, timeout_s or settings.redis_socket_timeout_s, settings.redis_health_check_s)
    return RedisDeadLetters(client, settings.redis_prefix, settings.dead_letter_max)


def open_outbox(settings: Settings) -> Outbox:
    """The local outbox (``var_dir/outbox.db``)."""
    return Outbox(var_paths(settings)["outbox"])


def parse_plugins(spec: str) -> dict[str, str]:
    """``"probe=tests.probe:open_probe, x=pkg.mod:make"`` → ``{"probe": "tests.probe:open_probe", …}``.

    Raises:
        ConfigError: an entry without ``scheme=module:callable``.
    """
    out: dict[str, str] = {}
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            continue
        scheme, sep, target = entry.partition("=")
        if not sep or not scheme.strip() or ":" not in target:
            raise ConfigError(f"engine_plugins entry {entry!r} is not scheme=module:callable")
        out[scheme.strip().lower()] = target.strip()
    return out


def open_worker_engine(settings: Settings) -> MemoryEngine:
    """Register ``Settings.engine_plugins``, then open ``Settings.engine``.

    Raises:
        ConfigError: a malformed plugin entry, or an unknown engine scheme.
    """
    for scheme, target in parse_plugins(settings.engine_plugins).items():
        register_engine(scheme, target)
    return open_engine(settings.engine)

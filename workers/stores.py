"""Open what the job flow keeps, from settings: coordination, dead letters, outbox, and the engine with plugins.

| broker | coordination and dead letters | outbox |
| --- | --- | --- |
| ``redis://`` / ``rediss://`` | that Redis, keys under ``Settings.redis_prefix`` | ``var_dir/outbox.db`` |
| none (server-less) | ``var_dir/coordination.db`` | ``var_dir/outbox.db`` |
"""

from __future__ import annotations

from memory_core.engine import MemoryEngine
from memory_core.engines import open_host_engine
from memory_core.settings import Settings
from workers.config import redis_url_of, var_paths
from workers.coordination import Coordination, SqliteCoordination
from workers.dead_letters import DeadLetterStore, RedisDeadLetters, SqliteDeadLetters
from workers.outbox import Outbox
from workers.redis_coordination import RedisCoordination, redis_client

__all__ = ["open_coordination", "open_dead_letters", "open_outbox", "open_worker_engine"]


def open_coordination(settings: Settings, timeout_s: float | None = None) -> Coordination:
    """The coordination store for these settings.

    Args:
        settings: The settings.
        timeout_s: Redis socket timeout, seconds (hosts pass ``publish_timeout_s``); default
            ``redis_socket_timeout_s``.
    """
    job_ttl_s = 2 * settings.visibility_timeout_s
    keep_s = max(job_ttl_s, settings.result_expires_s)  # one rule for both stores (they used to differ)
    url = redis_url_of(settings)
    if url is None:
        return SqliteCoordination(var_paths(settings)["coordination"], settings.redis_prefix, job_ttl_s, keep_s)
    client = redis_client(url, timeout_s or settings.redis_socket_timeout_s, settings.redis_health_check_s)
    return RedisCoordination(client, settings.redis_prefix, job_ttl_s, keep_s)


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


def open_worker_engine(settings: Settings) -> MemoryEngine:
    """Open ``Settings.engine`` (plugins registered), its writes scrubbed unless ``Settings.scrub`` is off.

    ``memory_core.engines.open_host_engine`` with ``Settings.engine_plugins``.

    Raises:
        ConfigError: a malformed plugin entry, or an unknown engine scheme.
    """
    return open_host_engine(settings.engine, plugins=settings.engine_plugins, scrub=settings.scrub)

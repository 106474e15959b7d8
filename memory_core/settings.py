"""Settings: the one place that reads the environment (prefix ``MEMORY_CORE_``, or a ``.env`` file).

Defaults give the embedded setup: the SQLite engine under ``./var/`` and, with no broker URL, a server-less
kombu transport under ``./var/`` (see the README for what that transport cannot do).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings", "get_settings"]


class Settings(BaseSettings):
    """memory-core configuration; every field maps to ``MEMORY_CORE_<FIELD>``.

    Attributes:
        engine: Engine URL (``sqlite:///./var/memory.db``, ``reference://``).
        var_dir: Folder for local state (SQLite file, outbox, server-less broker).
        broker_url: Celery broker URL; None uses the server-less transport under ``var_dir``.
        result_backend: Celery result backend URL; None picks one to match the broker.
        queue_beliefs / queue_ingest / queue_maintenance: Celery queue names.
        task_time_limit_s / task_soft_time_limit_s: hard and soft task limits, seconds.
        visibility_timeout_s: Redis redelivery timeout, seconds; must exceed the hard limit.
        max_retries / retry_backoff_s / retry_backoff_max_s: retry policy for transient errors.
        build_beliefs_every: post_turn returns a BuildBeliefs job every N turns (0 = never).
        build_due_interval_s: how often beat enqueues builds for scopes written since their last build.
        budget_tokens: default pack budget, tokens of 4 characters.
        flower_user / flower_password / flower_port: Flower basic auth and port.
    """

    model_config = SettingsConfigDict(env_prefix="MEMORY_CORE_", env_file=".env", extra="ignore")

    engine: str = "sqlite:///./var/memory.db"
    var_dir: Path = Path("./var")
    broker_url: str | None = None
    result_backend: str | None = None

    queue_beliefs: str = "beliefs"
    queue_ingest: str = "ingest"
    queue_maintenance: str = "maintenance"

    task_time_limit_s: int = Field(default=600, gt=0)
    task_soft_time_limit_s: int = Field(default=540, gt=0)
    visibility_timeout_s: int = Field(default=3600, gt=0)
    max_retries: int = Field(default=5, ge=0)
    retry_backoff_s: float = Field(default=2.0, gt=0)
    retry_backoff_max_s: float = Field(default=300.0, gt=0)

    build_beliefs_every: int = Field(default=10, ge=0)
    build_due_interval_s: float = Field(default=300.0, gt=0)
    budget_tokens: int = Field(default=1200, gt=0)

    flower_user: str = "admin"
    flower_password: SecretStr = SecretStr("change-me")
    flower_port: int = Field(default=5555, gt=0, lt=65536)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once."""
    return Settings()

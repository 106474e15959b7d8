"""The benchmarks' baseline (issue 13): a Celery app configured as the job flow's, with one no-op task.

``celery -A workers.baseline worker`` runs it, so ``bench/workers_bench.py`` measures the flow's own cost beside it.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from memory_core.settings import Settings, get_settings
from workers.config import celery_config, host_config

__all__ = ["NOOP", "app", "create_baseline"]

NOOP = "baseline.noop"


def create_baseline(settings: Settings, *, producer: bool = False) -> Celery:
    """A Celery app configured as the flow's worker (or, ``producer``, as ``JobQueue``'s host) with ``baseline.noop``.

    Raises:
        ConfigError: time settings that break ``workers.config.check_timeouts``.
    """
    celery = Celery("baseline", set_as_current=False)
    celery.conf.update(host_config(settings) if producer else celery_config(settings))

    def noop(*args: Any, **kwargs: Any) -> None:
        """Do nothing (whatever the message carries: the bench sends the flow's own job JSON)."""

    registry: Any = celery  # Celery's task decorator is untyped
    registry.task(name=NOOP)(noop)
    return celery


app = create_baseline(get_settings())

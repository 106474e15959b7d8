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

    The task is registered on this app alone (``shared=False``, as ``workers.celery_app.create_app`` does): Celery's
    default shares a decorated task with every app finalized later in the process, so each call would add
    ``baseline.noop`` to the flow's own app and a second call would register the name twice
    (``DuplicateTaskNameWarning``). Source: Celery's ``Celery.task`` (its ``shared`` option, default ``True``).

    Raises:
        ConfigError: time settings that break ``workers.config.check_timeouts``.
    """
    celery = Celery("baseline", set_as_current=False)
    celery.conf.update(host_config(settings) if producer else celery_config(settings))

    def noop(*args: Any, **kwargs: Any) -> None:
        """Do nothing (whatever the message carries: the bench sends the flow's own job JSON)."""

    registry: Any = celery  # Celery's task decorator is untyped
    registry.task(name=NOOP, shared=False)(noop)
    return celery


app = create_baseline(get_settings())

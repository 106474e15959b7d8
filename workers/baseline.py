"""The benchmarks' baseline: a plain Celery app with one no-op task (``celery -A workers.baseline worker``).

Same broker as the job flow (``Settings.broker_url``), JSON only, a Redis result backend, and nothing else:
no late acks, no coordination, no engine. ``bench/workers_bench.py`` measures ``JobQueue.submit`` and job
throughput beside it in the same run, so the ratios show what the job flow adds over Celery itself.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from memory_core.settings import get_settings

__all__ = ["NOOP", "app", "create_baseline"]

NOOP = "baseline.noop"


def create_baseline(broker_url: str, backend: str | None = None) -> Celery:
    """A plain Celery app on ``broker_url`` with the ``baseline.noop`` task (results in ``backend``, if any)."""
    celery = Celery("baseline", broker=broker_url, backend=backend, set_as_current=False)
    celery.conf.update(task_serializer="json", accept_content=["json"], result_accept_content=["json"])

    def noop() -> None:
        """Do nothing."""

    registry: Any = celery  # Celery's task decorator is untyped
    registry.task(name=NOOP)(noop)
    return celery


_url = get_settings().broker_url or "redis://127.0.0.1:6379/0"
app = create_baseline(_url, backend=_url)

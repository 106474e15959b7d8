"""The Celery app, built from settings: ``celery -A workers.celery_app worker|beat|flower``.

``app`` is configured by ``workers.config.celery_config(get_settings())`` (JSON only, late acks with
requeue on a lost child, prefetch 1, one visibility timeout, time limits, events, result expiry: the table
in ``workers.config`` says why each is set), includes ``workers.tasks``, and connects ``workers.signals``
(outbox drain on worker start, dead letters for messages Celery rejects).
"""

from __future__ import annotations

from celery import Celery

from memory_core.settings import Settings, get_settings
from workers.config import celery_config

__all__ = ["app", "create_app"]


def create_app(settings: Settings) -> Celery:
    """A worker-side Celery app for ``settings`` (the server-less folders are made when a worker or beat starts).

    Raises:
        ConfigError: time settings that break ``workers.config.check_timeouts``.
    """
    celery = Celery("memory-core", include=["workers.tasks"])
    celery.conf.update(celery_config(settings))
    return celery


app = create_app(get_settings())

import workers.signals  # noqa: E402,F401  (connects the signal handlers once the app exists)

"""Shared by ``memory-core worker|beat|flower``: apply ``--engine``/``--broker`` and load the Celery app lazily.

The workers read their settings through ``get_settings()`` in every process (forked children included), so
the options are applied as ``MEMORY_CORE_`` variables of this process before ``workers.celery_app`` is
imported, and the settings cache is cleared. ``workers`` is imported only inside the commands.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from memory_core.settings import get_settings

__all__ = ["BrokerOption", "LoglevelOption", "celery_app", "use_options"]

BrokerOption = Annotated[
    str | None,
    typer.Option("--broker", "-b", help="Broker URL (redis://…); default: MEMORY_CORE_BROKER_URL, else server-less."),
]
LoglevelOption = Annotated[str, typer.Option("--loglevel", "-l", help="Log level: debug, info, warning, error.")]


def use_options(engine: str | None = None, broker: str | None = None) -> None:
    """Make ``engine``/``broker`` the settings of this process and its children (when given)."""
    for name, value in (("MEMORY_CORE_ENGINE", engine), ("MEMORY_CORE_BROKER_URL", broker)):
        if value:
            os.environ[name] = value
    get_settings.cache_clear()


def celery_app() -> Any:
    """The worker-side Celery app (``workers.celery_app.app``), imported on first use."""
    from workers.celery_app import app

    return app

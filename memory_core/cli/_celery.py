"""Shared by ``memory-core worker|beat|flower``: apply ``--engine``/``--broker``, run Celery, keep its exit status.

The workers read their settings through ``get_settings()`` in every process (forked children included), so
the options are applied as ``MEMORY_CORE_`` variables of this process before ``workers.celery_app`` is
imported, and the settings cache is cleared. ``workers`` is imported only inside the commands.

``run_celery`` runs Celery's own command line and returns its exit status: ``Celery.start()`` drops the status
click returns in non-standalone mode (celery 5.7 ``app/base.py``), so a worker stopped by an unrecoverable error
(``celery … worker`` exits 1) would exit 0 here.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

import click
import typer

from memory_core.cli._common import not_blank
from memory_core.settings import get_settings

__all__ = ["BrokerOption", "Loglevel", "LoglevelOption", "celery_app", "run_celery", "use_options"]

BrokerOption = Annotated[
    str | None,
    typer.Option(
        "--broker",
        "-b",
        metavar="URL",
        help="Broker URL (redis://…); default: MEMORY_CORE_BROKER_URL, else server-less.",
        callback=not_blank("--broker"),
    ),
]
Loglevel = Literal["debug", "info", "warning", "error", "critical"]
"""The log levels ``--loglevel`` takes (any case): Celery's, checked before Celery starts (exit 2, not a traceback)."""
LoglevelOption = Annotated[
    Loglevel,
    typer.Option(
        "--loglevel",
        "-l",
        metavar="LEVEL",
        case_sensitive=False,
        help="Log level: debug, info, warning, error or critical.",
    ),
]


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


def run_celery(argv: list[str]) -> int:
    """Run ``celery <argv>`` on the worker-side app in this process and return its exit status.

    The same as ``Celery.start(argv)`` (the app as the ``--app`` default of Celery's click group), except that
    the status is kept: ``ctx.exit(n)`` inside a command (the worker's ``ctx.exit(worker.exitcode)``) comes back
    from click's non-standalone ``main`` as ``n``.

    Returns:
        0 on a clean stop, else the command's status (1 after "Unrecoverable error").
    """
    from celery.bin.celery import celery as command

    command.params[0].default = celery_app()
    try:
        rv = command.main(args=argv, standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    finally:
        command.params[0].default = None
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0

"""``memory-core flower``: Flower with basic auth from the settings (``MEMORY_CORE_FLOWER_USER``/``_PASSWORD``).

The credentials go to Flower in-process, never on a command line. ``/metrics`` and ``/healthcheck`` stay
open by Flower's design; everything else answers 401 without the credentials.
"""

from __future__ import annotations

from typing import Annotated

import typer

from memory_core.cli import app
from memory_core.cli._celery import BrokerOption, run_celery, use_options
from memory_core.cli._common import EngineOption, err_console, fail
from memory_core.settings import get_settings

__all__ = ["flower"]


@app.command()
def flower(
    port: Annotated[
        int | None, typer.Option("--port", metavar="PORT", help="Port; default: MEMORY_CORE_FLOWER_PORT.")
    ] = None,
    address: Annotated[
        str, typer.Option("--address", metavar="HOST", help="Bind address (0.0.0.0 inside a container).")
    ] = "127.0.0.1",
    engine: EngineOption = None,
    broker: BrokerOption = None,
) -> None:
    """Run Flower (task monitor) behind basic auth."""
    use_options(engine, broker)
    from workers.flower import DEFAULT_PASSWORD, flower_argv
    from workers.transport import prepare

    settings = get_settings()
    try:
        argv = flower_argv(settings, port=port, address=address)
    except ValueError as exc:
        raise fail(str(exc)) from None
    prepare(settings)
    if settings.flower_password.get_secret_value() == DEFAULT_PASSWORD:
        err_console.print("[yellow]warning: MEMORY_CORE_FLOWER_PASSWORD is the default; set your own[/]")
    raise typer.Exit(code=run_celery(argv))

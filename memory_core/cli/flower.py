"""``memory-core flower``: Flower with basic auth from the settings (``MEMORY_CORE_FLOWER_USER``/``_PASSWORD``).

The credentials go to Flower in-process, never on a command line. ``/metrics`` and ``/healthcheck`` stay
open by Flower's design; everything else answers 401 without the credentials. A port already in use exits 2
naming it and where it came from (``--port`` or ``MEMORY_CORE_FLOWER_PORT``) before Flower starts.
"""

from __future__ import annotations

import socket
from typing import Annotated

import typer

from memory_core.cli import app
from memory_core.cli._celery import BrokerOption, run_celery, use_options
from memory_core.cli._common import EngineOption, err_console, fail
from memory_core.settings import get_settings

__all__ = ["flower", "port_problem"]


def port_problem(address: str, port: int) -> str | None:
    """Why Flower could not listen on ``address:port`` (``"Address already in use"``), or None when it can.

    Binds a socket there the way Tornado's ``bind_sockets`` does (``SO_REUSEADDR``, so a port left in
    ``TIME_WAIT`` is free) and closes it at once: Flower started on a taken port fails deep inside Tornado with
    a long traceback. Another process may still take the port in between; that is Tornado's error again.
    """
    try:
        infos = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:  # socket.gaierror: a host name that does not resolve
        return f"the address does not resolve ({exc.strerror or exc})"
    family, kind, proto, _, where = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(where)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


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
    chosen = port or settings.flower_port
    busy = port_problem(address, chosen)
    if busy is not None:
        source = "--port" if port else "MEMORY_CORE_FLOWER_PORT"
        raise fail(
            f"flower cannot listen on {address}:{chosen} ({source}): {busy}; stop what listens there or choose "
            "another port with --port or MEMORY_CORE_FLOWER_PORT"
        )
    prepare(settings)
    if settings.flower_password.get_secret_value() == DEFAULT_PASSWORD:
        err_console.print("[yellow]warning: MEMORY_CORE_FLOWER_PASSWORD is the default; set your own[/]")
    raise typer.Exit(code=run_celery(argv))

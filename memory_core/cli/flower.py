"""``memory-core flower``: Flower with basic auth from the settings (``MEMORY_CORE_FLOWER_USER``/``_PASSWORD``).

The credentials go to Flower in-process, never on a command line. ``/metrics`` and ``/healthcheck`` stay
open by Flower's design; everything else answers 401 without the credentials. A port already in use exits 2
naming it and where it came from (``--port`` or ``MEMORY_CORE_FLOWER_PORT``) before Flower starts, and an
``--address`` that does not resolve or is no address of this machine exits 2 naming ``--address``; ``--port``
follows the rule of ``MEMORY_CORE_FLOWER_PORT`` (1-65535, ``Settings.flower_port``), else exit 2 naming it.

SIGTERM (``docker stop``, systemd) stops Flower quietly with status 0, Flower's own: the first one stops it,
any further one while it shuts down is ignored (``stop_on_sigterm``; Flower's handler raised ``SystemExit``
again inside the interpreter's thread shutdown, printing a ``SystemExit: 0`` traceback).
"""

from __future__ import annotations

import errno
import logging
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Annotated, Literal

import typer
from pydantic import TypeAdapter, ValidationError

from memory_core.cli import app
from memory_core.cli._celery import BrokerOption, run_celery, use_options
from memory_core.cli._common import EngineOption, err_console, fail, not_blank
from memory_core.settings import Settings, get_settings

__all__ = [
    "ListenProblem",
    "check_port",
    "flower",
    "listen_refusal",
    "port_problem",
    "quiet_sigterm",
    "stop_on_sigterm",
]

log = logging.getLogger("flower.command")

_PORT: TypeAdapter[int] = TypeAdapter(Annotated[(int, *Settings.model_fields["flower_port"].metadata)])
"""``MEMORY_CORE_FLOWER_PORT``'s rule (1-65535), so ``--port`` is checked as the setting is."""


def check_port(port: int | None) -> int | None:
    """``--port`` when it is a port ``MEMORY_CORE_FLOWER_PORT`` would accept, None when not given.

    Raises:
        typer.BadParameter: outside 1-65535 (a socket would wrap 70000 to 4464, and 0 means "any port").
    """
    if port is None:
        return None
    try:
        return _PORT.validate_python(port)
    except ValidationError as exc:
        raise typer.BadParameter(f"{exc.errors()[0]['msg']} (a port is 1-65535)") from None


@dataclass(frozen=True)
class ListenProblem:
    """Why Flower could not listen on ``address:port``: the reason and whose fault it is.

    Attributes:
        reason: The system's words (``"Address already in use"``, ``"Name or service not known"``).
        culprit: ``"address"`` (it does not resolve, or is no address of this machine) or ``"port"`` (in use,
            or not allowed to this user).
    """

    reason: str
    culprit: Literal["address", "port"]


_ADDRESS_ERRNOS = frozenset({errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT})
"""Bind errors that are the address's fault (not an address of this machine); the rest are the port's."""


def port_problem(address: str, port: int) -> ListenProblem | None:
    """Why Flower could not listen on ``address:port``, or None when it can.

    Binds a socket there the way Tornado's ``bind_sockets`` does (``SO_REUSEADDR``, so a port left in
    ``TIME_WAIT`` is free) and closes it at once: Flower started on a taken port fails deep inside Tornado with
    a long traceback. Another process may still take the port in between; that is Tornado's error again.
    """
    try:
        infos = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:  # socket.gaierror: a host name that does not resolve
        return ListenProblem(f"the address does not resolve ({exc.strerror or exc})", "address")
    family, kind, proto, _, where = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(where)
        except OSError as exc:
            culprit: Literal["address", "port"] = "address" if exc.errno in _ADDRESS_ERRNOS else "port"
            return ListenProblem(exc.strerror or str(exc), culprit)
    return None


def listen_refusal(address: str, port: int, port_source: str, problem: ListenProblem) -> str:
    """The one-line refusal for ``problem``, its hint naming what to change: ``--address`` or the port."""
    where = f"flower cannot listen on {address}:{port}"
    if problem.culprit == "address":
        return (
            f"{where} (--address): {problem.reason}; give --address an IP address or host name of this machine "
            "(127.0.0.1, 0.0.0.0 inside a container)"
        )
    return (
        f"{where} ({port_source}): {problem.reason}; stop what listens there or choose another port with --port "
        "or MEMORY_CORE_FLOWER_PORT"
    )


def stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM handler: stop with status 0 (``SystemExit(0)``, as Flower's own), once; later SIGTERMs are ignored.

    Flower catches the ``SystemExit`` around its event loop and returns; the interpreter then joins Flower's
    executor threads, and a second SIGTERM raised there (Flower's handler) printed "Exception ignored in
    <module 'threading'>" with a ``SystemExit: 0`` traceback. ``SIG_IGN`` also outlives the interpreter's
    finalization (a Python handler is reset to the default there, which would end the process with 143).
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    log.info("SIGTERM received: shutting down")
    raise SystemExit(0)


@contextmanager
def quiet_sigterm() -> Iterator[None]:
    """Within the block SIGTERM is ``stop_on_sigterm``, also once Flower installs its handler (it is replaced)."""
    from flower import command as flower_command

    own = flower_command.sigterm_handler
    flower_command.sigterm_handler = stop_on_sigterm  # Flower installs the module's ``sigterm_handler``
    try:
        yield
    finally:
        flower_command.sigterm_handler = own


@app.command()
def flower(
    port: Annotated[
        int | None,
        typer.Option(
            "--port", metavar="PORT", callback=check_port, help="Port (1-65535); default: MEMORY_CORE_FLOWER_PORT."
        ),
    ] = None,
    address: Annotated[
        str,
        typer.Option(
            "--address",
            metavar="HOST",
            help="Bind address (0.0.0.0 inside a container).",
            callback=not_blank("--address"),
        ),
    ] = "127.0.0.1",
    engine: EngineOption = None,
    broker: BrokerOption = None,
) -> None:
    """Run Flower (task monitor) behind basic auth (SIGTERM: a quiet stop, status 0)."""
    previous = signal.signal(signal.SIGTERM, stop_on_sigterm)  # a SIGTERM while starting stops quietly too
    try:
        argv = _flower_argv(port, address, engine, broker)
    except BaseException:  # refused before Flower starts (exit 2): the process's handler comes back
        signal.signal(signal.SIGTERM, previous)
        raise
    with quiet_sigterm():
        code = run_celery(argv)
    raise typer.Exit(code=code)


def _flower_argv(port: int | None, address: str, engine: str | None, broker: str | None) -> list[str]:
    """Flower's Celery argv once the settings, the credentials and the port are checked; the folders prepared.

    Raises:
        typer.Exit: code 2, after printing why (bad credentials, a port Flower could not listen on).
    """
    use_options(engine, broker)
    from workers.config import DEFAULT_PASSWORD, flower_argv, prepare

    settings = get_settings()
    try:
        argv = flower_argv(settings, port=port, address=address)
    except ValueError as exc:
        raise fail(str(exc)) from None
    chosen = settings.flower_port if port is None else port
    problem = port_problem(address, chosen)
    if problem is not None:
        raise fail(listen_refusal(address, chosen, "MEMORY_CORE_FLOWER_PORT" if port is None else "--port", problem))
    prepare(settings)
    if settings.flower_password.get_secret_value() == DEFAULT_PASSWORD:
        err_console.print("[yellow]warning: MEMORY_CORE_FLOWER_PASSWORD is the default; set your own[/]")
    return argv

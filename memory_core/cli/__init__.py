"""The ``memory-core`` command line (Typer + Rich).

Each command lives in its own module under ``memory_core.cli`` and registers itself on ``app`` when imported;
``COMMAND_MODULES`` lists them, so ``main`` imports only what it needs to build the command table.
"""

from __future__ import annotations

import importlib

import typer
from rich.console import Console
from rich.markup import escape

from memory_core.errors import MemoryCoreError

__all__ = ["COMMAND_MODULES", "app", "main"]

app = typer.Typer(
    name="memory-core",
    help="Long-term memory for AI agents: engines, lifecycle, Celery workers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,  # plain help: Typer's Rich panels print "--help <bool>" and a type beside every flag
)


@app.callback()
def _root() -> None:
    """Long-term memory for AI agents: engines, lifecycle, Celery workers."""


COMMAND_MODULES: tuple[str, ...] = (
    "demo",
    "ingest",
    "replay",
    "status",
    "version",
    "conformance",
    "eval",
    "recall",
    "worker",
    "beat",
    "flower",
    "dead_letters",
    "serve",
    "mcp",
    "cortex_double",
    "migrate",
    "facts",
    "retention",
    "log",
)
"""Modules under ``memory_core.cli`` whose import registers commands on ``app``."""


def load_commands() -> typer.Typer:
    """Import every command module so its commands are registered, and return the app."""
    for name in COMMAND_MODULES:
        importlib.import_module(f"memory_core.cli.{name}")
    return app


def main() -> None:
    """Entry point of the ``memory-core`` script: a ``MemoryCoreError`` no command handled exits 2 with its message."""
    command = load_commands()
    try:
        command()
    except MemoryCoreError as exc:
        Console(stderr=True, highlight=False).print(f"[bold red]{escape(str(exc))}[/]")
        raise SystemExit(2) from None

"""``memory-core version``: print the installed version."""

from __future__ import annotations

import typer

import memory_core
from memory_core.cli import app


@app.command()
def version() -> None:
    """Print the memory-core version."""
    typer.echo(memory_core.__version__)

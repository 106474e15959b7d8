"""Options and helpers every ``memory-core`` command shares: the engine and layout options, and consoles."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from memory_core.engine import MemoryEngine
from memory_core.engines import open_engine
from memory_core.errors import MemoryCoreError
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.settings import get_settings

__all__ = ["EngineOption", "RootOption", "console", "err_console", "fail", "layout_for", "open_engine_or_exit"]

console = Console(highlight=False)
"""Standard output."""
err_console = Console(stderr=True, highlight=False)
"""Standard error."""

EngineOption = Annotated[
    str | None, typer.Option("--engine", "-e", help="Engine URL; default: the MEMORY_CORE_ENGINE setting.")
]
RootOption = Annotated[
    str | None,
    typer.Option("--root", help="Layout root namespace (root, team:acme); default: MEMORY_CORE_LAYOUT_ROOT."),
]


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` in red on standard error and return the ``typer.Exit`` to raise."""
    err_console.print(f"[bold red]{escape(message)}[/]")
    return typer.Exit(code=code)


def open_engine_or_exit(url: str | None) -> MemoryEngine:
    """Open ``url`` (default: the configured engine); exit 2 with the error on a bad URL or unusable engine."""
    target = url or get_settings().engine
    try:
        return open_engine(target)
    except MemoryCoreError as exc:
        raise fail(str(exc)) from None


def layout_for(root: str | None) -> MemoryLayout:
    """The layout for ``root`` (default: the configured layout root); exit 2 on a bad namespace."""
    try:
        return MemoryLayout(root or get_settings().layout_root)
    except MemoryCoreError as exc:
        raise fail(str(exc)) from None

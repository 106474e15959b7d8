"""``memory-core migrate``: copy a SQLite store into PostgreSQL (items, beliefs, build state), with progress.

```
memory-core migrate --from sqlite:///./var/memory.db --to postgresql://memory:pw@db:5432/memory
```

Resumable (an interrupted run continues after its last committed batch) and idempotent (a second run copies
nothing). Exit codes: 0 done; 2 a bad URL, a missing source file, a target holding other items, or a store that
cannot be opened (the message names it, passwords masked).
"""

from __future__ import annotations

from typing import Annotated

import typer

from memory_core.cli import app
from memory_core.cli._common import fail, missing_database, no_database
from memory_core.engines import mask_url
from memory_core.errors import MemoryCoreError

__all__ = ["migrate"]


@app.command()
def migrate(
    source: Annotated[str, typer.Option("--from", help="The SQLite store: sqlite:///path/to/memory.db")],
    target: Annotated[str, typer.Option("--to", help="The PostgreSQL database: postgresql://user:pw@host/db")],
) -> None:
    """Copy a SQLite store (items, beliefs, build state) into PostgreSQL; resumable and idempotent."""
    from urllib.parse import urlsplit

    if urlsplit(source.strip()).scheme.lower() != "sqlite":
        raise fail(f"--from: expected sqlite:///path/to/memory.db, got {mask_url(source)!r}")
    if urlsplit(target.strip()).scheme.lower() not in {"postgresql", "postgres"}:
        raise fail(f"--to: expected postgresql://user:password@host:port/database, got {mask_url(target)!r}")
    missing = missing_database(source)
    if missing is not None:
        raise fail(f"--from: {no_database(missing)}")
    try:
        from memory_core.engines.postgres import PostgresEngine
        from memory_core.engines.postgres.migrate import copy_sqlite
        from memory_core.engines.sqlite.connection import parse_url
    except ImportError as exc:
        raise fail(
            f"--to: the PostgreSQL engine is not installed ({exc}); pip install 'memory-core[postgres]'"
        ) from None

    def progress(stage: str, done: int, total: int) -> None:
        typer.echo(f"{stage:<8} {done}/{total}")

    try:
        path = parse_url(source.strip()).path
        with PostgresEngine(target.strip()) as engine:
            report = copy_sqlite(path, engine, progress)
    except MemoryCoreError as exc:
        raise fail(str(exc)) from None
    resumed = f", resumed after seq {report.resumed_after}" if report.resumed_after else ""
    typer.echo(
        f"migrated {path} → {engine.options.masked}: {report.copied} of {report.items} items copied "
        f"({report.items - report.copied} already there{resumed}), {report.beliefs} beliefs, {report.scopes} scopes"
    )

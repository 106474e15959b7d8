"""``memory-core retention [--dry-run]``: prune the logged turns below the layout root now (seed 004 "Retention").

The same rules as the daily ``memory.retention`` job (``lifecycle.retention``): turns older than
``MEMORY_CORE_RETENTION_MAX_AGE_DAYS`` (90) or beyond the ``MEMORY_CORE_RETENTION_MAX_TURNS`` (5,000) newest go by
the forget rules; facts and beliefs are never pruned. ``--dry-run`` only says what would go.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.markup import escape

from memory_core.cli import app
from memory_core.cli._common import EngineOption, RootOption, console, echo_json, engine_session, layout_for
from memory_core.lifecycle import retention as rules

__all__ = ["retention"]


@app.command()
def retention(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would go; change nothing.")] = False,
    engine: EngineOption = None,
    root: RootOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan (counts) as JSON.")] = False,
) -> None:
    """Forget (or archive) turns past the retention limits under the layout root; --dry-run only reports."""
    layout = layout_for(root)
    with engine_session(engine, read_only=dry_run) as memory_engine:
        planned = rules.plan(memory_engine, layout.root, datetime.now(UTC).replace(microsecond=0))
        result = planned if dry_run else rules.apply(memory_engine, planned)
    if as_json:
        echo_json(json.dumps({**result.to_dict(), "dry_run": dry_run}))
        return
    for line in result.describe(dry_run):
        console.print(escape(line), soft_wrap=True)

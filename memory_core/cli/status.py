"""``memory-core status``: the engine, items by kind and scope, queues, running and dead jobs, last builds.

Everything is read-only. A part that cannot be read (no worker answering, the broker down) is shown as such
rather than failing the command; only an unusable engine URL exits non-zero (2).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from memory_core.cli import app
from memory_core.cli._celery import BrokerOption, use_options
from memory_core.cli._common import EngineOption, RootOption, console, layout_for, open_engine_or_exit
from memory_core.cli._jobs import open_monitor
from memory_core.consolidation import BuildScope, ConsolidateRequest
from memory_core.explore import ExploreRequest, Facet
from memory_core.limits import MAX_SCAN_LIMIT
from memory_core.settings import get_settings

__all__ = ["status"]


def _ago(at: datetime | None, now: datetime) -> str:
    if at is None:
        return "never"
    seconds = max(0.0, (now - at).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def _scopes_table(scopes: list[BuildScope], limit: int) -> Table:
    now = datetime.now(UTC)
    table = Table(title=f"scopes ({len(scopes)}; showing up to {limit}, most recently written first)")
    for column in ("scope", "kinds", "items", "last write", "last build", "due"):
        table.add_column(column)
    ordered = sorted(scopes, key=lambda s: s.last_write or datetime.min.replace(tzinfo=UTC), reverse=True)
    for scope in ordered[:limit]:
        table.add_row(
            escape(str(scope.namespace)),
            ", ".join(k.value for k in scope.kinds),
            "—" if scope.items is None else str(scope.items),
            _ago(scope.last_write, now),
            _ago(scope.last_build, now),
            "[yellow]yes[/]" if scope.due else "no",
        )
    return table


def _jobs_view(monitor: Any, dead: Any) -> dict[str, Any]:
    depths = monitor.queue_depths()
    active = monitor.active(timeout_s=1.0)
    running = None if active is None else sum(len(v) for v in active.values())
    try:
        dead_count: int | None = int(dead.count())
    except Exception:  # the store may be unreachable: shown as unknown
        dead_count = None
    return {
        "queues": depths,
        "workers": None if active is None else sorted(active),
        "running": running,
        "dead_letters": dead_count,
    }


@app.command()
def status(
    engine: EngineOption = None,
    broker: BrokerOption = None,
    root: RootOption = None,
    scopes: Annotated[int, typer.Option("--scopes", min=0, help="Scopes to list.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print everything as JSON.")] = False,
) -> None:
    """Show the engine, items by kind and scope, queue depths, running and dead jobs, and the last build per scope."""
    use_options(engine, broker)
    memory_engine = open_engine_or_exit(None)
    layout = layout_for(root)
    try:
        descriptor = memory_engine.descriptor()
        health = memory_engine.health()
        reach = layout.holistic_filter()
        kinds = memory_engine.explore(ExploreRequest(facet=Facet.KIND, filter=reach, scan_limit=MAX_SCAN_LIMIT))
        listed = memory_engine.scopes(ConsolidateRequest(reach=reach.effective_reach()))
        stats: dict[str, Any] = getattr(memory_engine, "stats", dict)()
    finally:
        memory_engine.close()
    from workers.stores import open_dead_letters

    monitor = open_monitor()
    try:
        jobs = _jobs_view(monitor, open_dead_letters(get_settings()))
    finally:
        monitor.close()
    if as_json:
        out = {
            "engine": descriptor.to_dict(),
            "health": health.to_dict(),
            "items": {b.value: b.count for b in kinds.buckets},
            "engine_stats": stats,
            "scopes": [s.to_dict() for s in listed],
            "jobs": jobs,
        }
        typer.echo(json.dumps(out, indent=2, default=str))
        return
    console.print(
        f"engine  {escape(get_settings().engine)} ({descriptor.id}, consolidation {descriptor.consolidation.value}, "
        f"{health.state.value}{': ' + escape(health.reason) if health.reason else ''})"
    )
    items = ", ".join(f"{b.value} {b.count}" for b in kinds.buckets) or "none"
    extra = (
        f"; beliefs {stats['beliefs']} active, {stats.get('superseded', 0)} superseded" if "beliefs" in stats else ""
    )
    console.print(f"items   {kinds.total} ({items}){' (lower bound)' if kinds.truncated else ''}{extra}")
    queues = ", ".join(f"{k} {'?' if v < 0 else v}" for k, v in jobs["queues"].items())
    workers = "no worker answered" if jobs["workers"] is None else f"{len(jobs['workers'])} worker(s)"
    running = "?" if jobs["running"] is None else jobs["running"]
    dead = "?" if jobs["dead_letters"] is None else jobs["dead_letters"]
    console.print(f"jobs    queued: {queues}; running {running} ({workers}); dead letters {dead}")
    if scopes:
        console.print(_scopes_table(listed, scopes))

"""``memory-core status``: the engine, items by kind and scope, queues, running and dead jobs, last builds.

Everything is read-only: status creates no file or folder (no database, outbox, coordination store, ``var_dir``
or server-less transport folder: ``workers.monitor.JobMonitor(read_only=True)``). A part that cannot be read (no
worker answering, the broker down) is shown as ``?`` with the reason, rather than failing the command; an
unusable engine URL, one naming no database, or a broker that refuses this configuration (a wrong password, a
TLS-only Redis reached with ``redis://``: shown, then exit 2, since waiting cannot fix it) exits 2, and an engine
failing while it is read exits 1 (the errors every command maps the same way: ``cli._common.engine_session``).

Time is bounded: a Redis broker is probed first (one PING, ``PROBE_TIMEOUT_S`` to connect and to answer); when
it does not answer, nothing else is asked of it (queue depths, running jobs and dead letters all live there)
and status says why, and how many jobs wait in the local outbox to be published once it answers.

A ``sqlite://`` engine URL naming no file is not opened (that would create an empty database, and a typo
would look healthy): status shows the jobs, then exits 2 saying no database is there.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.markup import escape
from rich.table import Table

from memory_core.cli import app
from memory_core.cli._celery import BrokerOption, use_options
from memory_core.cli._common import (
    EngineOption,
    RootOption,
    console,
    echo_json,
    engine_session,
    fail,
    layout_for,
    missing_database,
    no_database,
)
from memory_core.consolidation import BuildScope, ConsolidateRequest
from memory_core.engines import mask_url
from memory_core.explore import ExploreRequest, Facet
from memory_core.limits import MAX_SCAN_LIMIT
from memory_core.settings import get_settings

__all__ = ["PROBE_TIMEOUT_S", "status"]

PROBE_TIMEOUT_S = 1.0
"""Seconds the broker probe waits to connect, and then for the PING's answer."""
ACTIVE_TIMEOUT_S = 1.0
"""Seconds the workers get to answer "what are you running" (Celery remote control)."""


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


def _jobs_view(settings: Any) -> dict[str, Any]:
    """Queues, workers, running and dead jobs, the outbox, and a reason for every part that is unknown."""
    from workers.config import redis_url_of, var_paths
    from workers.monitor import JobMonitor
    from workers.queue import open_dead_letters

    unknown: dict[str, str] = {}
    names = (settings.queue_beliefs, settings.queue_ingest, settings.queue_maintenance)
    monitor = JobMonitor(settings, read_only=True)  # no var_dir, no server-less folders created
    try:
        outbox = monitor.outbox_waiting()  # read-only: no outbox.db is created when there is none
        if outbox is None:  # a locked or damaged outbox file must not fail status
            unknown["outbox"] = f"the outbox {var_paths(settings)['outbox']} could not be read"
        probe = monitor.probe(PROBE_TIMEOUT_S)  # one bounded PING; the URL comes back without its password
        reason = probe.reason
        view: dict[str, Any] = {
            "broker": {
                "url": probe.url if settings.broker_url else "server-less",
                "answering": probe.reachable,
                "reason": reason,
                "config_error": probe.config_error,
            },
            "outbox": outbox,
            "queues": dict.fromkeys(names, -1),
            "workers": None,
            "running": None,
            "dead_letters": None,
            "unknown": unknown,
        }
        if not probe.reachable:
            for part in ("queues", "running", "dead_letters"):
                unknown[part] = f"the broker is not answering ({reason})"
            return view
        view["queues"] = monitor.queue_depths()
        if any(v < 0 for v in view["queues"].values()):
            unknown["queues"] = "the broker answered the probe but not the queue-length reads"
        active = monitor.active(timeout_s=ACTIVE_TIMEOUT_S)
    finally:
        monitor.close()
    if active is None:
        unknown["running"] = f"no worker answered within {ACTIVE_TIMEOUT_S:g} s"
    else:
        view["workers"] = sorted(active)
        view["running"] = sum(len(v) for v in active.values())
    if redis_url_of(settings) is None and not var_paths(settings)["coordination"].exists():
        view["dead_letters"] = 0  # server-less and no store yet: opening it would create coordination.db
        return view
    try:
        letters = open_dead_letters(settings, PROBE_TIMEOUT_S)
        try:
            view["dead_letters"] = int(letters.count())
        finally:
            letters.close()
    except Exception as exc:  # the dead-letter store may be unreachable: shown as unknown, with why
        unknown["dead_letters"] = f"{type(exc).__name__}: {exc}"
    return view


def _jobs_line(jobs: dict[str, Any]) -> str:
    """The ``jobs`` lines of the text output; every ``?`` is followed by its reason."""
    unknown: dict[str, str] = jobs["unknown"]
    broker = jobs["broker"]
    lines = []
    if broker.get("config_error"):
        lines.append(f"broker  {broker['url']} refuses this configuration: {broker['config_error']}")
    elif not broker["answering"]:
        lines.append(f"broker  {broker['url']} is not answering: {broker['reason']}")
    queues = ", ".join(f"{k} {'?' if v < 0 else v}" for k, v in jobs["queues"].items())
    if "queues" in unknown:
        queues += f" (? = {unknown['queues']})" if broker["answering"] else " (?: broker not answering)"
    running = "?" if jobs["running"] is None else str(jobs["running"])
    if jobs["running"] is None:
        running += f" ({unknown['running'] if broker['answering'] else 'broker not answering'})"
    else:
        running += f" ({len(jobs['workers'])} worker{'' if len(jobs['workers']) == 1 else 's'})"
    dead = "?" if jobs["dead_letters"] is None else str(jobs["dead_letters"])
    if jobs["dead_letters"] is None:
        dead += f" ({unknown['dead_letters'] if broker['answering'] else 'broker not answering'})"
    lines.append(f"jobs    queued: {queues}; running {running}; dead letters {dead}")
    if jobs["outbox"] is None:
        lines.append(f"outbox  ? ({unknown['outbox']})")
    elif jobs["outbox"] or not broker["answering"]:
        lines.append(
            f"outbox  {jobs['outbox']} job{'' if jobs['outbox'] == 1 else 's'} waiting to be published (sent by a "
            "submit once the broker answers, by a worker when it starts, or by beat)"
        )
    return "\n".join(lines)


def _exit_on_config_error(jobs: dict[str, Any]) -> None:
    """Exit 2 when the broker refuses this configuration (a wrong password, TLS on one side): not an outage."""
    broker = jobs["broker"]
    if broker.get("config_error"):
        raise fail(f"ConfigError: broker {broker['url']}: {broker['config_error']}")


def _no_database(path: Path, as_json: bool) -> NoReturn:
    """Show the jobs, then exit 2 saying no database is at ``path`` (``_common.no_database``)."""
    jobs = _jobs_view(get_settings())
    if as_json:
        echo_json(json.dumps({"engine": None, "error": no_database(path), "jobs": jobs}, indent=2, default=str))
    else:
        console.print(escape(_jobs_line(jobs)), soft_wrap=True)
    raise fail(no_database(path))


def _scrub_line(on: bool) -> str:
    if on:
        return "scrub   on (credentials and personal identifiers are redacted on every write)"
    return "[bold red]scrub   OFF (MEMORY_CORE_SCRUB=off): secrets written now are stored verbatim[/]"


@app.command()
def status(
    engine: EngineOption = None,
    broker: BrokerOption = None,
    root: RootOption = None,
    scopes: Annotated[int, typer.Option("--scopes", metavar="N", min=0, help="Scopes to list.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print everything as JSON.")] = False,
) -> None:
    """Show the engine, items by kind and scope, queue depths, running and dead jobs, and the last build per scope."""
    use_options(engine, broker)
    layout = layout_for(root)
    missing = missing_database(get_settings().engine)
    if missing is not None:  # read-only: never create the file; the jobs are still worth showing
        _no_database(missing, as_json)
    with engine_session(None) as memory_engine:
        descriptor = memory_engine.descriptor()
        health = memory_engine.health()
        reach = layout.holistic_filter()
        kinds = memory_engine.explore(ExploreRequest(facet=Facet.KIND, filter=reach, scan_limit=MAX_SCAN_LIMIT))
        listed = memory_engine.scopes(ConsolidateRequest(reach=reach.effective_reach()))
        stats: dict[str, Any] = getattr(memory_engine, "stats", dict)()
    jobs = _jobs_view(get_settings())
    if as_json:
        out = {
            "engine": descriptor.to_dict(),
            "health": health.to_dict(),
            "items": {b.value: b.count for b in kinds.buckets},
            "engine_stats": stats,
            "scrubbing": get_settings().scrub,
            "scopes": [s.to_dict() for s in listed],
            "jobs": jobs,
        }
        echo_json(json.dumps(out, indent=2, default=str))
        _exit_on_config_error(jobs)
        return
    console.print(
        f"engine  {escape(mask_url(get_settings().engine))} ({descriptor.id}, "
        f"consolidation {descriptor.consolidation.value}, "
        f"{health.state.value}{': ' + escape(health.reason) if health.reason else ''})",
        soft_wrap=True,
    )
    console.print(_scrub_line(get_settings().scrub), soft_wrap=True)
    items = ", ".join(f"{b.value} {b.count}" for b in kinds.buckets) or "none"
    extra = (
        f"; beliefs {stats['beliefs']} active, {stats.get('superseded', 0)} superseded" if "beliefs" in stats else ""
    )
    if "embedding_wait" in stats:
        extra += f"; {stats['embedding_wait']} waiting for embedding"
    console.print(f"items   {kinds.total} ({items}){' (lower bound)' if kinds.truncated else ''}{extra}")
    console.print(escape(_jobs_line(jobs)), soft_wrap=True)
    if scopes:
        console.print(_scopes_table(listed, scopes))
    _exit_on_config_error(jobs)

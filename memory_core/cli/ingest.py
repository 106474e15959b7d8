"""``memory-core ingest PATH…``: files and folders into the brain, as ``IngestBrain`` jobs for the workers.

Every file is converted before anything is queued, so a folder's unreadable files are reported (and skipped)
without storing half a folder by accident; the jobs then go through ``JobQueue.submit`` (to the workers, or to
the outbox when the broker is down). Each job names its layout root (``--root``, default the
``MEMORY_CORE_LAYOUT_ROOT`` setting), so the workers store the passages there whatever root they run with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from memory_core.cli import app
from memory_core.cli._celery import BrokerOption, use_options
from memory_core.cli._common import (
    EngineOption,
    JobTally,
    RootOption,
    console,
    fail,
    layout_for,
    not_blank,
    plural,
)
from memory_core.cli._jobs import DOCS_PER_JOB, open_queue, plan_ingest
from memory_core.documents import DocumentResult, walk_paths
from memory_core.errors import MemoryCoreError
from memory_core.lifecycle.layout import parse_source_id

__all__ = ["check_source", "ingest"]


def check_source(value: str | None) -> str | None:
    """The ``--source`` callback: exit 2 naming the option when the value is not a source id (``parse_source_id``).

    Checked before any file is converted, as ``--collection`` is (blank: exit 2), so a bad option costs nothing.
    """
    if value is not None:
        try:
            parse_source_id(value)
        except ValueError as exc:
            raise fail(f"--source {value[:40]!r}: {exc}") from None
    return value


@app.command()
def ingest(
    paths: Annotated[
        list[Path], typer.Argument(metavar="PATH...", help="Files and folders (folders are walked, sorted).")
    ],
    source: Annotated[
        str | None,
        typer.Option(
            metavar="SOURCE",
            help="Brain source (files, pdf, markdown, notion, any slug); default by format.",
            callback=check_source,
        ),
    ] = None,
    collection: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="Store under the source's project:<collection> node.",
            callback=not_blank("--collection"),
        ),
    ] = None,
    root: RootOption = None,
    engine: EngineOption = None,
    broker: BrokerOption = None,
) -> None:
    """Convert files into brain documents and queue them as IngestBrain jobs (exit 1 if any file failed)."""
    use_options(engine, broker)
    layout = layout_for(root)
    total = sum(1 for _ in walk_paths(paths))
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=console) as bar:
        task = bar.add_task("converting", total=total)

        def advance(_: DocumentResult) -> None:
            bar.advance(task)

        try:
            plan = plan_ingest(paths, source=source, collection=collection, on_file=advance)
        except MemoryCoreError as exc:
            raise fail(str(exc)) from None
    for path, reason in plan.skipped:
        console.print(f"[yellow]skipped[/] {escape(str(path))}: {escape(reason)}")
    for path, reason in plan.failed:
        console.print(f"[red]failed[/]  {escape(str(path))}: {escape(reason)}")
    if not plan.jobs:
        raise fail("nothing to ingest", code=1)
    queue = open_queue()
    try:
        tally = JobTally(queue)
        tally.submit_all([job.placed_at(layout.root) for job in plan.jobs])
    finally:
        queue.close()
    console.print(
        f"{plural(len(plan.converted), 'document')} split into {plural(plan.passages, 'passage')}; "
        f"{tally.describe('ingest_brain job')} (up to {DOCS_PER_JOB} passages a job; {len(plan.failed)} failed, "
        f"{len(plan.skipped)} skipped): {', '.join(i[:8] for i in tally.ids)}",
        soft_wrap=True,
    )
    if plan.failed:
        raise typer.Exit(code=1)

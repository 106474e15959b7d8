"""``memory-core conformance``: run the conformance suite against an engine URL and print one row per check.

```
memory-core conformance --engine reference://             # one row per check: check, result, ms, detail
memory-core conformance --engine reference:// --faults    # one row per injected fault: which check caught it
memory-core conformance --engine sqlite:///tmp/fresh.db --json
```

The suite writes, forgets and rolls the log back to LSNs of its own; a rollback is store-wide (seed 002), so a
run beside a host undoes the host's changes, and any run leaves records behind. The command therefore refuses an
engine that already holds anything (``conformance.fresh``), with exit 2, unless ``--allow-existing`` says the
caller accepts that.

Exit codes: 0 when every check passes (with ``--faults``: when every fault is caught by the check the contract
names for it, reference §2; a fault caught only by another check is a failure too), 1 otherwise, 2 when the
engine URL cannot be opened (the error lists the known schemes) or the engine is not empty, or when no engine is
named (neither ``--engine`` nor a ``MEMORY_CORE_ENGINE`` setting: the default is the user's own store).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from memory_core.cli import app
from memory_core.cli._common import (
    EngineOption,
    echo_json,
    engine_errors,
    engine_failure,
    fail,
    open_engine_or_exit,
)
from memory_core.conformance import FaultResult, SuiteReport, run, run_faults
from memory_core.conformance.fresh import held_data
from memory_core.engine import MemoryEngine
from memory_core.engines import mask_url, open_engine
from memory_core.errors import MemoryCoreError
from memory_core.settings import get_settings

__all__ = ["conformance"]

_STYLE = {"passed": "green", "skipped": "yellow", "failed": "bold red"}


def _suite_table(report: SuiteReport) -> Table:
    verdict = "[green]passed[/]" if report.passed else "[bold red]FAILED[/]"
    table = Table(title=f"conformance of `{report.engine}` (run {report.nonce}): {verdict}")
    table.add_column("check")
    table.add_column("result")
    table.add_column("ms", justify="right")
    table.add_column("detail", overflow="fold")
    for r in report.results:
        result = r.status.value if r.failure is None else f"failed ({r.failure.value})"
        table.add_row(r.name, f"[{_STYLE[r.status.value]}]{result}[/]", f"{r.ms:.1f}", escape(r.detail))
    return table


_DETAIL_CHARS = 160


def _cut(text: str) -> str:
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 1] + "…"


def _faults_table(url: str, results: list[FaultResult]) -> Table:
    """One row per fault: the check that caught it and whether that is the check the fault is aimed at."""
    named = sum(r.as_named for r in results)
    shown = mask_url(url)
    table = Table(title=f"fault injection over {shown}: {named} of {len(results)} faults caught by their named check")
    # Names never wrap, so the detail keeps a readable width on an 80-column terminal (what a pipe gets); it is
    # cut at _DETAIL_CHARS characters here, --json carries it whole.
    table.add_column("fault", no_wrap=True, min_width=max((len(r.fault.value) for r in results), default=5))
    table.add_column("caught by", no_wrap=True, min_width=max((len(r.expected) for r in results), default=9))
    table.add_column("result", no_wrap=True)
    table.add_column("detail", overflow="fold", ratio=1)
    for r in results:
        if r.as_named:
            result = "[green]caught[/]"
        elif r.caught:
            result = "[yellow]elsewhere[/]"
        else:
            result = "[bold red]MISSED[/]"
        detail = r.detail if r.as_named else f"expected {r.expected}: {r.detail}"
        table.add_row(r.fault.value, r.caught_by or "—", result, escape(_cut(detail)))
    return table


def _refuse_unless_fresh(engine: MemoryEngine, url: str) -> None:
    """Exit 2 when ``engine`` already holds anything: the suite's rollbacks are store-wide (seed 002)."""
    with engine_errors():
        held = held_data(engine)
    if held is not None:
        raise fail(
            f"engine `{mask_url(url)}` is not empty: {held}. The conformance suite writes, forgets and rolls the "
            "log back store-wide, which undoes other writers' changes and leaves records behind: run it against "
            "a fresh `sqlite:///…` file or `reference://` (--allow-existing runs it anyway)"
        )


def _named_engine() -> str:
    """The ``MEMORY_CORE_ENGINE`` setting when the user set it (environment or ``.env``); else exit 2 naming --engine.

    The setting's built-in default (``sqlite:///./var/memory.db``) is where every other command keeps the user's
    memories, and a fresh one there passes the emptiness check: the suite would leave its records in it. So the
    engine must be named (docs/cli.md: ``conformance --engine URL``).
    """
    try:
        settings = get_settings()
    except MemoryCoreError as exc:  # a malformed MEMORY_CORE_ setting
        raise engine_failure(exc, opening=True) from None
    if "engine" not in settings.model_fields_set:
        raise fail(
            "--engine is required: name the engine to test (a fresh `sqlite:///…` file or `reference://`); "
            f"the default engine {mask_url(settings.engine)} is your own store, where the suite would leave its "
            "records (MEMORY_CORE_ENGINE, when set, names the engine instead)"
        )
    return settings.engine


@app.command()
def conformance(
    engine: EngineOption = None,
    faults: Annotated[
        bool,
        typer.Option("--faults", help="Inject each of the 23 faults; exit 1 unless each is caught by its named check."),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    allow_existing: Annotated[
        bool,
        typer.Option(
            "--allow-existing",
            help="Run on an engine that already holds data, accepting that the suite's rollbacks undo other "
            "writers' changes made meanwhile and that its records stay behind.",
        ),
    ] = False,
) -> None:
    """Run the 23-check conformance suite against a fresh engine (or, with --faults, test the suite itself).

    --engine is required unless MEMORY_CORE_ENGINE is set: the built-in default is the user's own store.
    """
    url = engine or _named_engine()
    console = Console()
    if faults:
        with open_engine_or_exit(url, scrub=False) as checked:  # a bad URL exits 2 before any fault runs
            if not allow_existing:
                _refuse_unless_fresh(checked, url)
        results = run_faults(lambda: open_engine(url))
        if as_json:
            echo_json(json.dumps({"engine": mask_url(url), "faults": [r.to_dict() for r in results]}, indent=2))
        else:
            console.print(_faults_table(url, results))
        if not all(r.as_named for r in results):
            raise typer.Exit(code=1)
        return
    with open_engine_or_exit(url, scrub=False) as opened:  # the engine as it is (tests run it through the wrapper)
        if not allow_existing:
            _refuse_unless_fresh(opened, url)
        report = run(opened)
    if as_json:
        echo_json(json.dumps(report.to_dict(), indent=2))
    else:
        console.print(_suite_table(report))
    if not report.passed:
        raise typer.Exit(code=1)

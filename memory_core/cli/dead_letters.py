"""``memory-core dead-letters list|show ID|requeue ID|purge``: jobs that will not run, and putting them back.

```
memory-core dead-letters list [--limit 50]     # newest first: id, task, error, attempts, when
memory-core dead-letters show ID               # the whole letter as JSON (payload included)
memory-core dead-letters requeue ID            # publish the job again under the same id; drops the letter
memory-core dead-letters requeue ID --engine URL   # ... for another engine than the one it was submitted for
memory-core dead-letters purge [--yes]         # drop them all
```

``ID`` may be a prefix only one letter's id starts with (``901cdb17``); ids are listed whole, on one line.
A requeued job keeps the engine it was submitted for (the letter's), whatever ``MEMORY_CORE_ENGINE`` this
shell has; ``--engine`` retargets it deliberately.

Exit codes: 0 done, 1 nothing to do (unknown or ambiguous id, a payload that is not a job), 2 the store or the
broker is unreachable.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from memory_core.cli import app
from memory_core.cli._celery import BrokerOption, use_options
from memory_core.cli._common import console, fail
from memory_core.errors import EngineUnavailable, InvalidRequest, NotFound
from memory_core.settings import get_settings

__all__ = ["dead_letters_app"]

dead_letters_app = typer.Typer(help="Jobs that will not run: list, show, requeue, purge.", no_args_is_help=True)
app.add_typer(dead_letters_app, name="dead-letters")


def _store() -> Any:
    from workers.stores import open_dead_letters

    return open_dead_letters(get_settings())


@dead_letters_app.command("list")
def list_letters(
    limit: Annotated[int, typer.Option("--limit", metavar="N", min=1, help="How many, newest first.")] = 50,
    broker: BrokerOption = None,
) -> None:
    """List dead letters, newest first."""
    use_options(broker=broker)
    try:
        store = _store()
        letters, total = store.list(limit), store.count()
    except EngineUnavailable as exc:
        raise fail(str(exc)) from None
    table = Table(title=f"dead letters: {total}")
    table.add_column("id", no_wrap=True)  # whole, on one line: it is what show and requeue take
    for column in ("task", "error", "attempts", "at", "message"):
        table.add_column(column, overflow="fold")
    for letter in letters:
        table.add_row(
            letter.id,
            letter.task or "—",
            letter.error,
            str(letter.attempts),
            letter.at.strftime("%Y-%m-%d %H:%M:%S"),
            escape(letter.message[:160]),
        )
    console.print(table)


@dead_letters_app.command("show")
def show(
    letter_id: Annotated[
        str, typer.Argument(metavar="ID", help="The dead letter's id (the job id), or a unique prefix.")
    ],
    broker: BrokerOption = None,
) -> None:
    """Print one dead letter as JSON."""
    use_options(broker=broker)
    try:
        store = _store()
        letter = store.get(store.resolve(letter_id))
    except (NotFound, InvalidRequest) as exc:
        raise fail(str(exc), code=1) from None
    except EngineUnavailable as exc:
        raise fail(str(exc)) from None
    typer.echo(json.dumps(letter.to_dict(), indent=2, ensure_ascii=False))


@dead_letters_app.command("requeue")
def requeue(
    letter_id: Annotated[
        str, typer.Argument(metavar="ID", help="The dead letter's id (the job id), or a unique prefix.")
    ],
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            "-e",
            metavar="URL",
            help="Run it against this engine URL instead; default: the engine it was submitted for.",
        ),
    ] = None,
    broker: BrokerOption = None,
) -> None:
    """Publish the letter's job again under the same id (for the engine it was submitted for), drop the letter."""
    use_options(broker=broker)
    from workers.requeue import requeue as requeue_letter

    try:
        job_id = requeue_letter(get_settings(), letter_id, engine=engine)
    except (NotFound, InvalidRequest) as exc:
        raise fail(str(exc), code=1) from None
    except EngineUnavailable as exc:
        raise fail(str(exc)) from None
    console.print(f"requeued {escape(letter_id)} as job {escape(job_id)}")


@dead_letters_app.command("purge")
def purge(
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    broker: BrokerOption = None,
) -> None:
    """Drop every dead letter."""
    use_options(broker=broker)
    if not yes and not typer.confirm("drop every dead letter?"):
        raise typer.Exit(code=1)
    try:
        dropped = _store().purge()
    except EngineUnavailable as exc:
        raise fail(str(exc)) from None
    console.print(f"purged {dropped} dead letter(s)")

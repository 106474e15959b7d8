"""``memory-core dead-letters list|show ID|requeue ID|purge``: jobs that will not run, and putting them back.

```
memory-core dead-letters list [--limit 50]     # newest first, 2 lines each: id, time, task, attempts; error
memory-core dead-letters show ID               # the whole letter as JSON (payload included)
memory-core dead-letters requeue ID            # publish the job again under the same id; drops the letter
memory-core dead-letters requeue ID --engine URL   # ... for another engine than the one it was submitted for
memory-core dead-letters purge [--yes]         # drop them all (asks; --yes confirms, needed without a TTY)
```

``ID`` may be a prefix only one letter's id starts with (``901cdb17``); ids are listed whole, on one line.
A letter holding no job (a queue entry that never was one) cannot be requeued: ``requeue`` says so and points
at ``show``.
A requeued job keeps the engine it was submitted for (the letter's), whatever ``MEMORY_CORE_ENGINE`` this
shell has; ``--engine`` retargets it deliberately.

Exit codes: 0 done, 1 nothing to do (unknown or ambiguous id, a payload that is not a job, a purge declined at
its prompt), 2 bad input (a blank ``ID``, a ``purge`` without ``-y`` where stdin is no terminal to ask) or the
store or the broker is unreachable. A message repeats at most the first 80 characters of an ``ID``.
"""

from __future__ import annotations

import json
import sys
import textwrap
from typing import Annotated, Any

import click
import typer
from rich.markup import escape

from memory_core.cli import app
from memory_core.cli._celery import BrokerOption, use_options
from memory_core.cli._common import console, echo_json, fail
from memory_core.errors import EngineUnavailable, InvalidRequest, NotFound
from memory_core.settings import get_settings

__all__ = [
    "LIST_LEGEND",
    "LIST_MESSAGE_CHARS",
    "TASK_PREFIX",
    "check_ref",
    "dead_letters_app",
    "letter_lines",
    "no_job",
]

LIST_MESSAGE_CHARS = 300
"""Characters of a letter's message ``list`` shows (about four lines at 80 columns); ``show`` prints it all."""
LIST_LEGEND = "id  time (UTC)  task  ×attempts, then the error and its message"
"""What the two lines of each listed letter hold (``letter_lines``), printed in the heading."""
TASK_PREFIX = "memory."
"""The prefix every memory-core task name shares (``workers.config.TASK_*``), left out of the list."""

dead_letters_app = typer.Typer(help="Jobs that will not run: list, show, requeue, purge.", no_args_is_help=True)
app.add_typer(dead_letters_app, name="dead-letters")


def _store() -> Any:
    from workers.queue import open_dead_letters

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
    shown = f", the newest {len(letters)}" if len(letters) < total else ""
    console.print(f"dead letters: {total}{shown}; per letter: {LIST_LEGEND}", soft_wrap=True)
    for letter in letters:
        head, why = letter_lines(letter)
        console.print(escape(head), soft_wrap=True)  # never broken: the id is what show and requeue take
        indented = textwrap.fill(why, width=max(40, console.width), initial_indent="    ", subsequent_indent="    ")
        console.print(escape(indented), soft_wrap=True)


def letter_lines(letter: Any) -> tuple[str, str]:
    """A letter as ``list`` prints it, two lines; pure.

    The first is compact and whole: ``<id>  <YYYY-MM-DD HH:MM> UTC  <task>  ×<attempts>`` (about 75
    characters for a UUID id; a task name loses its shared ``memory.`` prefix). The second is the error and
    its message, wrapped to the terminal and indented, cut at ``LIST_MESSAGE_CHARS`` (``show`` prints it all).
    """
    task = (letter.task or "(no task)").removeprefix(TASK_PREFIX)
    head = f"{letter.id}  {letter.at.strftime('%Y-%m-%d %H:%M')}  {task}  ×{letter.attempts}"
    text = letter.message
    message = text if len(text) <= LIST_MESSAGE_CHARS else text[:LIST_MESSAGE_CHARS] + "…"
    return head, f"{letter.error}: {message}"


def check_ref(ref: str) -> str:
    """The ``ID`` argument when it is not blank.

    Raises:
        typer.BadParameter: a blank ``ID`` (bad input: exit 2, before any store is opened).
    """
    if not ref.strip():
        raise typer.BadParameter("must not be blank")
    return ref


LetterRef = Annotated[
    str,
    typer.Argument(metavar="ID", callback=check_ref, help="The dead letter's id (the job id), or a unique prefix."),
]


@dead_letters_app.command("show")
def show(
    letter_id: LetterRef,
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
    echo_json(json.dumps(letter.to_dict(), indent=2, ensure_ascii=False))


@dead_letters_app.command("requeue")
def requeue(
    letter_id: LetterRef,
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
    from memory_core.lifecycle.jobs import parse_job
    from workers.queue import requeue as requeue_letter

    try:
        store = _store()
        letter = store.get(store.resolve(letter_id))
    except (NotFound, InvalidRequest) as exc:
        raise fail(str(exc), code=1) from None
    except EngineUnavailable as exc:
        raise fail(str(exc)) from None
    try:
        parse_job(letter.payload)
    except InvalidRequest as exc:
        raise fail(no_job(letter, exc), code=1) from None
    try:
        job_id = requeue_letter(get_settings(), letter.id, engine=engine, store=store)
    except (NotFound, InvalidRequest) as exc:
        raise fail(str(exc), code=1) from None
    except EngineUnavailable as exc:
        raise fail(str(exc)) from None
    console.print(f"requeued {escape(letter.id)} as job {escape(job_id)}")


def no_job(letter: Any, error: InvalidRequest) -> str:
    """Why ``letter`` cannot be requeued, in words, and how to see its payload; pure.

    A letter whose payload is text (a queue entry that never was a job: not JSON, not a message, a foreign
    content type) holds no job at all; one whose payload is JSON was a job the parser refuses
    (``error``, from ``parse_job``).
    """
    if letter.truncated:
        why = "its payload was cut when it was dead-lettered, so the job cannot be rebuilt"
    elif isinstance(letter.payload, str) or letter.payload is None:
        why = f"it is a message that never was a job ({letter.error}: {letter.message})"
    else:
        why = f"its payload is not a job this version reads ({error.message})"
    return (
        f"dead letter {letter.id} holds no job to requeue: {why}. See its payload with "
        f"`memory-core dead-letters show {letter.id}`; `memory-core dead-letters purge --yes` drops every letter"
    )


@dead_letters_app.command("purge")
def purge(
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Confirm without being asked (required when stdin is not a terminal).")
    ] = False,
    broker: BrokerOption = None,
) -> None:
    """Drop every dead letter (asks first; -y / --yes confirms)."""
    use_options(broker=broker)
    if not yes:
        if not sys.stdin.isatty():
            # a usage error, like a missing argument: the command cannot ask, so the confirmation must be given
            raise fail("purge drops every dead letter: pass -y (--yes) to confirm; stdin is not a terminal to ask")
        try:
            confirmed = typer.confirm("drop every dead letter? (--yes skips this question)")
        except click.exceptions.Abort:  # Ctrl-C or end of input at the prompt
            confirmed = False
        if not confirmed:
            raise fail("nothing purged (confirm with --yes, -y)", 1)
    try:
        dropped = _store().purge()
    except EngineUnavailable as exc:
        raise fail(str(exc)) from None
    console.print(f"purged {dropped} dead letter(s)")

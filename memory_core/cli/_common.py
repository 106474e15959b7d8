"""Options and helpers every ``memory-core`` command shares: the engine and layout options, and consoles."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final
from urllib.parse import urlsplit

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand

from memory_core.control import escape_control_chars_json, neutralise_control_chars
from memory_core.engine import MemoryEngine
from memory_core.engines import open_host_engine
from memory_core.errors import ConfigError, InvalidRequest, MemoryCoreError
from memory_core.lifecycle.layout import MemoryLayout, agent_segment_id
from memory_core.settings import get_settings
from memory_core.timing import percentile
from memory_core.wording import plural

__all__ = [
    "EngineOption",
    "JobTally",
    "NEGATIVE_NUMBER",
    "RootOption",
    "SignedArguments",
    "console",
    "echo_json",
    "err_console",
    "fail",
    "latencies",
    "layout_for",
    "check_agent_id",
    "check_output_file",
    "engine_errors",
    "engine_failure",
    "engine_session",
    "exit_code_for",
    "missing_database",
    "no_database",
    "not_blank",
    "open_engine_or_exit",
    "plural",
    "renamed_field",
    "shown",
    "signed_arguments",
]

console = Console(highlight=False)
"""Standard output."""
err_console = Console(stderr=True, highlight=False)
"""Standard error."""


LINE_MARKS: Final = str.maketrans({"\n": "\u2424", "\r": "\u240d", "\t": " "})
"""Newline → ``␤``, carriage return → ``␍``, tab → a space: what ``shown`` puts on a line instead of them."""


def shown(text: object) -> str:
    r"""``text`` as one inert terminal line: what every command prints of stored or given text; pure.

    Control characters are made visible by ``control.neutralise_control_chars`` (ESC → ``␛``, so an ANSI or OSC
    sequence such as ``]0;title`` changes no colour or window title; C1 and bidi controls → U+FFFD), and
    line breaks become ``␤``/``␍`` so a stored key, text or reason cannot forge output lines (*memory-core*,
    issue 17). Stored text is never changed; only what reaches the terminal.
    """
    return neutralise_control_chars(str(text)).translate(LINE_MARKS)


def echo_json(text: str) -> None:
    r"""Print JSON text, with the control characters a terminal would interpret escaped (``--json`` output).

    ``control.escape_control_chars_json``: DEL, C1 and bidirectional controls in stored text become ``\uXXXX``
    escapes, so the parsed value is the one stored and the terminal shows them as text (*memory-core*, issue 17).
    """
    typer.echo(escape_control_chars_json(text))


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` in red on standard error (one line, never wrapped) and return the ``typer.Exit`` to raise."""
    err_console.print(f"[bold red]{escape(message)}[/]", soft_wrap=True)
    return typer.Exit(code=code)


NEGATIVE_NUMBER: Final = re.compile(r"-(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
"""A token that is a negative number (``-1``, ``-0.5``, ``-1e3``): an argument's value, never an option's name."""


def signed_arguments(args: Sequence[str], option_values: Mapping[str, int]) -> list[str]:
    """``args`` with every argument that is a negative number moved behind ``--``, so it reaches the command; pure.

    Click reads any token starting with ``-`` where an argument may stand as an option, so ``rollback -1`` would
    exit 2 with ``No such option: -1`` before the command could check the value (a negative number never names
    an option of ours). From the first such token on, the arguments go after ``--`` in their order, and the
    options, with the values they take, stay before it; a token that is an option's value (``--since -1``) stays
    where it is. Tokens already after a ``--`` are arguments and stay after it. Without a negative number
    argument, ``args`` is returned as it was.

    Args:
        args: The command's tokens (after its name).
        option_values: How many values each option name takes (``{"--why": 1, "-e": 1}``); flags are absent.
    """

    def values_after(token: str) -> int:
        if token.startswith("--"):
            return 0 if "=" in token else option_values.get(token, 0)
        for at, char in enumerate(token[1:], start=1):  # a cluster of short options: -xe URL, -eURL
            taken = option_values.get("-" + char, 0)
            if taken:
                return taken if at == len(token) - 1 else taken - 1
        return 0

    head: list[str] = []
    moved: list[str] = []
    i, n = 0, len(args)
    while i < n:
        token = args[i]
        if token == "--":
            if not moved:
                return list(args)
            moved.extend(args[i + 1 :])
            break
        if NEGATIVE_NUMBER.fullmatch(token) or not token.startswith("-") or token == "-":
            if moved or NEGATIVE_NUMBER.fullmatch(token):
                moved.append(token)
            else:
                head.append(token)
            i += 1
            continue
        take = values_after(token)
        head.extend(args[i : i + 1 + take])
        i += 1 + take
    return [*head, "--", *moved] if moved else list(args)


class SignedArguments(TyperCommand):
    """A command whose arguments may be negative numbers (``rollback -1``): they reach the command's own checks.

    Click would refuse ``-1`` as an unknown option (exit 2, ``No such option: -1``) before the command could name
    the field and say what is wrong (``invalid request: lsn: must be an LSN, an integer in 0..=…``). See
    ``signed_arguments``. Text that starts with ``-`` and is no number is still read as an option; give it after
    ``--`` (``memory-core facts set -- "-x is a flag"``).
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Move negative number arguments behind ``--`` (``signed_arguments``), then parse as Click does."""
        values: dict[str, int] = {}
        for param in self.params:
            if param.param_type_name == "option" and not getattr(param, "is_flag", False):
                if getattr(param, "count", False):
                    continue
                for name in param.opts:
                    values[name] = max(param.nargs, 1)
        return list(super().parse_args(ctx, signed_arguments(args, values)))


@contextmanager
def renamed_field(field: str, *library_fields: str) -> Iterator[None]:
    """Re-raise an ``InvalidRequest`` naming one of ``library_fields`` as naming ``field``, the user's option.

    The library names its own parameter (``rollback(to_lsn)``, ``as_of(lsn)``); the command's error names what
    the user typed (``LSN``, ``--as-of``). Any other error passes unchanged.
    """
    try:
        yield
    except InvalidRequest as exc:
        if exc.field in library_fields:
            raise InvalidRequest(exc.reason, field=field) from None
        raise


def not_blank(option: str) -> Callable[[str | None], str | None]:
    """An option callback refusing a given but blank value, exiting 2 naming ``option``.

    ``--engine ""`` would otherwise read as "not given" and fall back to the setting silently, and
    ``--broker ""`` to the server-less queue (which a Redis worker never reads).
    """

    def check(value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise fail(f"{option} is blank: give a value, or leave the option out for the default")
        return value

    return check


def check_agent_id(value: str | None) -> str | None:
    """The ``--agent`` callback (``recall``, ``replay``): exit 2 when blank; say which node an id maps to.

    The agent's node is ``agent:<id>`` with the id stripped and mapped as the library's ``MemoryLayout`` does
    (``layout.agent_segment_id``: a segment id kept, any other id mapped where no valid id can name it), so the
    command reads and writes where ``AgentMemory`` with the same id would; an id that is not already a segment id
    gets a note naming its node on stderr. A segment id starting with ``--`` is refused (exit 2).
    """
    if value is None:
        return None
    if not value.strip():
        raise fail("--agent is blank: give the agent's id")
    try:
        node = agent_segment_id(value)
    except InvalidRequest as exc:
        raise fail(f"--agent: {exc.reason}") from None
    if node != value:
        err_console.print(f"[dim]--agent {escape(repr(value))} is the node agent:{escape(node)}[/]", soft_wrap=True)
    return value


def check_output_file(
    path: Path, option: str, *, example: str, creates_folders: bool = False, probe: bool = False
) -> None:
    """Exit 2 naming ``option`` unless ``path`` can name a file the command writes; called before any work.

    What every command writing a file it is given checks (``context -o``, ``eval locomo --json``), so a mistyped
    path costs nothing and the error names the option (docs/cli.md: bad input exits 2, checked first):

    * ``path`` is a folder: refused, suggesting ``path / example``;
    * its folder is missing: refused, unless ``creates_folders``: then the nearest existing ancestor must be a
      folder, and the missing folders are created now (an ``OSError`` doing so, e.g. under ``/proc``, is refused);
    * its folder is a file (``out.jsonl/x.json``): refused;
    * with ``probe``: a nameless file is created in the folder and dropped at once, and an existing ``path``
      opened for appending (nothing changed), so a folder or file nothing can be written to (a read-only file
      system, ``/proc``) is refused too. For commands whose work is long; ``context`` leaves that to the write
      (its exit 1).

    Args:
        path: The file to write.
        option: The option as typed (``--output``, ``--json``).
        example: A file name suggested inside a folder given as ``path`` (``context.md``).
        creates_folders: The command creates the missing folders of ``path`` (``eval``); else none is created.
        probe: Check by writing that the folder and the file accept a write.
    """
    if path.is_dir():
        raise fail(f"{option}: {path} is a folder; name a file in it, e.g. {path / example}")
    parent = path.parent
    if creates_folders and not parent.exists():
        existing = next(p for p in parent.parents if p.exists() or p == p.parent)
        if existing.exists() and not existing.is_dir():
            raise fail(f"{option}: {existing} is not a folder")
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise fail(f"{option}: cannot create the folder {parent}: {exc.strerror or exc}") from None
    if not parent.exists():
        raise fail(f"{option}: the folder {parent} does not exist (create it first; no folder is created)")
    if not parent.is_dir():
        raise fail(f"{option}: {parent} is not a folder")
    if not probe:
        return
    try:
        with tempfile.TemporaryFile(dir=parent):
            pass
        if path.exists():
            with path.open("ab"):
                pass
    except OSError as exc:
        raise fail(f"{option}: cannot write {path}: {exc.strerror or exc}") from None


EngineOption = Annotated[
    str | None,
    typer.Option(
        "--engine",
        "-e",
        metavar="URL",
        help="Engine URL; default: the MEMORY_CORE_ENGINE setting.",
        callback=not_blank("--engine"),
    ),
]
RootOption = Annotated[
    str | None,
    typer.Option(
        "--root",
        metavar="NAMESPACE",
        help="Layout root namespace (root, team:acme); default: MEMORY_CORE_LAYOUT_ROOT.",
        callback=not_blank("--root"),
    ),
]


def missing_database(url: str) -> Path | None:
    """The file a ``sqlite://`` URL names when no file is there yet, else None (other schemes: None).

    The SQLite engine creates a missing file and its folders (a writer's first store needs that), so a read-only
    command pointed at a mistyped path would otherwise create an empty database there and report it healthy.
    A malformed URL gives None: opening it reports the error.
    """
    if urlsplit(url.strip()).scheme.lower() != "sqlite":
        return None
    from memory_core.engines.sqlite.connection import parse_url

    try:
        path = parse_url(url.strip()).path
    except MemoryCoreError:
        return None
    return None if path.exists() else path


def no_database(path: Path) -> str:
    """What a read-only command says when ``missing_database`` found nothing at ``path``."""
    return (
        f"no database at {path}; nothing has been stored there yet — check the path (--engine, MEMORY_CORE_ENGINE) "
        "or run ingest/replay first"
    )


USAGE_ERRORS: tuple[type[MemoryCoreError], ...] = (InvalidRequest, ConfigError)
"""Errors in what the caller gave (a malformed request, an unusable URL or setting): exit 2."""


def exit_code_for(exc: MemoryCoreError, *, opening: bool = False) -> int:
    """The exit status every command gives ``exc``; pure.

    2 when the input is wrong (``InvalidRequest``, ``ConfigError``) or the engine could not be opened at all (a
    bad URL, a file that is no database, a server that does not answer at start: nothing was done); 1 when an
    opened engine failed during the command (``EngineUnavailable``, ``EngineError``, ``Conflict``, …): the input
    was fine, the engine was not.

    Args:
        exc: The error.
        opening: True when ``exc`` came from opening the engine.
    """
    return 2 if opening or isinstance(exc, USAGE_ERRORS) else 1


def describe_error(exc: MemoryCoreError) -> str:
    """``str(exc)``, with a hint on a transient error (``retryable``) that retrying later may work; pure."""
    text = str(exc)
    return f"{text} (transient: retry once the engine answers)" if exc.retryable else text


def engine_failure(exc: MemoryCoreError, *, opening: bool = False) -> typer.Exit:
    """Print ``exc`` the one way every command does and return the ``typer.Exit`` to raise (``exit_code_for``)."""
    return fail(describe_error(exc), code=exit_code_for(exc, opening=opening))


@contextmanager
def engine_errors() -> Iterator[None]:
    """Map a ``MemoryCoreError`` raised inside the block to ``engine_failure`` (exit 1, or 2 for bad input)."""
    try:
        yield
    except MemoryCoreError as exc:
        raise engine_failure(exc) from None


def open_engine_or_exit(url: str | None, *, read_only: bool = False, scrub: bool | None = None) -> MemoryEngine:
    """Open ``url`` (default: the configured engine); exit 2 with the error on a bad URL or unusable engine.

    Args:
        url: The engine URL, or None for the ``MEMORY_CORE_ENGINE`` setting.
        read_only: The command only reads (``status``, ``recall``, ``context``): a ``sqlite://`` URL naming a
            file that does not exist exits 2 (``no_database``) instead of creating an empty database.
        scrub: Wrap it in a ``ScrubbingEngine`` (``open_host_engine``); None: the ``MEMORY_CORE_SCRUB`` setting.
    """
    try:
        target = url or get_settings().engine
    except MemoryCoreError as exc:  # a malformed MEMORY_CORE_ setting
        raise engine_failure(exc, opening=True) from None
    missing = missing_database(target) if read_only else None
    if missing is not None:
        raise fail(no_database(missing))
    try:
        return open_host_engine(target, scrub=scrub)
    except MemoryCoreError as exc:
        raise engine_failure(exc, opening=True) from None


@contextmanager
def engine_session(url: str | None, *, read_only: bool = False) -> Iterator[MemoryEngine]:
    """The engine every command opens: ``open_engine_or_exit``, errors inside mapped by ``engine_errors``, closed.

    ``recall``, ``context``, ``status``, ``replay``, ``serve`` and ``mcp`` open their engine here, so a bad URL
    (exit 2) or an engine failing mid-command (exit 1, with a retry hint when transient) reads the same in each.
    """
    engine = open_engine_or_exit(url, read_only=read_only)
    try:
        with engine_errors():
            yield engine
    finally:
        engine.close()


def layout_for(root: str | None) -> MemoryLayout:
    """The layout for ``root`` (default: the configured layout root); exit 2 on a bad namespace."""
    try:
        return MemoryLayout(root or get_settings().layout_root)
    except MemoryCoreError as exc:
        raise engine_failure(exc, opening=True) from None


def latencies(samples_ms: Sequence[float], call: str = "", *, sep: str = ", ") -> str:
    """``"pre_turn p50 2.0 ms, p99 3.0 ms"``, or ``"no pre_turn calls"`` when ``samples_ms`` is empty.

    Without ``call`` (a table row already names it): ``"p50 2.0 ms, p99 3.0 ms"``, or ``"no calls"``.
    Percentiles by nearest rank (``timing.percentile``); a percentile of no calls is NaN, not a figure.
    """
    named = f"{call} " if call else ""
    if not samples_ms:
        return f"no {named}calls"
    return f"{named}p50 {percentile(samples_ms, 50):.1f} ms{sep}p99 {percentile(samples_ms, 99):.1f} ms"


@dataclass
class JobTally:
    """Jobs handed to a ``workers.queue.JobQueue``, counted so a command's output can explain its numbers.

    ``JobQueue.send`` says what became of each job: ``published``, ``coalesced`` (a ``BuildBeliefs`` identical
    to one still queued shares that job's id: the triggers fold into one build) or ``parked`` (the broker did
    not answer: the job waits in the local outbox). ``submitted`` counts calls, ``ids`` the distinct ids.

    Args:
        queue: A ``JobQueue`` (anything with ``send(job)`` returning ``.id`` and ``.state``).
    """

    queue: Any
    submitted: int = 0
    ids: list[str] = field(default_factory=list)
    parked: int = 0

    def submit(self, job: Any) -> str:
        """Submit one job; its id (an earlier job's when it folded into it)."""
        sent = self.queue.send(job)
        self.submitted += 1
        if sent.id not in self.ids:
            self.ids.append(sent.id)
            self.parked += sent.state == "parked"
        return str(sent.id)

    def submit_all(self, jobs: Sequence[Any]) -> list[str]:
        """Submit every job in order; the ids."""
        return [self.submit(job) for job in jobs]

    def describe(self, noun: str) -> str:
        """What happened, in words (``noun`` singular, e.g. ``"ingest_brain job"``).

        ``"12 ingest_brain jobs queued"``; ``"113 build_beliefs jobs submitted, 9 queued (a build identical to
        one still waiting shares its job)"``; ``"12 ingest_brain jobs submitted, 0 queued, 12 parked in the outbox
        (the broker did not answer; …)"``.
        """
        distinct, parked = len(self.ids), self.parked
        if self.submitted == distinct and not parked:
            return f"{plural(distinct, noun)} queued"
        text = f"{plural(self.submitted, noun)} submitted, {distinct - parked} queued"
        if self.submitted != distinct:
            text += " (a build identical to one still waiting shares its job)"
        if parked:
            text += (
                f", {parked} parked in the outbox (the broker did not answer; they are sent by a later submit once "
                "it answers, by a worker when it starts, or by beat)"
            )
        return text

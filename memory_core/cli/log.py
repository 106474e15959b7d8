"""``memory-core log``, ``history ID``, ``retract ID… --why``, ``rollback LSN --why`` (memory as a log, seed 002).

They work on any engine whose descriptor declares ``log`` (``docs/log-model.md``); on another, the engine's
``Unsupported`` exits 1. ``log`` and ``history`` only read (a ``sqlite://`` URL naming no file exits 2 rather than
creating one); ``retract`` and ``rollback`` write one log transaction each and print its records. Bad input (a
negative LSN, an LSN past the last record for ``rollback`` or ``--as-of``, a future ``--as-of`` time, a blank
reason) is ``InvalidRequest`` naming the field the user gave (``lsn`` for ``rollback``'s LSN, ``as_of`` for
``--as-of``, ``since``, ``limit``, ``reason``): exit 2, nothing written; a negative LSN reaches that check
(``SignedArguments``) rather than being read as an option. ``log --since`` past the last record is an
empty page, not an error. ``retract`` names the ids no memory has (exit 1 when it is all of them); for
``history`` and ``retract`` alike, text no memory's id could be (``check_memory_ids``) exits 2 naming ``id``.
``lsn_for`` turns ``recall --as-of``'s value (an LSN, or an ISO-8601 time) into an LSN.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated

import typer

from memory_core.cli import app
from memory_core.cli._common import EngineOption, SignedArguments, echo_json, engine_session, fail, renamed_field, shown
from memory_core.engine import MemoryEngine
from memory_core.errors import InvalidRequest
from memory_core.items import is_memory_id
from memory_core.memory_log import LogChange, LogRecord

__all__ = ["check_memory_ids", "history", "log", "lsn_for", "not_an_id", "render_records", "retract", "rollback"]

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]
WhyOption = Annotated[str, typer.Option("--why", metavar="TEXT", help="Why (kept in every record written).")]


def _when(at: int | None) -> str:
    if at is None:
        return "-"
    return datetime.fromtimestamp(at / 1e6, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def render_records(records: Sequence[LogRecord]) -> str:
    """One line per record: ``LSN txn OP id status/tier time reason``, id and reason ``shown`` inert; pure."""
    lines = []
    for r in records:
        state = f"{r.status.value}/{r.tier.value}" if r.status and r.tier else "-"
        reason = f"  {shown(r.reason)}" if r.reason else ""
        lines.append(f"{r.lsn:>6} txn {r.txn:<6} {r.op.value:<9} {shown(r.id)}  {state:<15} {_when(r.at)}{reason}")
    return "\n".join(lines)


def not_an_id(item_id: str, noun: str = "memory", lister: str = "log") -> str:
    """Why ``item_id`` names no memory: the text (cut at 80 characters), and what an id looks like; pure.

    Args:
        item_id: The text given.
        noun: What it should name (``memory``, ``fact``: a fact is an item, its id has the same shape).
        lister: The command printing whole ids (``log``, ``facts list``).
    """
    said = repr(item_id) if len(item_id) <= 80 else f"{item_id[:80]!r}… ({len(item_id)} characters)"
    return (
        f"{shown(said)} is not a {noun} id: give the whole id, 40 lowercase hex characters as `memory-core {lister}` "
        "prints it (a prefix is not resolved)"
    )


def check_memory_ids(engine: MemoryEngine, ids: Sequence[str]) -> None:
    """Refuse text no memory's id could be that names nothing in the log: ``history`` and ``retract`` alike.

    An id is malformed when it is not ``items.is_memory_id`` (40 lowercase hex: a prefix, an upper-case copy, a
    typo) and has no records; a whole id with none is well formed (``history`` answers "no records", ``retract``
    names it as unknown). Checked before anything is written.

    Raises:
        InvalidRequest: ``field="id"``, naming the first malformed id and what an id looks like.
    """
    for item_id in dict.fromkeys(ids):
        if not is_memory_id(item_id) and not engine.history(item_id):
            raise InvalidRequest(not_an_id(item_id), field="id")


def _change(change: LogChange, as_json: bool) -> None:
    if as_json:
        echo_json(change.to_json())
        return
    if change.txn is None:
        typer.echo("nothing changed")
    else:
        typer.echo(f"txn {change.txn}: {len(change.records)} records")
        typer.echo(render_records(change.records))
    if change.note:
        typer.echo(f"note: {change.note}")
        typer.echo("unrecoverable: " + ", ".join(change.unrecoverable))


def lsn_for(engine: MemoryEngine, value: str, now: datetime | None = None) -> int:
    """The LSN ``value`` names: decimal digits are an LSN; else an ISO-8601 time (UTC when it names no zone).

    A time names the last LSN written at or before it (records carry ``at``, never decreasing): found by binary
    search over ``log`` pages of one record, so it costs about log2(LSN) reads. A time after ``now`` is refused
    the way an LSN past the last record is (``as_of(lsn)``): the log has no state there yet.

    Args:
        engine: An engine keeping a log.
        value: An LSN or an ISO-8601 time.
        now: The present (default: the clock's UTC time).

    Raises:
        InvalidRequest: ``as_of``: neither an LSN nor a time, a time after ``now``, or the engine's records carry
            no time.
    """
    text = value.strip()
    if text.isascii() and text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidRequest(f"{value!r} is neither an LSN nor an ISO-8601 time", field="as_of") from None
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    present = now if now is not None else datetime.now(UTC)
    if when > present:
        raise InvalidRequest(f"{value!r} is in the future (now: {present:%Y-%m-%dT%H:%M:%SZ})", field="as_of")
    at = int(when.timestamp() * 1_000_000)
    low, high = 0, engine.current_lsn()  # the answer lies in [low, high]
    while low < high:
        mid = (low + high + 1) // 2
        record = engine.log(mid - 1, 1).records[0]
        if record.at is None:
            raise InvalidRequest("this engine's log records carry no time: give an LSN", field="as_of")
        if record.at <= at:
            low = mid
        else:
            high = mid - 1
    return low


@app.command()
def log(
    since: Annotated[int, typer.Option(metavar="LSN", help="Records after this LSN.")] = 0,
    limit: Annotated[int, typer.Option(metavar="N", help="Most records (1..=1000).")] = 100,
    engine: EngineOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print the log: one record per change, in LSN order (then the --since for the next page, if any)."""
    with engine_session(engine, read_only=True) as memory_engine:
        page = memory_engine.log(since, limit)
        last = memory_engine.current_lsn()
    if as_json:
        echo_json(page.to_json())
        return
    typer.echo(render_records(page.records) or f"no records after LSN {since} (last: {last})")
    if page.next_since is not None:
        typer.echo(f"more: --since {page.next_since}")


@app.command(cls=SignedArguments)
def history(
    item_id: Annotated[str, typer.Argument(metavar="ID", help="A memory's id.")],
    engine: EngineOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print every record about one memory, and its status now.

    ID is the whole id ``log`` prints; an id no memory could have (a prefix, or not 40 lowercase hex) that has no
    records exits 2 naming ``id``, as a blank id does, rather than printing "no records" (a whole id with
    none is a true answer: it may name a memory whose records were compacted).
    """
    with engine_session(engine, read_only=True) as memory_engine:
        check_memory_ids(memory_engine, [item_id])
        records = memory_engine.history(item_id)
    if as_json:
        echo_json("[" + ", ".join(r.to_json() for r in records) + "]")
        return
    if not records:
        typer.echo(f"no records about {shown(item_id)}")
        return
    typer.echo(render_records(records))
    last = records[-1]
    typer.echo(f"now: {last.status.value}/{last.tier.value}" if last.status and last.tier else "now: content removed")


@app.command(cls=SignedArguments)
def retract(
    ids: Annotated[list[str], typer.Argument(metavar="ID...", help="Memories that were wrong.")],
    why: WhyOption,
    engine: EngineOption = None,
    as_json: JsonOption = False,
) -> None:
    """Retract memories (content kept) and make all built on them stale, in one transaction.

    Ids no memory has (no record in the log) are named on standard error; exit 1 when that is every id given.
    An id no memory could have (``history``'s rule: not 40 lowercase hex, and no records) exits 2 naming ``id``,
    and nothing is retracted.
    """
    with engine_session(engine) as memory_engine:
        check_memory_ids(memory_engine, ids)
        change = memory_engine.retract(ids, why)
        unknown = [i for i in dict.fromkeys(ids) if not memory_engine.history(i)]
    _change(change, as_json)
    if unknown:
        message = f"no memory has the id{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}"
        if len(unknown) == len(set(ids)):
            raise fail(message + ": nothing to retract", code=1)
        typer.echo(message + " (left out)", err=True)


@app.command(cls=SignedArguments)
def rollback(
    lsn: Annotated[int, typer.Argument(metavar="LSN", help="The LSN whose state to bring back.")],
    why: WhyOption,
    engine: EngineOption = None,
    as_json: JsonOption = False,
) -> None:
    """Bring the state back to LSN with compensating records (nothing erased; roll back a rollback the same way).

    A negative LSN or one past the last record exits 2 naming ``lsn`` (the library's ``to_lsn``).
    """
    with engine_session(engine) as memory_engine, renamed_field("lsn", "to_lsn"):
        change = memory_engine.rollback(lsn, why)
    _change(change, as_json)

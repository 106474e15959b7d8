"""``memory-core recall QUERY`` (the pack pre_turn would inject) and ``memory-core context`` (context.md).

Both only read: a ``sqlite://`` URL naming no file exits 2 rather than creating an empty database
(``engine_session(read_only=True)``: the one way every command opens its engine and reports its errors).

A pack never fails on an engine error (a host's ``pre_turn`` must get a pack): a section whose read failed is
left out with the error as its reason. The commands tell the truth about it: when the pack shows nothing and
sections failed (every one, on a damaged file), they print the reasons on standard error and exit 1, so a
damaged database is not reported as "nothing stored". Some sections failing beside others shown is reported
and exits 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from memory_core.cli import app
from memory_core.cli._common import (
    EngineOption,
    RootOption,
    SignedArguments,
    check_agent_id,
    check_output_file,
    console,
    echo_json,
    engine_session,
    err_console,
    fail,
    layout_for,
    plural,
    renamed_field,
)
from memory_core.cli.log import lsn_for
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.policy import RecallPolicy
from memory_core.recall import EMPTY_REASON, ContextPack, ContextSpec, Skipped, context_recall, skip_wording
from memory_core.recall.pack import assemble

__all__ = ["context", "failed_sections", "recall", "unreadable"]


def failed_sections(skipped: Sequence[Skipped]) -> list[Skipped]:
    """The skipped sections whose read failed (their reason is an error's text, not ``"empty"``); pure."""
    return [s for s in skipped if s.reason != EMPTY_REASON]


def unreadable(pack: ContextPack) -> bool:
    """True when ``pack`` shows nothing and engine errors are why: no section shown, at least one failed; pure.

    Every section failing is the usual case (a damaged file); a pack left empty by failed sections beside
    sections that found nothing is no more "nothing stored", so it counts too. A healthy empty memory (every
    section ``"empty"``) does not.
    """
    return not pack.markdown and bool(failed_sections(pack.skipped))


def _reasons(failed: Sequence[Skipped]) -> str:
    """``"  Learnings, Brain: unavailable: …"``: one line per distinct reason, the sections it hit first."""
    by_reason: dict[str, list[str]] = {}
    for s in failed:
        by_reason.setdefault(s.reason, []).append(s.heading)
    return "\n".join(f"  {', '.join(headings)}: {reason}" for reason, headings in by_reason.items())


def _refuse_unreadable(pack: ContextPack, what: str) -> None:
    """Exit 1 with the failed sections' reasons when ``unreadable(pack)``."""
    if not unreadable(pack):
        return
    failed = failed_sections(pack.skipped)
    if len(failed) == len(pack.skipped):
        head = "no section could be read (engine errors, not an empty memory)"
    else:
        head = (
            f"nothing to show: {len(failed)} of {len(pack.skipped)} sections could not be read (engine errors; "
            "the rest found nothing)"
        )
    raise fail(f"{what} failed: {head}:\n{_reasons(failed)}", code=1)


@app.command(cls=SignedArguments)
def recall(
    query: Annotated[str, typer.Argument(help="What the user just said (blank: the latest of everything).")],
    agent: Annotated[
        str,
        typer.Option(
            "--agent",
            "-a",
            metavar="ID",
            help="The agent whose pack to build (any id: mapped to its node as the library does).",
            callback=check_agent_id,
        ),
    ] = "assistant",
    engine: EngineOption = None,
    root: RootOption = None,
    budget: Annotated[
        int | None,
        typer.Option(min=1, metavar="TOKENS", help="Pack budget, tokens; default MEMORY_CORE_BUDGET_TOKENS."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the ContextPack as JSON.")] = False,
    as_of: Annotated[
        str | None,
        typer.Option(
            "--as-of",
            metavar="LSN|TIME",
            help="Read the memory as it was at this LSN, or at this ISO-8601 time (engines keeping a log).",
        ),
    ] = None,
) -> None:
    """Print the pack pre_turn would inject for QUERY (nothing is logged); exit 1 when no section could be read."""
    layout = layout_for(root)
    with engine_session(engine, read_only=True) as memory_engine:
        if as_of is not None:  # a read-only view of the past (seed 002); bad values: InvalidRequest, exit 2
            with renamed_field("as_of", "lsn"):  # name the option given, not as_of's parameter
                memory_engine = memory_engine.as_of(lsn_for(memory_engine, as_of))
        policy = RecallPolicy.from_settings()
        if budget is not None:
            policy = policy.model_copy(update={"budget_tokens": budget})
        pack = AgentMemory(memory_engine, layout, agent).with_policy(policy).recall(query)
        pack_budget = policy.budget_tokens
    if as_json:
        echo_json(pack.model_dump_json(indent=2))
        _refuse_unreadable(pack, "recall")
        return
    _refuse_unreadable(pack, "recall")
    typer.echo(pack.markdown or f"(empty pack: nothing stored matches, or nothing fits in {pack_budget} tokens)")
    skipped = ", ".join(skip_wording(s) for s in pack.skipped) or "none"
    console.print(f"[dim]{pack.tokens} tokens · {len(pack.refs)} refs · skipped: {skipped}[/]")


@app.command()
def context(
    engine: EngineOption = None,
    root: RootOption = None,
    budget: Annotated[int, typer.Option(metavar="TOKENS", help="Budget, tokens.", min=1)] = 1500,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", metavar="FILE", help="Write context.md here.")
    ] = None,
) -> None:
    """Print (or write) context.md: the four briefs and the latest learnings, with frontmatter.

    Exits 1 (writing nothing) when no section could be read, or when the file cannot be written; 2 when --output
    names a folder, or a file in a folder that does not exist (no folder is created).
    """
    if output is not None:
        check_output_file(output, "--output", example="context.md")  # what only writing can tell: exit 1
    reach = layout_for(root).holistic_filter().reach
    with engine_session(engine, read_only=True) as memory_engine:
        spec = ContextSpec(budget_tokens=budget, reach=reach)
        # compile_context's own steps, keeping the pack: ContextDoc does not say which sections failed
        now = datetime.now(UTC).replace(microsecond=0)
        pack = assemble(memory_engine, context_recall(spec), generated_at=now)
    _refuse_unreadable(pack, "context")
    failed = failed_sections(pack.skipped)
    if failed:
        left = f"{plural(len(failed), 'section')} could not be read and {'is' if len(failed) == 1 else 'are'} left out"
        err_console.print(f"[yellow]{escape(left)}:\n{escape(_reasons(failed))}[/]", soft_wrap=True)
    if output is None:
        typer.echo(pack.markdown or f"(empty: nothing stored, or nothing fits in --budget {budget} tokens)")
        return
    try:
        output.write_text(pack.markdown, encoding="utf-8")
    except OSError as exc:
        raise fail(f"context: cannot write --output {output}: {exc.strerror or exc}", code=1) from None
    console.print(f"wrote {output} ({pack.tokens} tokens, {len(pack.refs)} refs)")

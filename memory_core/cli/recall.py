"""``memory-core recall QUERY`` (the pack pre_turn would inject) and ``memory-core context`` (context.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from memory_core.cli import app
from memory_core.cli._common import EngineOption, RootOption, console, fail, layout_for, open_engine_or_exit
from memory_core.errors import MemoryCoreError
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.policy import RecallPolicy
from memory_core.recall import ContextSpec, compile_context

__all__ = ["context", "recall"]


@app.command()
def recall(
    query: Annotated[str, typer.Argument(help="What the user just said (blank: the latest of everything).")],
    agent: Annotated[
        str, typer.Option("--agent", "-a", metavar="ID", help="The agent whose pack to build.")
    ] = "assistant",
    engine: EngineOption = None,
    root: RootOption = None,
    budget: Annotated[
        int | None,
        typer.Option(min=1, metavar="TOKENS", help="Pack budget, tokens; default MEMORY_CORE_BUDGET_TOKENS."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the ContextPack as JSON.")] = False,
) -> None:
    """Print the pack pre_turn would inject for QUERY (nothing is logged)."""
    memory_engine = open_engine_or_exit(engine)
    try:
        policy = RecallPolicy.from_settings()
        if budget is not None:
            policy = policy.model_copy(update={"budget_tokens": budget})
        pack = AgentMemory(memory_engine, layout_for(root), agent).with_policy(policy).recall(query)
    except MemoryCoreError as exc:
        raise fail(str(exc)) from None
    finally:
        memory_engine.close()
    if as_json:
        typer.echo(pack.model_dump_json(indent=2))
        return
    typer.echo(pack.markdown or "(empty pack: nothing stored matches)")
    skipped = ", ".join(f"{s.heading} ({s.reason})" for s in pack.skipped) or "none"
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
    """Print (or write) context.md: the four briefs and the latest learnings, with frontmatter."""
    memory_engine = open_engine_or_exit(engine)
    try:
        layout = layout_for(root)
        doc = compile_context(memory_engine, ContextSpec(budget_tokens=budget, reach=layout.holistic_filter().reach))
    except MemoryCoreError as exc:
        raise fail(str(exc)) from None
    finally:
        memory_engine.close()
    if output is None:
        typer.echo(doc.markdown or "(empty: nothing stored)")
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(doc.markdown, encoding="utf-8")
    console.print(f"wrote {output} ({doc.tokens} tokens, {len(doc.refs)} refs)")

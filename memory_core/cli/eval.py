"""``memory-core eval locomo FILE``: evidence recall of packs and top-k fetches on LoCoMo, beside BM25."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memory_core.cli import app
from memory_core.cli._common import check_output_file, console, fail
from memory_core.engines import mask_url
from memory_core.errors import MemoryCoreError
from memory_core.eval.brain import load_brain
from memory_core.eval.locomo import EVAL_CATEGORIES, EvalResult, QuestionResult, run_locomo_eval
from memory_core.replay import load_conversations
from memory_core.settings import get_settings

__all__ = ["eval_app", "locomo", "question_summary", "result_table", "sample_table"]

eval_app = typer.Typer(help="Retrieval evaluations on real data.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")


def _pct(value: float) -> str:
    return "—" if math.isnan(value) else f"{value * 100:.1f}%"


def result_table(result: EvalResult) -> Table:
    """Evidence recall per method: overall and per category, with the question counts."""
    counts = {c: len(result.tallies["pack"].per_category.get(c, [])) for c in EVAL_CATEGORIES}
    table = Table(title=f"LoCoMo evidence recall · engine {result.engine} · pack budget {result.budget_tokens} tokens")
    table.add_column("method")
    table.add_column(f"all (n={sum(counts.values())})", justify="right")
    for c in EVAL_CATEGORIES:
        table.add_column(f"cat {c} (n={counts[c]})", justify="right")
    for name, tally in result.tallies.items():
        table.add_row(name, _pct(tally.mean()), *(_pct(tally.mean(c)) for c in EVAL_CATEGORIES))
    return table


def sample_table(result: EvalResult) -> Table:
    """Evidence recall per method on each sample (conversation), over all its categories."""
    per_sample = result.per_sample()
    table = Table(title="LoCoMo evidence recall per conversation (all categories)")
    table.add_column("method")
    for sample, tallies in per_sample.items():
        table.add_column(f"{sample} (n={len(next(iter(tallies.values())).all())})", justify="right")
    for name in result.tallies:
        table.add_row(name, *(_pct(tallies[name].mean()) for tallies in per_sample.values()))
    return table


def question_summary(result: EvalResult) -> str:
    """One line: turns, questions scored, skipped by reason, category 5 left out, evidence strings repaired."""
    reasons = ", ".join(f"{n} {why}" for why, n in sorted(result.skip_reasons.items())) or "none"
    return (
        f"{result.turns} turns replayed, {result.items} turn items; {len(result.questions)} questions scored; "
        f"skipped {result.skipped_questions} ({reasons}); {result.left_out} of category 5 left out (adversarial); "
        f"evidence strings repaired {result.evidence_repaired}, unreadable {result.evidence_skipped}."
    )


@eval_app.command()
def locomo(
    file: Annotated[Path, typer.Argument(help="A LoCoMo JSON file (e.g. ../shared/data/locomo/locomo_dev.json).")],
    engine: Annotated[
        str | None,
        typer.Option("--engine", "-e", metavar="URL", help="Engine URL; default: a fresh SQLite file per sample."),
    ] = None,
    sample: Annotated[
        list[str] | None, typer.Option("--sample", metavar="ID", help="Only these sample ids (repeatable).")
    ] = None,
    budget: Annotated[int, typer.Option(metavar="TOKENS", help="Pack budget, tokens.", min=1)] = 1200,
    k: Annotated[
        list[int] | None, typer.Option("--k", metavar="K", min=1, help="Top-k sizes (repeatable); default 5, 10, 20.")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--json", metavar="FILE", help="Write results here (default var/eval/locomo.json).")
    ] = None,
    brain: Annotated[
        Path | None,
        typer.Option(
            "--brain",
            metavar="DIR",
            help="A folder of documents (e.g. ../shared/data/docs/peps) ingested into each sample's brain first.",
        ),
    ] = None,
) -> None:
    """Evidence recall of the pre_turn pack and of top-k fetches on LoCoMo, beside BM25.

    Each conversation is replayed; then, per question of categories 1-4, the share of its evidence turns held
    by the pack and by top-k fetches is measured, beside a BM25 baseline over the same turns. With --brain
    the folder's documents share the engine, as a host's brain does, and compete for the pack's budget.
    The --json path is checked (its folders created) before the replay: one that cannot be written exits 2.
    """
    ks = tuple(k) if k else (5, 10, 20)
    try:  # read the inputs before any progress bar, so a bad file is one clear error and no stray bar
        data = load_conversations(file, "locomo", sample)
        files = load_brain(brain) if brain is not None else None
    except MemoryCoreError as exc:
        raise fail(str(exc)) from None
    target = output or get_settings().var_dir / "eval" / "locomo.json"
    # before the replay, which takes minutes: a path that cannot be written exits 2 naming --json, not a traceback
    check_output_file(target, "--json", example="locomo.json", creates_folders=True, probe=True)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        task = progress.add_task("replaying", total=None)

        def on_sample(name: str, n: int) -> None:
            progress.update(task, description=f"questions of {name}", total=n, completed=0)

        def on_question(_: QuestionResult) -> None:
            progress.advance(task)

        try:
            result = run_locomo_eval(
                data,
                engine_url=engine,
                budget_tokens=budget,
                ks=ks,
                on_question=on_question,
                on_sample=on_sample,
                brain=files,
            )
        except MemoryCoreError as exc:
            raise fail(str(exc)) from None
    result.engine = mask_url(result.engine)  # the table and the JSON never show a password
    console.print(result_table(result))
    if len(result.per_sample()) > 1:
        console.print(sample_table(result))
    console.print(question_summary(result), soft_wrap=True)
    if result.brain is not None and result.questions:
        mean = sum(q.brain_bullets for q in result.questions) / len(result.questions)
        console.print(
            f"brain: {result.brain_items} documents from {result.brain} in every sample; "
            f"{mean:.2f} Brain bullets per pack on average."
        )
    try:  # checked before the run; what changed since (a full disk, a folder removed) is exit 1, no traceback
        target.write_text(json.dumps(result.to_dict(), indent=2, default=str), encoding="utf-8")
    except OSError as exc:
        raise fail(f"eval: cannot write --json {target}: {exc.strerror or exc}", code=1) from None
    console.print(f"results written to {target}", soft_wrap=True)

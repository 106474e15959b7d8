"""``memory-core demo`` (``make demo``): the main job, end to end, on the embedded default.

1. starts a worker process (server-less transport under ``var/demo`` unless a broker URL is set);
2. ingests the PEPs into the brain as ``IngestBrain`` jobs;
3. replays one LoCoMo conversation through ``AgentMemory`` (one agent per speaker), ``post_turn`` jobs queued;
4. waits while the worker builds beliefs;
5. prints, for a sample of the conversation's questions, the pack ``pre_turn`` would inject, marking the
   evidence turns it holds;
6. ends with a summary: items, beliefs, jobs run, pre_turn p50/p99, evidence recall beside BM25.

The worker is stopped on exit, on error and on Ctrl-C. Each run starts from an empty ``var/demo`` (``--keep``
keeps it).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.rule import Rule
from rich.table import Table

from memory_core.cli import app
from memory_core.cli._celery import BrokerOption
from memory_core.cli._common import console, fail
from memory_core.cli._jobs import open_monitor, open_queue, plan_ingest, submit_all
from memory_core.cli._procs import running_worker
from memory_core.engine import MemoryEngine
from memory_core.engines import open_engine
from memory_core.errors import MemoryCoreError
from memory_core.eval.baseline import Bm25Baseline
from memory_core.eval.evidence import evidence_recall, parse_evidence
from memory_core.eval.locomo import EVAL_CATEGORIES, asking_agent, pack_turns
from memory_core.explore import ExploreRequest, Facet
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.query import Hit
from memory_core.recall.types import ContextPack
from memory_core.replay import ConversationFile, load_conversations
from memory_core.replay.driver import Replayer, ReplayReport
from memory_core.settings import get_settings
from memory_core.timing import percentile

__all__ = ["demo"]


@app.command()
def demo(
    sample: Annotated[str, typer.Option(help="The LoCoMo conversation to replay.")] = "conv-26",
    questions: Annotated[int, typer.Option(help="Questions whose packs are printed.", min=0)] = 4,
    concurrency: Annotated[int, typer.Option("-c", help="Worker pool processes.", min=1)] = 2,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the background jobs.", min=1)] = 120.0,
    keep: Annotated[bool, typer.Option(help="Keep var/demo from an earlier run instead of starting empty.")] = False,
    broker: BrokerOption = None,
) -> None:
    """Run the main job end to end: a worker, the PEPs ingested, a LoCoMo conversation replayed, packs shown."""
    started = time.monotonic()
    settings = get_settings()
    data = settings.data_dir
    locomo, peps = data / "locomo" / "locomo_dev.json", data / "docs" / "peps"
    for path in (locomo, peps):
        if not path.exists():
            raise fail(
                f"demo data not found: {path} (set MEMORY_CORE_DATA_DIR to the folder holding locomo/ and docs/)"
            )
    home = (settings.var_dir / "demo").resolve()
    if home.exists() and not keep:
        shutil.rmtree(home)
    home.mkdir(parents=True, exist_ok=True)
    env = _demo_env(home, broker)
    os.environ.update(env)
    get_settings.cache_clear()
    settings = get_settings()
    transport = settings.broker_url or f"server-less (files under {home / 'broker'})"
    console.print(Rule("memory-core demo"))
    console.print(f"engine  {settings.engine}\nbroker  {transport}\nworker  log {home / 'worker.log'}")
    try:
        conversations = load_conversations(locomo, "locomo", [sample])
    except MemoryCoreError as exc:
        raise fail(str(exc)) from None
    engine = open_engine(settings.engine)
    layout = MemoryLayout(settings.layout_root)
    queue, monitor = open_queue(), open_monitor()
    try:
        with running_worker(home / "worker.log", _queues(), concurrency) as worker:
            took = worker.wait_ready(lambda: monitor.active(timeout_s=0.5) is not None, timeout_s=60)
            console.print(f"[1/5] worker pid {worker.pid} ready in {took:.1f} s (concurrency {concurrency})")
            ids = _ingest(peps, queue)
            report, replay_ids = _replay(engine, layout, conversations, queue)
            ids += replay_ids
            waited = _wait(monitor, ids, timeout)
            _show_questions(engine, layout, conversations, report, sample, questions)
            _summary(engine, conversations, report, sample, layout, waited, monitor, started)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: the worker was stopped[/]")
        raise typer.Exit(code=130) from None
    except RuntimeError as exc:
        raise fail(str(exc), code=1) from None
    finally:
        queue.close()
        monitor.close()
        engine.close()


def _demo_env(home: Path, broker: str | None) -> dict[str, str]:
    env = {"MEMORY_CORE_VAR_DIR": str(home), "MEMORY_CORE_ENGINE": f"sqlite:///{home / 'memory.db'}"}
    if broker:
        env["MEMORY_CORE_BROKER_URL"] = broker
    return env


def _queues() -> str:
    s = get_settings()
    return ",".join((s.queue_beliefs, s.queue_ingest, s.queue_maintenance))


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


def _ingest(peps: Path, queue: Any) -> list[str]:
    plan = plan_ingest([peps], source="files", collection="peps")
    ids = submit_all(queue, plan.jobs)
    console.print(
        f"[2/5] brain: {len(plan.converted)} PEPs converted, {len(ids)} ingest_brain jobs queued "
        f"({len(plan.failed)} failed)"
    )
    return ids


def _replay(
    engine: MemoryEngine, layout: MemoryLayout, conv: ConversationFile, queue: Any
) -> tuple[ReplayReport, list[str]]:
    ids: list[str] = []

    def submit(job: Any) -> object:
        ids.append(str(queue.submit(job)))
        return ids[-1]

    with _progress() as bar:
        task = bar.add_task(f"[3/5] replaying {', '.join(conv.speakers)}", total=len(conv.turns))
        replayer = Replayer(engine, layout, submit, on_turn=lambda _: bar.advance(task))
        report = replayer.replay(conv)
    console.print(
        f"      {report.turns} turns → {len(report.refs)} turn items; {report.jobs} build_beliefs jobs queued"
    )
    return report, ids


def _wait(monitor: Any, ids: list[str], timeout: float) -> Any:
    start = time.monotonic()
    with _progress() as bar:
        task = bar.add_task("[4/5] background jobs", total=len(set(ids)))

        def progress(done: int, known: int) -> None:
            bar.update(task, completed=done, total=known)

        waited = monitor.wait(ids, timeout_s=timeout, on_progress=progress)
    console.print(
        f"      {len(waited.done)} jobs done, {len(waited.failed)} failed, {len(waited.pending)} still pending "
        f"after {time.monotonic() - start:.1f} s"
    )
    return waited


def _questions(conv_qa: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``n`` questions spread over categories 1-4, in file order within each."""
    by_cat = {
        c: [q for q in conv_qa if q.get("category") == c and parse_evidence(q.get("evidence", [])).ids]
        for c in EVAL_CATEGORIES
    }
    picked: list[dict[str, Any]] = []
    while len(picked) < n and any(by_cat.values()):
        for c in EVAL_CATEGORIES:
            if by_cat[c] and len(picked) < n:
                picked.append(by_cat[c].pop(len(by_cat[c]) // 2))
    return picked


def _marked(pack: ContextPack, refs: dict[str, str], evidence: set[str]) -> str:
    """The pack's markdown with ``◀ D1:3`` after each bullet that holds an evidence turn."""
    shown = [h for s in pack.sections for h in s.hits if h.id in set(pack.refs)]
    lines = pack.markdown.splitlines()
    out: list[str] = []
    i = 0
    for line in lines:
        text = escape(line)
        if line.startswith("- ") and i < len(shown):
            held = _held(shown[i], refs) & evidence
            i += 1
            if held:
                text = f"[bold green]{text}  ◀ {', '.join(sorted(held))}[/]"
        out.append(text)
    return "\n".join(out)


def _held(hit: Hit, refs: dict[str, str]) -> set[str]:
    turns = {refs[hit.id]} if hit.id in refs else set()
    return turns | {refs[s] for s in hit.derived_from if s in refs}


def _show_questions(
    engine: MemoryEngine, layout: MemoryLayout, conv: ConversationFile, report: ReplayReport, sample: str, n: int
) -> None:
    replayer = Replayer(engine, layout, lambda job: None)
    picked = _questions(conv.qa.get(sample, []), n)
    console.print(f"[5/5] packs pre_turn would inject, for {len(picked)} of the conversation's questions")
    for q in picked:
        question, evidence = str(q["question"]), set(parse_evidence(q["evidence"]).ids)
        agent = asking_agent(question, conv.speakers)
        pack = replayer.agent(agent).recall(question)
        held = pack_turns(pack, report.refs)
        marks = " ".join(f"[green]{e} ✓[/]" if e in held else f"[red]{e} ✗[/]" for e in sorted(evidence))
        console.print(Rule())
        console.print(f"[bold]Q (category {q['category']}, asked of {agent}):[/] {escape(question)}")
        console.print(f"gold answer: {escape(str(q.get('answer')))} · evidence: {marks} · {pack.tokens} tokens")
        console.print(_marked(pack, report.refs, evidence))


def _summary(
    engine: MemoryEngine,
    conv: ConversationFile,
    report: ReplayReport,
    sample: str,
    layout: MemoryLayout,
    waited: Any,
    monitor: Any,
    started: float,
) -> None:
    replayer = Replayer(engine, layout, lambda job: None)
    bm25 = Bm25Baseline([(t.ref, t.text) for t in conv.turns if t.ref])
    ours: list[float] = []
    base: list[float] = []
    for q in conv.qa.get(sample, []):
        evidence = parse_evidence(q.get("evidence", [])).ids
        if q.get("category") not in EVAL_CATEGORIES or not evidence:
            continue
        question = str(q["question"])
        held = pack_turns(replayer.agent(asking_agent(question, conv.speakers)).recall(question), report.refs)
        ours.append(evidence_recall(evidence, held))
        base.append(evidence_recall(evidence, bm25.top(question, max(1, len(held)))))
    kinds = engine.explore(ExploreRequest(facet=Facet.KIND, scan_limit=50_000))
    stats: dict[str, Any] = getattr(engine, "stats", dict)()
    table = Table(title=f"summary · {sample} · {time.monotonic() - started:.0f} s wall", show_header=False)
    table.add_column("what")
    table.add_column("value")
    table.add_row("items", f"{kinds.total} (" + ", ".join(f"{b.value} {b.count}" for b in kinds.buckets) + ")")
    if stats:
        table.add_row("beliefs", f"{stats.get('beliefs', 0)} active, {stats.get('superseded', 0)} superseded")
    depths = monitor.queue_depths()
    table.add_row(
        "jobs run",
        f"{len(waited.done)} done, {len(waited.failed)} failed, {len(waited.pending)} pending; "
        f"queues now {', '.join(f'{k} {v}' for k, v in depths.items())}",
    )
    pre, post = report.pre_turn_ms, report.post_turn_ms
    table.add_row("pre_turn", f"p50 {percentile(pre, 50):.1f} ms · p99 {percentile(pre, 99):.1f} ms ({len(pre)} calls)")
    table.add_row("post_turn", f"p50 {percentile(post, 50):.1f} ms · p99 {percentile(post, 99):.1f} ms")
    if ours:
        table.add_row(
            "evidence recall",
            f"pack {100 * sum(ours) / len(ours):.1f}% vs BM25 with as many turns {100 * sum(base) / len(base):.1f}% "
            f"({len(ours)} questions, categories 1-4)",
        )
    console.print(Rule())
    console.print(table)

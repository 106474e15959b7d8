"""``memory-core demo`` (``make demo``): the main job, end to end, on the embedded default.

1. starts a worker process;
2. ingests the PEPs into the brain as ``IngestBrain`` jobs;
3. replays one LoCoMo conversation through ``AgentMemory`` (one agent per speaker), ``post_turn`` jobs queued;
4. waits while the worker builds beliefs;
5. prints, for a sample of the conversation's questions, the pack ``pre_turn`` would inject, marking the
   evidence turns it holds;
6. ends with a summary: items, beliefs, jobs run, pre_turn p50/p99, evidence recall beside BM25.

Self-contained: of the environment it reads only ``MEMORY_CORE_DATA_DIR`` (where the data is) and
``MEMORY_CORE_VAR_DIR`` (where ``demo/`` goes). Everything else is its own, so exported Workers variables and
real workers running beside it cannot take its jobs: the engine file, the server-less transport, the results
and the coordination store under ``var/demo/``, and queue names ``demo-beliefs``/``demo-ingest``/
``demo-maintenance``. With ``--broker URL`` (explicitly; ``MEMORY_CORE_BROKER_URL`` is not read) the queue
names and the Redis key prefix are unique to the run (``demo-<run id>-…``), so workers of a real deployment on
that Redis never see them. ``--broker`` must be a ``redis://``/``rediss://`` URL (else exit 2, naming
``--broker``), and that Redis must answer one PING within a second before anything starts (else exit 2 with
the reason); when the run ends, however it ends, what it wrote there is deleted (``_demo_broker``).

With ``--engine URL`` the demo runs on that engine instead of its own SQLite file (``memory-core cortex-double``
serves one on loopback; ``postgresql://…`` takes a fresh database, shown with its password masked);
``MEMORY_CORE_CORTEXDB_KEY`` and ``MEMORY_CORE_TINYHUMANS_TOKEN`` pass through for it.

One demo at a time: ``var/demo.lock`` is held for the run and a second demo is refused (exit 1); a
``MEMORY_CORE_VAR_DIR`` this user cannot write exits 2 naming it. The worker is
stopped (warm shutdown, see ``_procs``) on exit, on error, on Ctrl-C and on SIGTERM/SIGHUP, and "the worker was
stopped" is printed only once it has exited; an interrupted demo exits 128 + the signal number. The demo exits
1 when a background job failed or did not finish within ``--timeout``. Each run starts from an empty
``var/demo`` (``--keep`` keeps it).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.rule import Rule
from rich.table import Table

from memory_core.cli import app
from memory_core.cli._common import JobTally, console, fail, latencies, not_blank, plural
from memory_core.cli._demo_broker import broker_problem, forget_or_warn, probe_or_exit
from memory_core.cli._jobs import DOCS_PER_JOB, open_monitor, open_queue, plan_ingest
from memory_core.cli._procs import LockHeld, WorkerProcess, exclusive_lock, exit_code_of, interrupts
from memory_core.engine import MemoryEngine
from memory_core.engines import mask_url, open_host_engine
from memory_core.errors import ConfigError, MemoryCoreError
from memory_core.eval.baseline import Bm25Baseline
from memory_core.eval.evidence import evidence_recall
from memory_core.eval.locomo import asking_agent, pack_turns
from memory_core.eval.questions import read_questions, sample_questions
from memory_core.explore import ExploreRequest, Facet
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.query import Hit
from memory_core.recall.types import ContextPack
from memory_core.replay import ConversationFile, load_conversations
from memory_core.replay.driver import Replayer, ReplayReport
from memory_core.settings import get_settings

__all__ = ["DemoFigures", "demo", "demo_env", "marked_pack", "summary_rows", "verdict"]

DEMO_QUEUES = ("beliefs", "ingest", "maintenance")
"""The logical queues; the demo's are named ``demo-<queue>`` (``demo-<run id>-<queue>`` with ``--broker``)."""
KEPT_VARIABLES = frozenset(
    {"MEMORY_CORE_DATA_DIR", "MEMORY_CORE_VAR_DIR", "MEMORY_CORE_CORTEXDB_KEY", "MEMORY_CORE_TINYHUMANS_TOKEN"}
)
"""The only ``MEMORY_CORE_`` variables the demo lets through (see the module docstring)."""


@app.command()
def demo(
    sample: Annotated[str, typer.Option(metavar="ID", help="The LoCoMo conversation to replay.")] = "conv-26",
    questions: Annotated[int, typer.Option(metavar="N", help="Questions whose packs are printed.", min=0)] = 4,
    concurrency: Annotated[int, typer.Option("-c", metavar="N", help="Worker pool processes.", min=1)] = 2,
    timeout: Annotated[
        float,
        typer.Option(
            metavar="SECONDS", help="Seconds to wait for the background jobs (a loaded machine is slow).", min=1
        ),
    ] = 600.0,
    keep: Annotated[bool, typer.Option(help="Keep var/demo from an earlier run instead of starting empty.")] = False,
    broker: Annotated[
        str | None,
        typer.Option(
            "--broker",
            "-b",
            metavar="URL",
            help="Run on this Redis (redis://…) with queue names and keys unique to the run; default: server-less.",
            callback=not_blank("--broker"),
        ),
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            metavar="URL",
            help="Run on this engine (e.g. cortexdb+http://127.0.0.1:3141); default: the demo's own SQLite file.",
            callback=not_blank("--engine"),
        ),
    ] = None,
) -> None:
    """Run the main job end to end: a worker, the PEPs ingested, a LoCoMo conversation replayed, packs shown."""
    started = time.monotonic()
    settings = get_settings()
    locomo, peps = settings.data_dir / "locomo" / "locomo_dev.json", settings.data_dir / "docs" / "peps"
    for path in (locomo, peps):
        if not path.exists():
            raise fail(
                f"demo data not found: {path} (set MEMORY_CORE_DATA_DIR to the folder holding locomo/ and docs/)"
            )
    if broker is not None and (why := broker_problem(broker)) is not None:
        raise fail(why)
    var = settings.var_dir.resolve()
    with ExitStack() as held:
        try:
            held.enter_context(exclusive_lock(var / "demo.lock"))
        except LockHeld as exc:
            raise fail(
                f"another memory-core demo is running ({exc.holder}; lock {exc.path}): wait for it to end or stop it",
                code=1,
            ) from None
        except ConfigError as exc:
            raise fail(f"MEMORY_CORE_VAR_DIR {var}: {exc.message}") from None
        problem = _run(
            var / "demo", locomo, peps, sample, questions, concurrency, timeout, keep, broker, started, engine
        )
    if problem is not None:
        raise fail(problem, code=1)


def demo_env(home: Path, broker: str | None, run_id: str, engine: str | None = None) -> dict[str, str]:
    """The demo's own ``MEMORY_CORE_`` settings (see the module docstring); pure."""
    tag = f"demo-{run_id}" if broker else "demo"
    return {
        "MEMORY_CORE_VAR_DIR": str(home),
        "MEMORY_CORE_ENGINE": engine or f"sqlite:///{home / 'memory.db'}",
        "MEMORY_CORE_BROKER_URL": broker or "",
        "MEMORY_CORE_RESULT_BACKEND": "",
        "MEMORY_CORE_LAYOUT_ROOT": "root",
        "MEMORY_CORE_ENGINE_PLUGINS": "",
        "MEMORY_CORE_REDIS_PREFIX": f"memory-core-{tag}",
        **{f"MEMORY_CORE_QUEUE_{q.upper()}": f"{tag}-{q}" for q in DEMO_QUEUES},
    }


@contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """Within the block the process's ``MEMORY_CORE_`` variables are ``env`` (plus ``KEPT_VARIABLES``).

    So this process and the worker it starts read the same settings; the environment is restored after.
    """
    saved = dict(os.environ)
    for key in [k for k in os.environ if k.startswith("MEMORY_CORE_") and k not in KEPT_VARIABLES]:
        del os.environ[key]
    os.environ.update(env)
    get_settings.cache_clear()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        get_settings.cache_clear()


def _run(
    home: Path,
    locomo: Path,
    peps: Path,
    sample: str,
    n_questions: int,
    concurrency: int,
    timeout: float,
    keep: bool,
    broker: str | None,
    started: float,
    engine_url: str | None = None,
) -> str | None:
    """The demo under its lock; the reason it failed (None when every job finished)."""
    try:
        if home.exists() and not keep:
            shutil.rmtree(home)
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # another user's files, a read-only folder
        raise fail(f"cannot empty or create {home} (MEMORY_CORE_VAR_DIR/demo): {exc.strerror or exc}") from None
    run_id = uuid.uuid4().hex[:8]
    hostname = f"demo-{run_id}@%h"
    worker: WorkerProcess | None = None
    try:
        with interrupts(), _environment(demo_env(home, broker, run_id, engine_url)):
            try:
                settings = get_settings()
                conversations = load_conversations(locomo, "locomo", [sample])
                engine = open_host_engine(settings.engine)
            except MemoryCoreError as exc:
                raise fail(str(exc)) from None
            monitor = open_monitor()
            if broker is not None:
                probe_or_exit(monitor, engine)
            transport = (
                mask_url(settings.broker_url) if settings.broker_url else f"server-less (files under {home / 'broker'})"
            )
            console.print(Rule("memory-core demo"))
            shown = mask_url(settings.engine)
            console.print(f"engine  {shown}\nbroker  {transport}\nworker  log {home / 'worker.log'}")
            layout = MemoryLayout(settings.layout_root)
            queue = open_queue()
            names = (settings.queue_beliefs, settings.queue_ingest, settings.queue_maintenance)
            seen: list[str] = []
            try:
                worker = WorkerProcess(home / "worker.log", ",".join(names), concurrency, hostname)
                try:
                    node = hostname.split("@", 1)[0] + "@"
                    took = worker.wait_ready(
                        lambda: any(w.startswith(node) for w in monitor.active(timeout_s=0.5) or {}), timeout_s=60
                    )
                    console.print(f"[1/5] worker pid {worker.pid} ready in {took:.1f} s (concurrency {concurrency})")
                    ids = _ingest(peps, queue)
                    seen += ids
                    report, replay_ids = _replay(engine, layout, conversations, queue)
                    seen += replay_ids
                    waited = _wait(monitor, ids, replay_ids, timeout)
                    seen += [*waited.done, *(f.id for f in waited.failed), *waited.pending]
                    _show_questions(engine, layout, conversations, report, sample, n_questions)
                    letters = _dead_letter_count(settings)
                    _summary(engine, conversations, report, sample, layout, waited, monitor, started, letters)
                finally:
                    stopping = time.monotonic()
                    stopped = worker.stop()
                if stopped:
                    console.print(f"the worker was stopped (warm shutdown, {time.monotonic() - stopping:.1f} s)")
            finally:
                queue.close()
                monitor.close()
                engine.close()
                if broker is not None:
                    forget_or_warn(broker, settings.redis_prefix, names, seen)
    except KeyboardInterrupt as exc:
        console.print(f"[yellow]interrupted ({exc.args[0] if exc.args else 'SIGINT'}): {_worker_state(worker)}[/]")
        raise typer.Exit(code=exit_code_of(exc)) from None
    except typer.Exit:
        raise  # click's Exit is a RuntimeError: an exit already decided is not "the worker failed"
    except RuntimeError as exc:
        raise fail(f"{exc}\n{_worker_state(worker)}", code=1) from None
    if worker.alive():
        return _worker_state(worker)
    errors = [f.error or f.state for f in waited.failed]
    return verdict(errors, len(waited.pending), timeout, home / "worker.log", dead_letters=letters)


def _dead_letter_count(settings: Any) -> int:
    """Letters in the run's dead-letter store (its own, under the demo's var dir or Redis prefix)."""
    from workers.queue import open_dead_letters

    store = open_dead_letters(settings)
    try:
        return store.count()
    finally:
        store.close()


def _worker_state(worker: WorkerProcess | None) -> str:
    if worker is None:
        return "no worker was started"
    if worker.alive():
        return f"the worker (pid {worker.pid}) did not stop: kill -KILL -{worker.pid}"
    return "the worker was stopped"


def verdict(errors: Sequence[str], pending: int, timeout_s: float, log: Path, dead_letters: int = 0) -> str | None:
    """Why the demo failed, or None when every background job finished and nothing was dead-lettered; pure.

    Args:
        errors: The error of each failed job.
        pending: Jobs still unfinished when the wait ended.
        timeout_s: The wait's bound, seconds (``--timeout``).
        log: The worker's log, named in the message.
        dead_letters: Letters in the run's dead-letter store.
    """
    parts: list[str] = []
    if dead_letters:
        parts.append(f"{plural(dead_letters, 'dead letter')} (memory-core dead-letters list)")
    if errors:
        common = "; ".join(f"{n}× {e}" for e, n in Counter(errors).most_common(3))
        parts.append(f"{plural(len(errors), 'background job')} failed ({common})")
    if pending:
        parts.append(f"{plural(pending, 'background job')} did not finish within --timeout {timeout_s:g} s")
    if not parts:
        return None
    return f"{' and '.join(parts)}: the figures above are incomplete; see {log}"


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    )


def _ingest(peps: Path, queue: Any) -> list[str]:
    plan = plan_ingest([peps], source="files", collection="peps")
    tally = JobTally(queue)
    tally.submit_all(plan.jobs)
    console.print(
        f"[2/5] brain: {plural(len(plan.converted), 'file')} converted into {plural(plan.passages, 'passage')}; "
        f"{tally.describe('ingest_brain job')} (up to {DOCS_PER_JOB} passages a job; {len(plan.failed)} failed)"
    )
    return tally.ids


def _replay(
    engine: MemoryEngine, layout: MemoryLayout, conv: ConversationFile, queue: Any
) -> tuple[ReplayReport, list[str]]:
    tally = JobTally(queue)
    with _progress() as bar:
        task = bar.add_task(f"[3/5] replaying {', '.join(conv.speakers)}", total=len(conv.turns))
        replayer = Replayer(engine, layout, tally.submit, on_turn=lambda _: bar.advance(task))
        report = replayer.replay(conv)
    console.print(f"      {report.turns} turns → {len(report.refs)} turn items; {tally.describe('build_beliefs job')}")
    return report, tally.ids


def _wait(monitor: Any, ingest_ids: list[str], replay_ids: list[str], timeout: float) -> Any:
    start = time.monotonic()
    ids = list(dict.fromkeys([*ingest_ids, *replay_ids]))
    with _progress() as bar:
        task = bar.add_task("[4/5] background jobs", total=len(ids))

        def progress(done: int, known: int) -> None:
            bar.update(task, completed=done, total=known)

        waited = monitor.wait(ids, timeout_s=timeout, on_progress=progress)
    known = len(waited.done) + len(waited.failed) + len(waited.pending)
    console.print(
        f"      {len(waited.done)} jobs done, {len(waited.failed)} failed, {len(waited.pending)} still pending "
        f"after {time.monotonic() - start:.1f} s (of {known}: {len(ingest_ids)} ingest_brain, {len(replay_ids)} "
        f"build_beliefs from the replay, {plural(known - len(ids), 'build')} the ingests asked for)"
    )
    return waited


def marked_pack(pack: ContextPack, refs: Mapping[str, str], evidence: set[str]) -> str:
    """The pack's markdown (Rich-escaped) with ``◀ D1:3`` after each bullet that holds an evidence turn; pure.

    Bullets are matched, in order, with the cited hits (``pack.refs``) of the pack's sections; a belief's bullet
    holds the turns it was derived from.
    """
    cited = set(pack.refs)
    shown = [h for s in pack.sections for h in s.hits if h.id in cited]
    out: list[str] = []
    i = 0
    for line in pack.markdown.splitlines():
        text = escape(line)
        if line.startswith("- ") and i < len(shown):
            held = _held(shown[i], refs) & evidence
            i += 1
            if held:
                text = f"[bold green]{text}  ◀ {', '.join(sorted(held))}[/]"
        out.append(text)
    return "\n".join(out)


def _held(hit: Hit, refs: Mapping[str, str]) -> set[str]:
    turns = {refs[hit.id]} if hit.id in refs else set()
    return turns | {refs[s] for s in hit.derived_from if s in refs}


def _show_questions(
    engine: MemoryEngine, layout: MemoryLayout, conv: ConversationFile, report: ReplayReport, sample: str, n: int
) -> None:
    replayer = Replayer(engine, layout, lambda job: None)
    picked = sample_questions(read_questions(conv.qa.get(sample, [])).questions, n)
    console.print(f"[5/5] packs pre_turn would inject, for {len(picked)} of the conversation's questions")
    for q in picked:
        evidence = set(q.evidence.ids)
        agent = asking_agent(q.text, conv.speakers)
        pack = replayer.agent(agent).recall(q.text)
        held = pack_turns(pack, report.refs)
        marks = " ".join(f"[green]{e} ✓[/]" if e in held else f"[red]{e} ✗[/]" for e in sorted(evidence))
        console.print(Rule())
        console.print(f"[bold]Q (category {q.category}, asked of {agent}):[/] {escape(q.text)}")
        console.print(f"gold answer: {escape(str(q.answer))} · evidence: {marks} · {pack.tokens} tokens")
        console.print(marked_pack(pack, report.refs, evidence))


@dataclass(frozen=True)
class DemoFigures:
    """What the summary shows, gathered from the run (``summary_rows`` renders it).

    Attributes:
        kinds: (kind, items) per item kind, and ``items`` their total.
        beliefs: (active, superseded) beliefs, when the engine reports them.
        done / failed / pending: Background jobs by outcome.
        queues: Queue name → messages still waiting.
        pre_turn_ms / post_turn_ms: Wall time of each replayed call, milliseconds.
        pack_recall / bm25_recall: Per-question evidence recall of the pack, and of BM25 given as many turns.
        dead_letters: Letters in the run's dead-letter store (jobs or queue entries that could not run).
    """

    kinds: Sequence[tuple[str, int]]
    items: int
    beliefs: tuple[int, int] | None
    done: int
    failed: int
    pending: int
    queues: Mapping[str, int]
    pre_turn_ms: Sequence[float]
    post_turn_ms: Sequence[float]
    pack_recall: Sequence[float]
    bm25_recall: Sequence[float]
    dead_letters: int = 0


def summary_rows(f: DemoFigures) -> list[tuple[str, str]]:
    """The summary table's (what, value) rows; pure."""
    rows = [("items", f"{f.items} (" + ", ".join(f"{k} {n}" for k, n in f.kinds) + ")")]
    if f.beliefs is not None:
        rows.append(("beliefs", f"{f.beliefs[0]} active, {f.beliefs[1]} superseded"))
    depths = ", ".join(f"{k} {'?' if v < 0 else v}" for k, v in f.queues.items())
    lettered = f", {f.dead_letters} dead-lettered" if f.dead_letters else ""
    rows.append(("jobs run", f"{f.done} done, {f.failed} failed, {f.pending} pending{lettered}; queues now {depths}"))
    pre, post = f.pre_turn_ms, f.post_turn_ms
    rows.append(("pre_turn", f"{latencies(pre, sep=' · ')} ({len(pre)} calls)" if pre else latencies(pre)))
    rows.append(("post_turn", latencies(post, sep=" · ")))
    if f.pack_recall:
        ours = 100 * sum(f.pack_recall) / len(f.pack_recall)
        base = 100 * sum(f.bm25_recall) / len(f.bm25_recall)
        rows.append(
            (
                "evidence recall",
                f"pack {ours:.1f}% vs BM25 with as many turns {base:.1f}% "
                f"({plural(len(f.pack_recall), 'question')}, categories 1-4)",
            )
        )
    return rows


def _summary(
    engine: MemoryEngine,
    conv: ConversationFile,
    report: ReplayReport,
    sample: str,
    layout: MemoryLayout,
    waited: Any,
    monitor: Any,
    started: float,
    dead_letters: int,
) -> None:
    replayer = Replayer(engine, layout, lambda job: None)
    bm25 = Bm25Baseline([(t.ref, t.text) for t in conv.turns if t.ref])
    ours: list[float] = []
    base: list[float] = []
    for q in read_questions(conv.qa.get(sample, [])).questions:
        held = pack_turns(replayer.agent(asking_agent(q.text, conv.speakers)).recall(q.text), report.refs)
        ours.append(evidence_recall(q.evidence.ids, held))
        base.append(evidence_recall(q.evidence.ids, bm25.top(q.text, max(1, len(held)))))
    kinds = engine.explore(ExploreRequest(facet=Facet.KIND, scan_limit=50_000))
    stats: dict[str, Any] = getattr(engine, "stats", dict)()
    figures = DemoFigures(
        kinds=[(b.value, b.count) for b in kinds.buckets],
        items=kinds.total,
        beliefs=(int(stats.get("beliefs", 0)), int(stats.get("superseded", 0))) if stats else None,
        done=len(waited.done),
        failed=len(waited.failed),
        pending=len(waited.pending),
        queues=monitor.queue_depths(),
        pre_turn_ms=report.pre_turn_ms,
        post_turn_ms=report.post_turn_ms,
        pack_recall=ours,
        bm25_recall=base,
        dead_letters=dead_letters,
    )
    table = Table(title=f"summary · {sample} · {time.monotonic() - started:.0f} s wall", show_header=False)
    table.add_column("what")
    table.add_column("value")
    for what, value in summary_rows(figures):
        table.add_row(what, value)
    console.print(Rule())
    console.print(table)

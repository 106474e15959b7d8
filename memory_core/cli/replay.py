"""``memory-core replay FILE``: a conversation file through ``AgentMemory``, turn by turn, jobs submitted.

Formats: LoCoMo JSON (one agent per speaker), JSONL of ``{thread, role, content, at}`` and a ChatGPT export
``conversations.json`` (one agent, ``--agent``, talking with one user, ``--user``). Each turn is a
``pre_turn`` (user) or ``post_turn`` (assistant) with the file's timestamps; the jobs ``post_turn`` returns go
to the workers through ``JobQueue.submit``, or with ``--inline`` run in this process.

The summary explains its counts: ``post_turn`` asks for a belief build every ``build_beliefs_every`` turns
(and one per agent at the end), and a build identical to one still waiting shares its job, so "113 jobs
submitted, 9 queued" is expected; beliefs appear as the workers run those builds (``memory-core status``).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from memory_core.cli import app
from memory_core.cli._celery import BrokerOption, use_options
from memory_core.cli._common import (
    EngineOption,
    JobTally,
    RootOption,
    check_agent_id,
    console,
    engine_failure,
    err_console,
    fail,
    latencies,
    layout_for,
    not_blank,
    open_engine_or_exit,
    plural,
)
from memory_core.cli._jobs import open_queue
from memory_core.engine import MemoryEngine
from memory_core.errors import InvalidRequest, MemoryCoreError
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.lifecycle.runner import BackgroundRunner
from memory_core.replay import ConversationFile, load_conversations
from memory_core.replay.driver import Replayer, ReplayReport, Submit

__all__ = ["replay"]

FormatOption = Literal["locomo", "jsonl", "chatgpt"]


DEFAULT_AGENT = "assistant"
"""The agent of a chat file replayed without ``--agent``."""


def check_user_name(value: str | None) -> str | None:
    """The ``--user`` callback: exit 2 when blank or holding control characters (a name goes into beliefs)."""
    value = not_blank("--user")(value)
    if value is not None and any(unicodedata.category(ch) == "Cc" for ch in value):
        raise fail(f"--user {value[:40]!r} holds control characters: give a plain name")
    return value


@app.command()
def replay(
    file: Annotated[
        Path, typer.Argument(help="LoCoMo JSON, JSONL {thread, role, content, at}, or conversations.json.")
    ],
    fmt: Annotated[
        FormatOption | None, typer.Option("--format", metavar="locomo|jsonl|chatgpt", help="Default: detected.")
    ] = None,
    sample: Annotated[
        list[str] | None, typer.Option("--sample", metavar="ID", help="LoCoMo sample ids (repeatable).")
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            "-a",
            metavar="ID",
            help="The agent (the assistant) of chat formats; default 'assistant'. A LoCoMo file's are its speakers.",
            callback=check_agent_id,
        ),
    ] = None,
    user: Annotated[
        str | None,
        typer.Option(
            "--user",
            metavar="NAME",
            help="Who a chat file's user turns come from; default: its author name, else 'the user'.",
            callback=check_user_name,
        ),
    ] = None,
    inline: Annotated[bool, typer.Option(help="Run jobs in this process instead of queueing them.")] = False,
    engine: EngineOption = None,
    broker: BrokerOption = None,
    root: RootOption = None,
) -> None:
    """Replay a conversation file turn by turn (pre_turn and post_turn), submitting the jobs post_turn returns.

    Stopped with Ctrl-C, it says how far it got ("interrupted after N of M turns", on standard error) and exits
    130; the N turns stay logged. Replaying a file again stores each turn as the same memory: a turn still
    live is not written twice, but one retracted or rolled back since is restored, as stating it again says it
    holds again (docs/log-model.md, rule 2); its belief builds are submitted again.
    """
    use_options(engine, broker)
    try:
        conversations = load_conversations(file, fmt, sample)
    except InvalidRequest as exc:
        raise fail(f"--sample: {exc.reason}" if exc.field == "sample" else str(exc)) from None
    except MemoryCoreError as exc:
        raise fail(str(exc)) from None
    if conversations.format == "locomo":
        given = [name for name, value in (("--agent", agent), ("--user", user)) if value is not None]
        if given:
            raise fail(f"{' and '.join(given)}: a LoCoMo file's agents and users are its speakers; for chat formats")
    memory_engine = open_engine_or_exit(None)
    layout = layout_for(root)
    queue = None if inline else open_queue()
    tally = None if queue is None else JobTally(queue)
    runner = BackgroundRunner(memory_engine, layout)

    def submit(job: BuildBeliefs | IngestBrain) -> object:
        return runner.run(job) if tally is None else tally.submit(job)

    reached = _Reached()
    try:
        report = _run(conversations, memory_engine, layout, submit, agent or DEFAULT_AGENT, user, reached)
    except MemoryCoreError as exc:
        raise engine_failure(exc) from None
    except KeyboardInterrupt:
        err_console.print(f"interrupted after {reached.turns} of {len(conversations.turns)} turns", soft_wrap=True)
        raise typer.Exit(code=130) from None
    finally:
        if queue is not None:
            queue.close()
        memory_engine.close()
    jobs = f"{plural(report.jobs, 'build_beliefs job')} run" if tally is None else tally.describe("build_beliefs job")
    console.print(
        f"{plural(report.turns, 'turn')} replayed for {', '.join(report.agents)}; {jobs}; "
        f"{latencies(report.pre_turn_ms, 'pre_turn')}; {latencies(report.post_turn_ms, 'post_turn')}; "
        f"log errors {len(report.log_errors)}{_skipped(conversations)}",
        soft_wrap=True,
    )


def _skipped(conversations: ConversationFile) -> str:
    """``"; 2 messages skipped (no text: only images or files)"``, or ``""`` when the parser skipped none."""
    if not conversations.skipped:
        return ""
    return f"; {plural(conversations.skipped, 'message')} skipped (no text: only images or files)"


@dataclass
class _Reached:
    """How many turns the replay has finished (kept by ``_run``, read when it is interrupted)."""

    turns: int = 0


def _run(
    conversations: ConversationFile,
    engine: MemoryEngine,
    layout: MemoryLayout,
    submit: Submit,
    agent: str,
    user: str | None,
    reached: _Reached,
) -> ReplayReport:
    with Progress(
        TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as bar:
        task = bar.add_task("turns", total=len(conversations.turns))

        def on_turn(report: ReplayReport) -> None:
            reached.turns = report.turns
            bar.advance(task)

        replayer = Replayer(engine, layout, submit, agent_id=agent, user_name=user, on_turn=on_turn)
        return replayer.replay(conversations)

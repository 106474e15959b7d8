"""The agent memory lifecycle, offline: ``python -m memory_core.examples.agent_loop``.

Two agents (``writer`` and ``critic``) of team ``acme`` share a brain source (``notion``) on the in-memory
``ReferenceEngine``. Each turn prints the pack ``pre_turn`` read and the jobs ``post_turn`` returned; the host
queues those jobs (here: a list) and a ``BackgroundRunner`` runs them, after which the beliefs the reference
engine distilled reach the Learnings section of the next pack, each marked by its tags. The writer's second
turn in thread ``w1`` says the prompt still holds the thread from turn 1 on (``in_prompt_from=1``): its pack
brings back turn 0 and leaves out the rest. Nothing here needs a network or a model.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memory_core.engine import MemoryEngine
from memory_core.engines.reference import ReferenceEngine
from memory_core.items import ToolCallRef
from memory_core.lifecycle import (
    LEARNINGS_HEADING,
    AgentMemory,
    BackgroundJob,
    BackgroundRunner,
    Brain,
    BrainDocument,
    MemoryLayout,
    RecallPolicy,
)
from memory_core.limits import BELIEF_TAG, CONSOLIDATED_TAG
from memory_core.recall.pack import skip_wording
from memory_core.recall.types import ContextPack

__all__ = ["main"]

_START = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)
_RULE = "─" * 78

BRAIN_PAGES = (
    BrainDocument.new(
        "notion",
        "Billing runs on Postgres 16 in eu-west-1. Backups are taken hourly.",
        title="Billing architecture",
    ),
    BrainDocument.new(
        "notion",
        "Refunds are issued within five business days. Finance approves anything over 500 EUR.",
        title="Refund policy",
    ),
    BrainDocument.new(
        "notion",
        "Releases are cut from main every Tuesday. Hotfixes need two reviewers.",
        title="Release process",
    ),
)


def _banner(title: str) -> None:
    print(f"\n{_RULE}\n{title}\n{_RULE}")


_DISTILLED_TAGS = frozenset({BELIEF_TAG, CONSOLIDATED_TAG})
"""Tags of what a belief build wrote: ``belief`` (reference §1.10) or the reference engine's ``consolidated``."""


def _show_pack(pack: ContextPack) -> int:
    """Print the pack, then each Learnings bullet marked by its tags; how many of them a build distilled."""
    print(pack.markdown.rstrip() or "(empty pack)")
    skipped = ", ".join(skip_wording(s) for s in pack.skipped)
    print(f"\n  [{pack.tokens} tokens, {len(pack.refs)} refs; skipped: {skipped or 'none'}]")
    distilled = 0
    for hit in next((s.hits for s in pack.sections if s.heading == LEARNINGS_HEADING), ()):
        tags = sorted(_DISTILLED_TAGS.intersection(hit.meta.tags))
        distilled += bool(tags)
        mark = f"belief (tagged {', '.join(tags)})" if tags else "stored learning"
        print(f"  Learnings · {mark}: {hit.text[:60]}")
    return distilled


def _show_jobs(jobs: tuple[BackgroundJob, ...] | list[BackgroundJob], queue: list[BackgroundJob]) -> None:
    for job in jobs:
        print(f"  job queued: {job.to_json()}")
    if not jobs:
        print("  no job this turn")
    queue.extend(jobs)


def _turn(
    memory: AgentMemory,
    thread: str,
    index: int,
    user_text: str,
    reply: str,
    queue: list[BackgroundJob],
    tools: tuple[ToolCallRef, ...] = (),
    in_prompt_from: int = 0,
) -> int:
    """One user turn (``index``) and its reply (``index + 1``); how many Learnings bullets were beliefs."""
    at = _START + timedelta(minutes=5 * index)
    _banner(f"{memory.agent_id} · {thread} · turn {index}: {user_text}")
    if in_prompt_from:
        print(f"(the prompt still holds {thread} from turn {in_prompt_from} on: the pack leaves those turns out)\n")
    context = memory.pre_turn(
        {"thread_id": thread, "turn_index": index, "user_text": user_text, "at": at, "in_prompt_from": in_prompt_from}
    )
    distilled = _show_pack(context.pack)
    if context.log_error:
        print(f"  log failed (the pack still came back): {context.log_error}")
    report = memory.post_turn(
        {
            "thread_id": thread,
            "turn_index": index + 1,
            "assistant_text": reply,
            "tool_calls": [t.to_dict() for t in tools],
            "at": at + timedelta(minutes=1),
        }
    )
    print(f"\n  reply logged as {report.receipt.id[:12]}…")
    _show_jobs(report.jobs, queue)
    return distilled


def _run_queue(runner: BackgroundRunner, queue: list[BackgroundJob]) -> None:
    _banner(f"background: running {len(queue)} queued job(s)")
    while queue:
        job = queue.pop(0)
        report = runner.run(job.to_json())  # jobs cross processes as JSON; here we just round-trip them
        built = report.consolidation.built if report.consolidation else None
        print(f"  {job.name():<14} {report.outcome.outcome.value:<9} built={built} follow_ups={len(report.follow_ups)}")
        queue.extend(report.follow_ups)


def main(engine: MemoryEngine | None = None) -> None:
    """Run the offline session and print each pack, the jobs, and the beliefs reaching Learnings.

    Args:
        engine: The engine to run on (default: a fresh ``ReferenceEngine``; the CortexDB doubles run it too).
    """
    engine = engine if engine is not None else ReferenceEngine()
    layout = MemoryLayout("team:acme")
    policy = RecallPolicy(build_beliefs_every=2, budget_tokens=400)
    writer = AgentMemory(engine, layout, "writer").with_policy(policy)
    critic = AgentMemory(engine, layout, "critic").with_policy(policy)
    runner = BackgroundRunner(engine, layout)
    queue: list[BackgroundJob] = []

    _banner("brain: ingesting 3 notion pages")
    batch = Brain(engine, layout).ingest_many(BRAIN_PAGES)
    print(f"  stored {len(batch.receipts)} documents at {layout.brain('notion')}")
    _show_jobs(batch.jobs, queue)

    _turn(
        writer,
        "w1",
        0,
        "We are moving billing to Postgres 16 next sprint, can you plan it?",
        "Planned: the billing migration to Postgres 16 starts next sprint.",
        queue,
        tools=(ToolCallRef(name="calendar", id="cal-1"),),
    )
    _turn(
        critic,
        "c1",
        0,
        "Which database does billing use, and who approves large refunds?",
        "Billing uses Postgres 16; finance approves refunds over 500 EUR.",
        queue,
    )
    _turn(
        writer,
        "w1",
        2,
        "Who has to approve the migration plan?",
        "Finance signs off; I will ask them today.",
        queue,
        in_prompt_from=1,
    )

    _run_queue(runner, queue)

    distilled = _turn(
        writer,
        "w2",
        0,
        "Remind me which database billing is moving to.",
        "Postgres 16, next sprint.",
        queue,
    )
    print(f"\n{_RULE}\n{distilled} Learnings bullet(s) of the last pack came from the belief builds (see their tags).")
    print(f"{len(queue)} job(s) left in the queue for the next background run.")


if __name__ == "__main__":
    main()

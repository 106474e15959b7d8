"""Turning files into brain jobs, and opening the job queue: shared by ``ingest``, ``replay`` and ``demo``.

Each converted file is split into passages (``documents.split_document``: section-sized ``BrainDocument``
values titled ``"<title> › <heading>"``) before it becomes a job, so the brain ranks and shows the part of a
document that matches, not its first 600 characters. The split is deterministic, so ingesting the same file
again stores the same passages (replays), and ``Brain.forget(source)`` removes them all.

``workers`` (the only package importing Celery) is imported inside ``open_queue`` only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory_core.documents import Converted, DocumentResult, Failed, Skipped, iter_documents, split_document
from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.jobs import IngestBrain
from memory_core.limits import MAX_STORE_MANY

__all__ = ["DOCS_PER_JOB", "IngestPlan", "open_monitor", "open_queue", "plan_ingest", "submit_all"]

DOCS_PER_JOB = MAX_STORE_MANY
"""Passages (brain documents) per ``IngestBrain`` job: ``MAX_STORE_MANY``, one ``store_many`` per job, so a job
is one transaction; small enough that two workers share a folder's work (the ten PEPs make ~1,100 passages, so
12 jobs), large enough that a job is not mostly overhead. A file's passages may span two jobs."""


@dataclass
class IngestPlan:
    """Files converted into jobs, and what could not be (nothing is stored by planning).

    Attributes:
        jobs: ``IngestBrain`` jobs of up to ``DOCS_PER_JOB`` passages each.
        converted: Paths converted, in walk order.
        passages: Passages over all jobs (brain documents to store).
        failed: (path, reason) of files that could not be converted.
        skipped: (path, reason) of entries the walk skipped (hidden, unsupported).
    """

    jobs: list[IngestBrain] = field(default_factory=list)
    converted: list[Path] = field(default_factory=list)
    passages: int = 0
    failed: list[tuple[Path, str]] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def plan_ingest(
    paths: Iterable[Path | str],
    *,
    source: str | None = None,
    collection: str | None = None,
    on_file: Callable[[DocumentResult], None] | None = None,
) -> IngestPlan:
    """Convert every file under ``paths``, split each into passages, and group them into ``IngestBrain`` jobs.

    Raises:
        InvalidRequest: a blank source (per-file problems are reported in the plan, not raised).
    """
    plan = IngestPlan()
    batch: list[BrainDocument] = []
    for result in iter_documents(paths, source=source):
        if on_file is not None:
            on_file(result)
        if isinstance(result, Converted):
            plan.converted.append(result.path)
            for passage in split_document(result.document):
                plan.passages += 1
                batch.append(passage)
                if len(batch) == DOCS_PER_JOB:
                    plan.jobs.append(IngestBrain(documents=tuple(batch), collection=collection))
                    batch = []
        elif isinstance(result, Failed):
            plan.failed.append((result.path, str(result.error)))
        elif isinstance(result, Skipped):
            plan.skipped.append((result.path, result.reason))
    if batch:
        plan.jobs.append(IngestBrain(documents=tuple(batch), collection=collection))
    return plan


def open_queue() -> Any:
    """The host's ``workers.queue.JobQueue`` for the current settings."""
    from workers.queue import JobQueue

    return JobQueue()


def open_monitor() -> Any:
    """A ``workers.monitor.JobMonitor`` for the current settings."""
    from workers.monitor import JobMonitor

    return JobMonitor()


def submit_all(queue: Any, jobs: Sequence[Any]) -> list[str]:
    """Submit every job; the ids in order."""
    return [str(queue.submit(job)) for job in jobs]

"""``BackgroundRunner``: runs one ``BackgroundJob`` against an engine and reports what happened (reference §4.6).

| job | call | outcome |
| --- | --- | --- |
| ``BuildBeliefs`` | ``engine.consolidate(request)`` | started → started, scheduled → scheduled, completed → done |
| ``BuildBeliefs`` | ``Unsupported(reason)`` | skipped ``{reason}``, not an error |
| ``IngestBrain`` | ``Brain(job.root).ingest_many(documents)`` | done; the receipts, the batch's builds as follow-ups |

Any other engine error is raised to the caller (the worker decides whether to retry). Running a job twice has
the effect of running it once: stores replay and a belief build over unchanged items rebuilds the same beliefs.
The runner starts no thread or task; it runs in the caller's. A ``BuildBeliefs`` needs no layout (its request
names absolute namespaces); an ``IngestBrain`` that names a ``root`` is stored below that root, so a worker
configured for another root still places it where the host meant.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memory_core.consolidation import ConsolidateStatus
from memory_core.engine import MemoryEngine, check_engine
from memory_core.errors import InvalidRequest, Unsupported
from memory_core.lifecycle.brain import Brain
from memory_core.lifecycle.jobs import (
    BuildBeliefs,
    IngestBrain,
    JobOutcome,
    JobReport,
    OutcomeKind,
    parse_job,
)
from memory_core.lifecycle.layout import MemoryLayout, check_layout

__all__ = ["BackgroundRunner", "outcome_of"]

JobInput = BuildBeliefs | IngestBrain | Mapping[str, Any] | str | bytes
"""A job as a model, a JSON object or JSON text."""

_STATUS_OUTCOME: dict[ConsolidateStatus, OutcomeKind] = {
    ConsolidateStatus.STARTED: OutcomeKind.STARTED,
    ConsolidateStatus.SCHEDULED: OutcomeKind.SCHEDULED,
    ConsolidateStatus.COMPLETED: OutcomeKind.DONE,
}


def outcome_of(status: ConsolidateStatus) -> JobOutcome:
    """The job outcome of a consolidate receipt's status: started, scheduled, or done for completed."""
    return JobOutcome(outcome=_STATUS_OUTCOME[status])


class BackgroundRunner:
    """Runs background jobs for one layout: ``BackgroundRunner(engine, layout).run(job)``.

    Args:
        engine: Any ``MemoryEngine``.
        layout: The layout an ``IngestBrain`` without a ``root`` is placed in (a job's ``root`` wins); None:
            ``MemoryLayout()``.

    Raises:
        InvalidRequest: ``field="engine"``: not a ``MemoryEngine``; ``field="layout"``: not a ``MemoryLayout``.
    """

    __slots__ = ("engine", "layout")

    def __init__(self, engine: MemoryEngine, layout: MemoryLayout | None = None) -> None:
        self.engine = check_engine(engine)
        self.layout = check_layout(layout)

    def __repr__(self) -> str:
        return f"BackgroundRunner({self.engine.descriptor().id!r}, {self.layout!r})"

    def run(self, job: JobInput) -> JobReport:
        """Run one job and report it.

        Args:
            job: A ``BuildBeliefs`` or ``IngestBrain``, as a model, a JSON object or JSON text.

        Returns:
            ``JobReport{job, outcome, consolidation?, stored?, follow_ups?}``.

        Raises:
            InvalidRequest: a malformed job (nothing runs) or an invalid document (nothing is stored).
            MemoryCoreError: any engine error other than ``Unsupported`` on a build (for example
                ``EngineUnavailable``, which is retryable).
        """
        parsed = parse_job(dict(job) if isinstance(job, Mapping) else job)
        match parsed:
            case BuildBeliefs():
                return self._build(parsed)
            case IngestBrain():
                return self._ingest(parsed)
        raise InvalidRequest(f"no runner for a {type(parsed).__name__} job", field="job")  # pragma: no cover

    def _build(self, job: BuildBeliefs) -> JobReport:
        try:
            receipt = self.engine.consolidate(job.request)
        except Unsupported as exc:
            return JobReport(job=job, outcome=JobOutcome.skipped(exc.message))
        return JobReport(job=job, outcome=outcome_of(receipt.status), consolidation=receipt)

    def _ingest(self, job: IngestBrain) -> JobReport:
        layout = self.layout if job.root is None else MemoryLayout(job.root)
        batch = Brain(self.engine, layout).ingest_many(job.documents, collection=job.collection)
        return JobReport(job=job, outcome=JobOutcome.done(), stored=batch.receipts, follow_ups=batch.jobs)

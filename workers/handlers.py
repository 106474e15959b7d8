"""What one delivery of each job kind and maintenance task does, once ``workers.execution`` has checked it.

``handler(rt, delivery, job) -> result`` (maintenance tasks take no job): the result is the task's stored JSON;
``Deferred`` asks to come back later, a transient error to retry, anything else dead-letters (docs/jobs.md).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import Field, StrictInt

from memory_core._model import ContractModel
from memory_core.consolidation import BuildScope, ConsolidateRequest
from memory_core.errors import InvalidRequest
from memory_core.lifecycle import retention
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain, JobReport
from memory_core.namespace import Namespace, Reach
from memory_core.tools.jobs import ORDER_RETRY_S, ToolWrite, apply_tool_write
from workers.coordination import MAX_JOB_ID_CHARS, Flight, scope_key, single_flight
from workers.dead_letters import TRANSIENT, DeadLetter, keep

if TYPE_CHECKING:  # types only: workers.execution imports this module
    from workers.execution import Delivery, Runtime

__all__ = [
    "EMBED_PER_JOB",
    "MAX_SCOPES_PER_JOB",
    "BuildReport",
    "BuildScopes",
    "Deferred",
    "EmbedItems",
    "batches",
    "ScopeReport",
    "run_build",
    "run_build_scopes",
    "run_build_due",
    "run_drain",
    "run_embed",
    "run_embed_due",
    "run_ingest",
    "run_retention",
    "run_compact_log",
    "run_tool_write",
    "submit_embedding",
    "waiting",
]

log = logging.getLogger(__name__)


class Deferred(Exception):
    """Raised by a handler whose work must wait ``wait_s`` seconds: the delivery is sent again then."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"a scope may build again in {wait_s:.3f}s")
        self.wait_s = wait_s


class ScopeReport(ContractModel):
    """One scope's line of a build's stored result; ``enter`` is ``Flight.enter`` or ``done_before``."""

    namespace: str
    kinds: tuple[str, ...] | None = None
    enter: str
    passes: StrictInt | None = None
    outcome: str | None = None
    built: StrictInt | None = None
    lease_lost: bool | None = None
    letter: str | None = None

    @classmethod
    def of(cls, scope: BuildScope, flight: Flight[JobReport]) -> ScopeReport:
        """A scope's line after single flight: its last pass's outcome, the beliefs built summed."""
        last = flight.results[-1] if flight.results else None
        built = None
        if last is not None and last.consolidation is not None and last.consolidation.built is not None:
            built = sum((r.consolidation.built or 0) for r in flight.results if r.consolidation)
        return cls(
            namespace=str(scope.namespace),
            kinds=tuple(k.value for k in scope.kinds),
            enter=flight.enter.value,
            passes=len(flight.results),
            outcome=None if last is None else last.outcome.outcome.value,
            built=built,
            lease_lost=True if flight.lost else None,
        )


class BuildReport(ContractModel):
    """A ``build_beliefs`` job's result: ``{job, scopes, embedding}`` (the ``embed_items`` job it submitted, if any)."""

    job: str
    scopes: tuple[ScopeReport, ...]
    embedding: str | None = None


MAX_SCOPES_PER_JOB: Final = 64  # requests in one ``build_scopes`` message


class BuildScopes(ContractModel):
    """Several builds in one message, each scope single flight, a failing one dead-lettered alone (docs/jobs.md)."""

    job: Literal["build_scopes"] = "build_scopes"
    requests: tuple[ConsolidateRequest, ...] = Field(min_length=1, max_length=MAX_SCOPES_PER_JOB)

    def describe(self) -> str:
        """Flower's summary: ``build_scopes 2 (agent:alice, agent:bob)``."""
        reaches = ", ".join(str(r.reach.at) for r in self.requests[:3]) + (", …" if len(self.requests) > 3 else "")
        return f"build_scopes {len(self.requests)} ({reaches})"


def batches(requests: list[ConsolidateRequest]) -> list[BuildScopes]:
    """``requests`` as ``BuildScopes`` of at most ``MAX_SCOPES_PER_JOB`` each, in order (none for none)."""
    return [
        BuildScopes(requests=tuple(requests[i : i + MAX_SCOPES_PER_JOB]))
        for i in range(0, len(requests), MAX_SCOPES_PER_JOB)
    ]


def run_build(rt: Runtime, d: Delivery, job: BuildBeliefs) -> dict[str, Any]:
    """One ``consolidate`` per scope under ``job.request``, each single flight, resuming after a retry.

    Raises:
        Deferred: a scope must wait (its minimum interval, or another delivery of this job building it).
    """
    return _build(rt, d, job.job, rt.engine.scopes(job.request), alone=False)


def run_build_scopes(rt: Runtime, d: Delivery, job: BuildScopes) -> dict[str, Any]:
    """``run_build`` over each scope of ``job.requests`` once; one failing for good is dead-lettered alone.

    Its letter's id and payload: docs/jobs.md ("Batches").

    Raises:
        Deferred: as ``run_build``.
    """
    scopes = {scope_key(rt.engine_key, s): s for r in job.requests for s in rt.engine.scopes(r)}
    return _build(rt, d, job.job, scopes.values(), alone=True)


def _dead_scope(rt: Runtime, d: Delivery, unit: str, scope: BuildScope, exc: Exception) -> ScopeReport:
    letter_id = f"{d.job_id}:{unit}"
    if len(letter_id) > MAX_JOB_ID_CHARS:
        letter_id = f"scope-{unit}-{uuid.uuid4().hex}"
    args = [BuildBeliefs(request=scope.request()).to_dict()]  # the one-scope job it would have been
    message = f"scope {scope.namespace} of batch {d.job_id}: {exc}"
    letter = DeadLetter.of_call(
        letter_id, exc, args, d.kwargs, task="memory.build_beliefs", queue=d.queue, attempts=1, message=message
    )
    keep(lambda: rt.letters, letter, logging.ERROR)
    kinds = tuple(k.value for k in scope.kinds)
    return ScopeReport(namespace=str(scope.namespace), kinds=kinds, enter="acquired", outcome="dead", letter=letter.id)


def _build(rt: Runtime, d: Delivery, name: str, scopes: Iterable[BuildScope], alone: bool) -> dict[str, Any]:
    # A scope is recorded done before the next one builds, or when the delivery ends unfinished; the last of a
    # finished delivery is not: the job's done mark covers it (a round trip fewer).
    stamp = d.stamp_us
    done_before = rt.coordination.progress(d.job_id) if d.progress is None else d.progress
    reports: list[ScopeReport] = []
    waits: list[float] = []
    runner = rt.runner
    settings = rt.settings
    unrecorded: str | None = None
    try:
        for scope in scopes:
            unit = scope_key(rt.engine_key, scope)
            if unit in done_before:
                reports.append(ScopeReport(namespace=str(scope.namespace), enter="done_before"))
                continue
            if unrecorded is not None:
                rt.coordination.add_progress(d.job_id, unrecorded)
                unrecorded = None

            def one_pass(s: BuildScope = scope) -> JobReport:
                return runner.run(BuildBeliefs(request=s.request()))

            try:
                flight = single_flight(
                    rt.coordination, unit, d.job_id, stamp, settings.lock_ttl_s, one_pass, settings.build_min_interval_s
                )
            except TRANSIENT:
                raise
            except Exception as exc:
                if not alone:
                    raise
                log.exception("job %s: scope %s failed; dead-lettered alone", d.job_id, scope.namespace)
                unrecorded = unit
                reports.append(_dead_scope(rt, d, unit, scope, exc))
                continue
            if flight.deferred:
                waits.append(flight.wait_s)
                continue
            unrecorded = unit
            reports.append(ScopeReport.of(scope, flight))
        embedding = submit_embedding(rt)  # the model runs in its own job (``run_embed``)
        if waits:
            raise Deferred(max(waits))
    except BaseException:
        if unrecorded is not None:
            _record(rt, d.job_id, unrecorded)
        raise
    return BuildReport(job=name, scopes=tuple(reports), embedding=embedding).to_dict()


def _record(rt: Runtime, job_id: str, unit: str) -> None:
    try:
        rt.coordination.add_progress(job_id, unit)
    except Exception as exc:  # the error being raised matters more; the scope is rebuilt (idempotent)
        log.warning("job %s: could not record scope %s as done: %s", job_id, unit, exc)


def run_ingest(rt: Runtime, d: Delivery, job: IngestBrain) -> dict[str, Any]:
    """``Brain.ingest_many`` through the runner, then its builds: one ``build_beliefs``, or several as batches."""
    report = rt.runner.run(job)
    jobs: list[ContractModel] = [j for j in report.follow_ups if not isinstance(j, BuildBeliefs)]
    builds = [j for j in report.follow_ups if isinstance(j, BuildBeliefs)]
    jobs += builds if len(builds) == 1 else batches([b.request for b in builds])
    follow_ups = [rt.queue.submit(j) for j in jobs]
    embedding = submit_embedding(rt)
    return {"job": job.job, "stored": len(report.stored), "follow_ups": follow_ups, "embedding": embedding}


def run_build_due(rt: Runtime, d: Delivery) -> dict[str, Any]:
    """Submit the scopes under ``reach`` (the layout's) written since their build, batched: ``{scopes, due, jobs}``."""
    raw = d.kwargs.get("reach")
    reach = Reach.subtree(rt.layout.root) if raw is None else Reach.coerce(raw, "reach")
    scopes = rt.engine.scopes(ConsolidateRequest(reach=reach))
    due = [s.request() for s in scopes if s.due]
    jobs = [rt.queue.submit(batch) for batch in batches(due)]
    return {"scopes": len(scopes), "due": len(due), "jobs": jobs}


def run_drain(rt: Runtime, d: Delivery) -> dict[str, Any]:
    """Publish jobs parked in this machine's outbox; prune rows delivered more than a day ago."""
    limit = _positive(d, "limit", 1000)
    report = rt.queue.drain(limit)
    rt.queue.outbox.prune()
    return {"delivered": report.delivered, "left": report.left, "error": report.error}


def _positive(d: Delivery, name: str, default: int) -> int:
    value = d.kwargs.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidRequest("must be a positive integer", field=name)
    return value


def run_tool_write(rt: Runtime, d: Delivery, job: ToolWrite) -> dict[str, Any]:
    """Apply a queued ``learn``/``forget`` once the one queued before it for the same place has finished.

    Raises:
        Deferred: ``job.after`` has not finished, and this job is younger than ``ORDER_HOLD_S`` (issue 15 §6).
    """
    if job.after is not None and job.holds_for(datetime.now(UTC)) and not rt.coordination.is_done(job.after):
        raise Deferred(ORDER_RETRY_S)
    return apply_tool_write(rt.engine, job)


def run_retention(rt: Runtime, d: Delivery) -> dict[str, Any]:
    """Prune the logged turns under ``root`` (the layout's) by the retention settings (seed 004); ``dry_run`` plans."""
    raw_root, dry_run = d.kwargs.get("root"), d.kwargs.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise InvalidRequest("must be a boolean", field="dry_run")
    if raw_root is not None and not isinstance(raw_root, str):
        raise InvalidRequest("must be a namespace string", field="root")
    root = rt.layout.root if raw_root is None else Namespace.parse(raw_root)
    planned = retention.plan(rt.engine, root, datetime.now(UTC), retention.RetentionPolicy.from_settings(rt.settings))
    return (planned if dry_run else retention.apply(rt.engine, planned)).to_dict()


EMBED_PER_JOB: Final = 4096
"""Most items one job encodes (~7 minutes for MiniLM int8 at 10 items/s on a loaded core: inside the time limit)."""


class EmbedItems(ContractModel):
    """Encode up to ``limit`` stored items that have no vectors of the current model, oldest first.

    Storing an item never runs the model (issue 14 §3); when and how the jobs run: docs/jobs.md ("Job kinds") and
    docs/retrieval.md. An engine without ``embed_backlog`` embeds nothing.
    """

    job: Literal["embed_items"] = "embed_items"
    limit: int = Field(default=EMBED_PER_JOB, gt=0, le=EMBED_PER_JOB)

    def describe(self) -> str:
        """Flower's summary: ``embed_items up to 4096``."""
        return f"embed_items up to {self.limit}"


def waiting(engine: object) -> int:
    """Items the engine's current model has not encoded (0 for an engine that embeds nothing in the background)."""
    stats = getattr(engine, "stats", None)
    if not callable(getattr(engine, "embed_backlog", None)) or not callable(stats):
        return 0
    return int(stats().get("embedding_wait", 0))


def submit_embedding(rt: Runtime) -> str | None:
    """Submit an ``EmbedItems`` when the engine has items waiting for the model; its job id, else None."""
    return rt.queue.submit(EmbedItems()) if waiting(rt.engine) else None


def run_embed(rt: Runtime, d: Delivery, job: EmbedItems) -> dict[str, Any]:
    """Encode up to ``job.limit`` waiting items (``EmbedItems``); the next job when more wait."""
    embed = getattr(rt.engine, "embed_backlog", None)
    done = int(embed(limit=job.limit)) if callable(embed) else 0
    left = waiting(rt.engine)
    follow_up = rt.queue.submit(EmbedItems(limit=job.limit)) if left else None
    return {"job": job.job, "embedded": done, "waiting": left, "follow_up": follow_up}


def run_embed_due(rt: Runtime, d: Delivery) -> dict[str, Any]:
    """Beat's tick: an ``EmbedItems`` when items wait for the model (``{waiting, job}``)."""
    count = waiting(rt.engine)
    return {"waiting": count, "job": rt.queue.submit(EmbedItems()) if count else None}


def run_compact_log(rt: Runtime, d: Delivery) -> dict[str, Any]:
    """Compact all but the newest ``keep`` log records into the checkpoint: ``{upto, compacted}`` or ``{skipped}``.

    docs/log-model.md; an engine without a log or checkpoints is left alone.

    Raises:
        InvalidRequest: ``keep`` is not a positive integer.
    """
    keep = _positive(d, "keep", rt.settings.log_keep_records)
    engine = rt.engine
    described = engine.descriptor()
    if not described.log:
        return {"skipped": f"the engine {described.id} keeps no log"}
    compact = getattr(engine, "compact_log", None)
    if not callable(compact):
        return {"skipped": f"the engine {described.id} has no log checkpoints"}
    upto = engine.current_lsn() - keep
    if upto <= 0:
        return {"upto": upto, "compacted": 0}
    return {"upto": upto, "compacted": int(compact(upto))}

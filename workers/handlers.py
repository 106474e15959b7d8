"""The handlers of the job kinds and of the maintenance tasks: what one delivery of each does once it may run.

A handler is ``handler(rt, delivery, job) -> result`` (a JSON object, the task's stored result); the maintenance
tasks take no job (``handler(rt, delivery)``). ``workers.kinds`` names each handler in its row, and
``workers.execution`` calls it after the flow's checks (attempts, parsing, engine), so a handler holds only its
own work. It raises ``Deferred`` when its work must wait (a scope's minimum interval, or an earlier delivery of
the same job still building), a transient error to be retried, anything else to be dead-lettered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memory_core.consolidation import BuildScope, ConsolidateRequest
from memory_core.errors import InvalidRequest
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain, JobReport
from memory_core.namespace import Reach
from workers.embedding import EmbedItems, embed_once, waiting
from workers.locks import Flight, scope_key, single_flight

if TYPE_CHECKING:  # types only: workers.execution imports this module
    from workers.execution import Delivery
    from workers.runtime import Runtime

__all__ = [
    "Deferred",
    "run_build",
    "run_build_due",
    "run_drain",
    "run_embed",
    "run_embed_due",
    "run_ingest",
    "scope_report",
    "submit_embedding",
]


class Deferred(Exception):
    """Raised by a handler whose work must wait ``wait_s`` seconds: the delivery is sent again then.

    ``run_build`` raises it for a scope inside its minimum interval, and for a scope an earlier delivery of the same
    job is still building (issue 11 §2); the scopes built before it are recorded as progress, so the next delivery
    builds only the deferred ones.
    """

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"a scope may build again in {wait_s:.3f}s")
        self.wait_s = wait_s


def scope_report(scope: BuildScope, flight: Flight[JobReport]) -> dict[str, Any]:
    """One scope's line of a build's result: ``{namespace, kinds, enter, passes, outcome?, built?, lease_lost?}``."""
    out: dict[str, Any] = {
        "namespace": str(scope.namespace),
        "kinds": [k.value for k in scope.kinds],
        "enter": flight.enter.value,
        "passes": len(flight.results),
    }
    if flight.results:
        last = flight.results[-1]
        out["outcome"] = last.outcome.outcome.value
        if last.consolidation is not None and last.consolidation.built is not None:
            out["built"] = sum((r.consolidation.built or 0) for r in flight.results if r.consolidation)
    if flight.lost:
        out["lease_lost"] = True
    return out


def run_build(rt: Runtime, d: Delivery, job: BuildBeliefs) -> dict[str, Any]:
    """One ``consolidate`` per scope under ``job.request``, each single flight, resuming after a retry.

    Raises:
        Deferred: a scope must wait (its minimum interval, or another delivery of this job building it); the
            others are done and recorded.
    """
    stamp = d.kwargs.get("triggered_us")
    done_before = rt.coordination.progress(d.job_id)
    scopes: list[dict[str, Any]] = []
    waits: list[float] = []
    runner = rt.runner
    for scope in rt.engine.scopes(job.request):
        unit = scope_key(rt.engine_key, scope)
        if unit in done_before:
            scopes.append({"namespace": str(scope.namespace), "enter": "done_before"})
            continue

        def one_pass(s: BuildScope = scope) -> JobReport:
            return runner.run(BuildBeliefs(request=s.request()))

        settings = rt.settings
        flight = single_flight(
            rt.coordination, unit, d.job_id, stamp, settings.lock_ttl_s, one_pass, settings.build_min_interval_s
        )
        if flight.deferred:
            waits.append(flight.wait_s)
            continue
        rt.coordination.add_progress(d.job_id, unit)
        scopes.append(scope_report(scope, flight))
    embedding = submit_embedding(rt)  # the model runs in its own job (workers.embedding)
    if waits:
        raise Deferred(max(waits))
    return {"job": job.name(), "scopes": scopes, "embedding": embedding}


def run_ingest(rt: Runtime, d: Delivery, job: IngestBrain) -> dict[str, Any]:
    """``Brain.ingest_many`` through the runner; the batch's build jobs are submitted as follow-ups."""
    report = rt.runner.run(job)
    follow_ups = [rt.queue.submit(j) for j in report.follow_ups]
    embedding = submit_embedding(rt)
    return {"job": job.name(), "stored": len(report.stored), "follow_ups": follow_ups, "embedding": embedding}


def run_build_due(rt: Runtime, d: Delivery) -> dict[str, Any]:
    """Submit a ``BuildBeliefs`` for every scope under the reach (default: the layout) written since its build."""
    raw = d.kwargs.get("reach")
    reach = Reach.subtree(rt.layout.root) if raw is None else Reach.coerce(raw, "reach")
    scopes = rt.engine.scopes(ConsolidateRequest(reach=reach))
    due = [s for s in scopes if s.due]
    jobs = [rt.queue.submit(BuildBeliefs(request=s.request())) for s in due]
    return {"scopes": len(scopes), "due": len(due), "jobs": jobs}


def run_drain(rt: Runtime, d: Delivery) -> dict[str, Any]:
    """Publish jobs parked in this machine's outbox; prune rows delivered more than a day ago."""
    limit = d.kwargs.get("limit", 1000)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise InvalidRequest("must be a positive integer", field="limit")
    report = rt.queue.drain(limit)
    rt.queue.outbox.prune()
    return {"delivered": report.delivered, "left": report.left, "error": report.error}


def submit_embedding(rt: Runtime) -> str | None:
    """Submit an ``EmbedItems`` when the engine has items waiting for the model; its job id, else None."""
    return rt.queue.submit(EmbedItems()) if waiting(rt.engine) else None


def run_embed(rt: Runtime, d: Delivery, job: EmbedItems) -> dict[str, Any]:
    """Encode up to ``job.limit`` waiting items (``workers.embedding``); the next job when more wait."""
    out = embed_once(rt.engine, job.limit)
    out["follow_up"] = rt.queue.submit(EmbedItems(limit=job.limit)) if out["waiting"] else None
    return {"job": job.name(), **out}


def run_embed_due(rt: Runtime, d: Delivery) -> dict[str, Any]:
    """Beat's tick: an ``EmbedItems`` when items wait for the model (``{waiting, job}``)."""
    count = waiting(rt.engine)
    return {"waiting": count, "job": rt.queue.submit(EmbedItems()) if count else None}

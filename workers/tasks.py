"""The tasks: thin shells over ``workers.execution.execute``.

| task | queue | argument |
| --- | --- | --- |
| ``memory.build_beliefs`` | beliefs | the ``BuildBeliefs`` JSON; ``engine``, ``triggered_us``, ``pending`` |
| ``memory.ingest_brain`` | ingest | the ``IngestBrain`` JSON; ``engine`` |
| ``memory.build_due`` | maintenance | ``reach`` (optional, default the layout's subtree) |
| ``memory.drain_outbox`` | maintenance | ``limit`` (optional) |

Each takes ``*args, **kwargs`` so a message of the wrong shape reaches ``execute`` (and the dead letters)
instead of failing inside Celery's call. A retry, and a build deferred to its scope's minimum interval, raise
Celery's ``Retry`` (a new message with a countdown, the same task id); a dead-lettered job raises
``DeadLettered`` so Flower shows it failed.
"""

from __future__ import annotations

from typing import Any

from celery import Task

from memory_core.settings import get_settings
from workers.celery_app import app
from workers.config import TASK_BUILD_BELIEFS, TASK_BUILD_DUE, TASK_DRAIN_OUTBOX, TASK_INGEST_BRAIN
from workers.execution import DeadLettered, Delivery, Runtime, Verdict, execute
from workers.per_process import PerProcess

__all__ = ["build_beliefs", "build_due", "close_runtime", "drain_outbox", "ingest_brain", "runtime"]

_runtime: PerProcess[Runtime] = PerProcess(lambda: Runtime(get_settings()))


def runtime() -> Runtime:
    """This process's ``Runtime`` (opened on first use, and again in a forked child)."""
    return _runtime.get()


def close_runtime() -> None:
    """Close this process's ``Runtime`` (worker process shutdown)."""
    _runtime.reset(Runtime.close)


def _run(task: Task, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    request = task.request
    delivery = Delivery(
        task=str(task.name),
        job_id=str(request.id),
        args=tuple(args),
        kwargs=dict(kwargs),
        queue=(request.delivery_info or {}).get("routing_key"),
        retries=int(request.retries or 0),
    )
    outcome = execute(runtime(), delivery)
    if outcome.verdict is Verdict.RETRY:
        raise task.retry(countdown=outcome.countdown, exc=outcome.error, max_retries=None)
    if outcome.verdict is Verdict.DEFER:  # a scope's minimum interval: the same job again when it ends
        raise task.retry(countdown=outcome.countdown, max_retries=None)
    if outcome.verdict is Verdict.DEAD:
        letter = outcome.letter
        raise DeadLettered(f"{letter.error}: {letter.message}" if letter else "dead-lettered")
    return outcome.result


def _build_beliefs(self: Task, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
    """Build beliefs for every scope the job's reach admits, one single-flight ``consolidate`` each."""
    return _run(self, args, kwargs)


def _ingest_brain(self: Task, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
    """Store brain documents; submit the batch's build jobs."""
    return _run(self, args, kwargs)


def _build_due(self: Task, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
    """Submit a BuildBeliefs per scope written since its last build (beat)."""
    return _run(self, args, kwargs)


def _drain_outbox(self: Task, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
    """Publish jobs parked in this machine's outbox (beat)."""
    return _run(self, args, kwargs)


_app: Any = app  # Celery's task decorator is untyped
build_beliefs = _app.task(name=TASK_BUILD_BELIEFS, bind=True)(_build_beliefs)
ingest_brain = _app.task(name=TASK_INGEST_BRAIN, bind=True)(_ingest_brain)
build_due = _app.task(name=TASK_BUILD_DUE, bind=True)(_build_due)
drain_outbox = _app.task(name=TASK_DRAIN_OUTBOX, bind=True)(_drain_outbox)

"""The Celery app, built from settings: ``celery -A workers.celery_app worker|beat|flower``.

Every task is one thin shell over ``workers.execution.execute`` taking ``*args, **kwargs``, so a message of the
wrong shape reaches the flow and its dead letters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Celery, Task

from memory_core.settings import Settings, get_settings
from workers import signals
from workers.config import celery_config
from workers.execution import DeadLettered, Delivery, Verdict, execute, runtime
from workers.kinds import JOB_KINDS, JobKinds

__all__ = ["app", "create_app", "run_task"]


def run_task(task: Task, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """Run one delivery of ``task`` through the flow: its result, or Celery's ``Retry``, or ``DeadLettered``."""
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
    if outcome.verdict in (Verdict.RETRY, Verdict.DEFER):  # max_retries=None: the flow counts attempts
        raise task.retry(countdown=outcome.countdown, exc=outcome.error, max_retries=None)  # a deferral: no error
    if outcome.verdict is Verdict.DEAD:
        letter = outcome.letter
        raise DeadLettered(f"{letter.error}: {letter.message}" if letter else "dead-lettered")
    return outcome.result


def _shell(doc: str) -> Callable[..., dict[str, Any] | None]:
    def task(self: Task, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        return run_task(self, args, kwargs)

    task.__doc__ = doc
    return task


def create_app(settings: Settings, kinds: JobKinds = JOB_KINDS) -> Celery:
    """A worker-side Celery app with a task per job kind and maintenance task, its signals connected.

    Raises:
        ConfigError: time settings that break ``workers.config.check_timeouts``.
    """
    celery = Celery("memory-core")
    celery.conf.update(celery_config(settings, kinds))
    registry: Any = celery  # Celery's task decorator is untyped
    options = {"bind": True, "shared": False, "max_retries": None}
    for kind in kinds:
        registry.task(name=kind.task, **options)(_shell(f"Run a {kind.tag} job ({kind.model.__name__})."))
    for task in kinds.maintenance:
        registry.task(name=task.task, **options)(_shell(f"{task.handler.__doc__}"))
    signals.connect()
    return celery


app = create_app(get_settings())

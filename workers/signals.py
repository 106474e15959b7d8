"""Celery signal handlers, connected by ``connect()`` (``workers.celery_app.create_app``).

Start-up checks (exit 2 with the reason), the outbox drained when a worker is ready, the runtime closed at process
shutdown, and dead letters for what Celery rejects or the flow did not handle (a hard time limit).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, NoReturn

from celery import signals
from celery.worker.consumer import consumer as celery_consumer

from memory_core.errors import ConfigError
from memory_core.settings import get_settings
from workers.config import prepare
from workers.dead_letters import DeadLetter
from workers.execution import DeadLettered, close_runtime, open_worker_engine
from workers.monitor import require_broker
from workers.queue import JobQueue
from workers.transport import attempts_of, dead_letter, letter_id, refuse

__all__ = ["BROKER_CHECK_TIMEOUT_S", "check_broker", "connect", "expected_letter", "open_engine_at_start"]

log = logging.getLogger(__name__)

BROKER_CHECK_TIMEOUT_S = 5.0  # bound on the start-up probe of the broker (Celery waits out an unreachable one)
_CONSUMER_LETTERED = frozenset(  # Celery 5's consumer reports about a message that is then dead-lettered
    {
        celery_consumer.UNKNOWN_TASK_ERROR,
        celery_consumer.INVALID_TASK_ERROR,
        celery_consumer.UNKNOWN_FORMAT,
        celery_consumer.MESSAGE_DECODE_ERROR,  # after ``workers.transport.Consumer`` refused it
    }
)
LETTER_LOGGERS = ("celery.app.trace", "celery.worker.consumer.consumer")


def expected_letter(record: logging.LogRecord) -> bool:
    """A log filter: False for the tracebacks and body dumps Celery logs beside a dead letter already logged."""
    exc = record.exc_info[1] if record.exc_info else None
    if record.name == "celery.app.trace" and isinstance(exc, DeadLettered):
        return False
    return not (record.name == "celery.worker.consumer.consumer" and record.msg in _CONSUMER_LETTERED)


def _stop(role: str, what: str, exc: ConfigError) -> NoReturn:
    # Celery's signal dispatch swallows an Exception: SystemExit stops the process
    log.critical("%s: %s", what, exc)
    print(f"memory-core {role}: ConfigError: {exc}", file=sys.stderr, flush=True)
    raise SystemExit(2) from None


def make_folders(**_: Any) -> None:
    """Create the server-less transport's folders under ``var_dir`` before the first connection."""
    prepare(get_settings())


def open_engine_at_start(**_: Any) -> None:
    """Open and close the engine once at worker start: a misconfigured one stops the worker (one away is logged).

    Raises:
        SystemExit: status 2, after ``memory-core worker: ConfigError: …`` on stderr.
    """
    try:
        engine = open_worker_engine(get_settings())
    except ConfigError as exc:
        _stop("worker", "the engine is misconfigured", exc)
    except Exception as exc:
        log.warning("the engine could not be opened at worker start (its jobs will retry): %s", exc)
        return
    try:
        engine.close()
    except Exception as exc:
        log.warning("closing the start-up check's engine failed: %s", exc)


def check_broker(sender: Any = None, **_: Any) -> None:
    """Stop a worker or beat whose broker refuses its configuration (issue 11 §4) rather than retry forever.

    Raises:
        SystemExit: status 2, after ``memory-core worker: ConfigError: broker redis://:***@…: …`` on stderr.
    """
    try:
        require_broker(get_settings(), BROKER_CHECK_TIMEOUT_S)
    except ConfigError as exc:
        _stop("beat" if type(sender).__name__ == "Service" else "worker", "the broker refuses this configuration", exc)


def drain_on_start(sender: Any = None, **_: Any) -> None:
    """Drain the outbox once when a worker is ready (never raises)."""
    try:
        queue = JobQueue(get_settings())
        try:
            report = queue.drain()
        finally:
            queue.close()
        if report.delivered or report.error:
            log.info(
                "outbox at worker start: %d published, %d left, error=%s", report.delivered, report.left, report.error
            )
    except Exception as exc:
        log.warning("outbox drain at worker start failed: %s", exc)


def unknown_task(
    sender: Any = None, message: Any = None, exc: Any = None, name: Any = None, id: Any = None, **_: Any
) -> None:
    """Dead-letter a message for a task this worker does not have."""
    task = str(name) if name else None
    refuse(message, "NotRegistered", message_text=f"no task named {name!r}", kind="unknown", job_id=id, task=task)


def rejected(sender: Any = None, message: Any = None, exc: BaseException | None = None, **_: Any) -> None:
    """Dead-letter a message Celery rejected before running it."""
    text = str(exc) if exc is not None else "not a task message"
    refuse(message, exc if exc is not None else "Rejected", message_text=text, kind="rejected")


def failed(
    sender: Any = None,
    task_id: Any = None,
    exception: BaseException | None = None,
    args: Any = None,
    kwargs: Any = None,
    **_: Any,
) -> None:
    """Dead-letter a failure the flow did not handle (the flow's own dead letters raise ``DeadLettered``)."""
    if isinstance(exception, DeadLettered):
        return
    try:
        call_args = list(args) if isinstance(args, list | tuple) else []
    except Exception:  # the arguments of an undecodable body raise when read
        call_args = []
    try:
        call_kwargs = dict(kwargs) if isinstance(kwargs, dict) else {}
    except Exception:
        call_kwargs = {}
    jid = letter_id(task_id, "failed")
    error = exception if exception is not None else "Failed"
    task = getattr(sender, "name", None)
    dead_letter(DeadLetter.of_call(jid, error, call_args, call_kwargs, task=task, attempts=attempts_of(jid)))


def connect() -> None:
    """Attach the log filter and connect the handlers (connecting twice is harmless)."""
    for name in LETTER_LOGGERS:
        logging.getLogger(name).addFilter(expected_letter)  # one function: never added twice
    hub: Any = signals  # Celery's signals are untyped
    for signal, handler in (
        (hub.worker_init, make_folders),
        (hub.worker_init, check_broker),
        (hub.worker_init, open_engine_at_start),
        (hub.beat_init, check_broker),
        (hub.beat_init, make_folders),
        (hub.worker_ready, drain_on_start),
        (hub.worker_process_shutdown, close_runtime),
        (hub.task_unknown, unknown_task),
        (hub.task_rejected, rejected),
        (hub.task_failure, failed),
    ):
        signal.connect(handler)

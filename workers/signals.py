"""Celery signal handlers: outbox drain at worker start, dead letters for what never reached a task body.

| signal | handler |
| --- | --- |
| ``worker_init``, ``beat_init`` | create the server-less folders under ``var_dir`` (no-op on Redis) |
| ``worker_init`` | open the engine once (plugins applied): a ``ConfigError`` stops the worker, exit status 2 |
| ``worker_init``, ``beat_init`` | probe the broker once: a refused configuration (issue 11 §4) stops it, status 2 |
| ``worker_ready`` | drain this machine's outbox once (jobs a host parked while Redis was down) |
| ``worker_process_shutdown`` | close the process's engine and connections |
| ``task_unknown`` | dead-letter a message naming a task no worker has |
| ``task_rejected`` | dead-letter a message Celery could not read as a task (bad shape, foreign content type) |
| ``task_failure`` | dead-letter any failure the flow did not handle itself (a hard time limit, an undecodable body) |

Each dead letter is logged once, as one warning line with its id and reason (``transport.dead_letter``; the flow's
own letters: ``execution``). What Celery and the consumer would add about the same message, a traceback and a
dump of the body the letter already keeps, is dropped by ``ExpectedLetters``, a filter on the loggers that
write it; tracebacks of unexpected errors (a job that raised, a hard time limit) are kept.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

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

__all__ = ["ExpectedLetters", "check_broker", "connect", "open_engine_at_start"]

log = logging.getLogger(__name__)

_CONSUMER_LETTERED = frozenset(
    {
        celery_consumer.UNKNOWN_TASK_ERROR,  # on_unknown_task, then task_unknown: ``unknown_task`` below
        celery_consumer.INVALID_TASK_ERROR,  # on_invalid_task, then task_rejected: ``rejected`` below
        celery_consumer.UNKNOWN_FORMAT,  # on_unknown_message, then task_rejected: ``rejected`` below
        celery_consumer.MESSAGE_DECODE_ERROR,  # on_decode_error, after ``workers.transport.Consumer`` refused it
    }
)
"""Celery's consumer messages (celery 5.x ``worker/consumer/consumer.py``) about a message that is then
dead-lettered: each comes with a traceback or a dump of the body, which the letter keeps."""


class ExpectedLetters(logging.Filter):
    """Drop the records that repeat, with a traceback, a dead letter already logged on one line.

    * ``celery.app.trace``: "Task … raised unexpected: DeadLettered(…)" with the traceback of the raise in
      ``workers.tasks`` (the flow dead-lettered the job and logged it);
    * ``celery.worker.consumer.consumer``: the unknown-task, invalid-task, unknown-message and decode-error
      reports (``_CONSUMER_LETTERED``), each followed by a signal or consumer hook that dead-letters it;

    Everything else passes, every unexpected error's traceback included. Attached to those loggers (a
    logger's filters see the records created on it), so it needs no handler and holds in forked children.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a record that only repeats a dead letter (see the class docstring)."""
        exc = record.exc_info[1] if record.exc_info else None
        if record.name == "celery.app.trace" and isinstance(exc, DeadLettered):
            return False
        return not (record.name == "celery.worker.consumer.consumer" and record.msg in _CONSUMER_LETTERED)


EXPECTED_LETTERS = ExpectedLetters()
"""The one filter instance (``Logger.addFilter`` does not add the same one twice)."""
LETTER_LOGGERS = ("celery.app.trace", "celery.worker.consumer.consumer")
"""The loggers ``EXPECTED_LETTERS`` is attached to."""


def make_folders(**_: Any) -> None:
    """Create the server-less transport's folders under ``var_dir`` before the first connection."""
    prepare(get_settings())


def open_engine_at_start(**_: Any) -> None:
    """Open the configured engine once in the worker's main process, before any child starts, then close it.

    A misconfigured engine (an unknown scheme, a malformed ``engine_plugins`` entry, a plugin target that cannot
    be imported) would otherwise let the worker start and dead-letter every job as ``ConfigError``; here it
    stops the worker with the reason. Celery's signal dispatch logs and swallows ``Exception``s, so the stop is
    a ``SystemExit`` (status 2, as the ``memory-core`` CLI exits on a ``MemoryCoreError``; the message on
    stderr). An engine that is only unavailable now is no reason to
    refuse to start (its jobs retry): that is logged. The children open their own engine on first use (an open
    in ``worker_process_init`` would race billiard's 4 s process start-up timeout).

    Raises:
        SystemExit: status 2, after ``memory-core worker: ConfigError: …`` on stderr.
    """
    try:
        engine = open_worker_engine(get_settings())
    except ConfigError as exc:
        log.critical("the engine is misconfigured: %s", exc)
        print(f"memory-core worker: ConfigError: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    except Exception as exc:
        log.warning("the engine could not be opened at worker start (its jobs will retry): %s", exc)
        return
    try:
        engine.close()
    except Exception as exc:
        log.warning("closing the start-up check's engine failed: %s", exc)


BROKER_CHECK_TIMEOUT_S = 5.0
"""Bound on the start-up probe of the broker, seconds (an unreachable broker is waited out by Celery)."""


def check_broker(sender: Any = None, **_: Any) -> None:
    """Stop a worker or beat whose broker refuses its configuration (issue 11 §4), with status 2 and the reason.

    A wrong or missing password, or TLS on one side only, would otherwise read as an outage, retried forever.

    Raises:
        SystemExit: status 2, after ``memory-core worker: ConfigError: broker redis://:***@…: …`` on stderr.
    """
    try:
        require_broker(get_settings(), BROKER_CHECK_TIMEOUT_S)
    except ConfigError as exc:
        role = "beat" if type(sender).__name__ == "Service" else "worker"
        log.critical("the broker refuses this configuration: %s", exc)
        print(f"memory-core {role}: ConfigError: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


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


def close_process(**_: Any) -> None:
    """Close the worker process's runtime."""
    close_runtime()


def unknown_task(
    sender: Any = None, message: Any = None, exc: Any = None, name: Any = None, id: Any = None, **_: Any
) -> None:
    """Dead-letter a message for a task this worker does not have."""
    refuse(
        message,
        "NotRegistered",
        message_text=f"no task named {name!r}",
        kind="unknown",
        job_id=id,
        task=str(name) if name else None,
    )


def rejected(sender: Any = None, message: Any = None, exc: BaseException | None = None, **_: Any) -> None:
    """Dead-letter a message Celery rejected before running it."""
    refuse(
        message,
        exc if exc is not None else "Rejected",
        message_text=str(exc) if exc is not None else "not a task message",
        kind="rejected",
    )


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
    """Attach the log filter and connect the handlers (called by ``workers.celery_app.create_app``).

    Connecting twice is harmless: Celery keeps one connection per receiver.
    """
    for name in LETTER_LOGGERS:
        logging.getLogger(name).addFilter(EXPECTED_LETTERS)
    hub: Any = signals  # Celery's signals are untyped
    hub.worker_init.connect(make_folders)
    hub.worker_init.connect(check_broker)
    hub.worker_init.connect(open_engine_at_start)
    hub.beat_init.connect(check_broker)
    hub.beat_init.connect(make_folders)
    hub.worker_ready.connect(drain_on_start)
    hub.worker_process_shutdown.connect(close_process)
    hub.task_unknown.connect(unknown_task)
    hub.task_rejected.connect(rejected)
    hub.task_failure.connect(failed)

"""The worker's consumer: Celery's, plus a dead letter for every message it cannot turn into a task request.

Two gaps in Celery 5.7's consumer (``celery/worker/consumer/consumer.py``) stop a whole worker on one bad message:

* ``create_task_handler``'s ``on_task_received`` catches only ``InvalidTaskError``, ``ContentDisallowed`` and
  ``DecodeError`` around the task strategy. Anything else raised while the request is built (a body that is JSON
  ``null`` → ``TypeError``; a JSON object → ``ValueError``, not enough values to unpack; a ``timelimit`` header
  ``"xx"``, which fails only when the pool starts the job) reaches the event loop as "Unrecoverable error" and
  the worker exits. The message is in Redis's unacked hash by then, so it is restored as the worker dies and
  kills every worker that starts after it (a crash loop, seen by the issue 5 audit).
* ``on_decode_error`` logs and acks an undecodable body, with no signal to hook.

``Consumer`` wraps the task handler: headers the pool would choke on later are refused first
(``workers.poison.header_problem``), and any exception other than a broker connection error is dead-lettered
with the raw message and its reason (``workers.poison.refuse``); either way the message is acked, so the worker
keeps serving. Connection errors still propagate: Celery reconnects and the message stays unacked for redelivery.
``worker_consumer`` in ``workers.config`` selects this class.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery.worker.consumer import Consumer as CeleryConsumer

from workers.poison import header_problem, refuse

__all__ = ["Consumer"]

log = logging.getLogger(__name__)


class Consumer(CeleryConsumer):  # type: ignore[misc]
    """Celery's consumer; a message that cannot become a task request is dead-lettered and acked."""

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        """Celery's ``on_task_received``, guarded: see the module docstring."""
        handle: Callable[[Any], Any] = super().create_task_handler(*args, **kwargs)
        connection_errors: tuple[type[BaseException], ...] = tuple(self.connection_errors or ())

        def on_task_received(message: Any) -> Any:
            try:
                problem = header_problem(getattr(message, "headers", None))
                if problem is not None:  # would fail later, in the pool, beyond this guard
                    refuse(message, "MalformedMessage", message_text=f"not a task message: {problem}")
                    message.ack_log_error(log, connection_errors)
                    return None
                return handle(message)
            except connection_errors:
                raise
            except Exception as exc:
                log.debug("message refused, not a task request", exc_info=True)  # the letter logs the reason
                refuse(message, exc)
                if not getattr(message, "acknowledged", False):
                    message.ack_log_error(log, connection_errors)
                return None

        return on_task_received

    def on_decode_error(self, message: Any, exc: BaseException) -> None:
        """Dead-letter an undecodable message, then log and ack it as Celery does."""
        refuse(message, exc)
        super().on_decode_error(message, exc)

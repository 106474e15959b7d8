"""The worker's consumer: Celery's, plus a dead letter for every message body it cannot decode.

Celery logs an undecodable body ("Can't decode message body") and acks it, with no signal to hook; this
subclass keeps a dead letter first (``worker_consumer`` in ``workers.config``).
"""

from __future__ import annotations

from typing import Any

from celery.worker.consumer import Consumer as CeleryConsumer

from workers.dead_letters import DeadLetter
from workers.poison import dead_letter

__all__ = ["Consumer"]


class Consumer(CeleryConsumer):  # type: ignore[misc]
    """Celery's consumer; ``on_decode_error`` dead-letters the message, then behaves as Celery's (ack, log)."""

    def on_decode_error(self, message: Any, exc: BaseException) -> None:
        """Dead-letter an undecodable message, then log and ack it as Celery does."""
        headers = message.headers if isinstance(getattr(message, "headers", None), dict) else {}
        info = getattr(message, "delivery_info", None)
        dead_letter(
            DeadLetter.of(
                str(headers.get("id") or "undecodable"),
                exc,
                payload=getattr(message, "body", None),
                task=headers.get("task"),
                queue=info.get("routing_key") if isinstance(info, dict) else None,
            )
        )
        super().on_decode_error(message, exc)

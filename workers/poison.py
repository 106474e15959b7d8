"""Poison messages: what a worker does with a message that can never become a task call.

kombu decodes each raw queue entry with ``json.loads`` inside the worker's event loop; an entry that is not
JSON, or JSON that is not a message envelope, raises there and stops the whole worker ("Unrecoverable
error: JSONDecodeError", verified on kombu 5.7 by pushing text onto the queue list). The guarded transports
(``workers.transport``) check each entry with ``envelope_problem`` and hand the bad ones to
``dead_letter_raw`` instead. Envelopes that are well formed but name an unknown task, carry a foreign content
type or cannot be decoded reach Celery, which rejects them; ``workers.signals`` dead-letters those.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
from typing import Any

from memory_core.settings import get_settings
from workers.dead_letters import DeadLetter, DeadLetterStore
from workers.per_process import PerProcess

__all__ = ["dead_letter", "dead_letter_raw", "envelope_problem", "letters"]

log = logging.getLogger(__name__)


def _open_letters() -> DeadLetterStore:
    from workers.stores import open_dead_letters

    return open_dead_letters(get_settings())


_letters: PerProcess[DeadLetterStore] = PerProcess(_open_letters)


def letters() -> DeadLetterStore:
    """This process's dead-letter store (opened from settings on first use, again after a fork)."""
    return _letters.get()


def dead_letter(letter: DeadLetter) -> None:
    """Keep a dead letter; if the store is unreachable, log the letter whole so it is not lost silently."""
    try:
        letters().put(letter)
        log.error("dead letter %s (%s): %s: %s", letter.id, letter.task, letter.error, letter.message)
    except Exception as exc:
        log.critical("dead-letter store unreachable (%s); letter: %s", exc, letter.to_json())


def envelope_problem(message: Any) -> str | None:
    """Why a decoded queue entry is not a kombu message envelope, or None when it is one.

    Checks what kombu's virtual ``Message`` and Celery's consumer read without guarding: an object with a
    ``properties`` object holding a ``delivery_tag``; optional ``headers``/``delivery_info`` objects; string
    ``content-type``/``content-encoding``; a base64 ``body`` that decodes; and a task message's string ``id``.
    """
    if not isinstance(message, dict):
        return f"the entry is a JSON {type(message).__name__}, not a message object"
    props = message.get("properties")
    if not isinstance(props, dict) or "delivery_tag" not in props:
        return "no properties.delivery_tag"
    if props.get("delivery_info") is not None and not isinstance(props.get("delivery_info"), dict):
        return "properties.delivery_info is not an object"
    headers = message.get("headers")
    if headers is not None and not isinstance(headers, dict):
        return "headers is not an object"
    for field in ("content-type", "content-encoding"):
        if message.get(field) is not None and not isinstance(message.get(field), str):
            return f"{field} is not a string"
    body = message.get("body")
    if body is not None and not isinstance(body, str):
        return "body is not a string"
    if body and props.get("body_encoding") == "base64":
        try:
            base64.b64decode(body)
        except (binascii.Error, ValueError):
            return "body is not valid base64"
    if isinstance(headers, dict) and "task" in headers and not isinstance(headers.get("id"), str):
        return "a task message without a string headers.id"
    return None


def dead_letter_raw(raw: Any, queue: str | None, reason: str) -> None:
    """Dead-letter a queue entry that never reached Celery (kept as text when it is not JSON)."""
    headers = raw.get("headers") if isinstance(raw, dict) else None
    job_id = headers.get("id") if isinstance(headers, dict) and isinstance(headers.get("id"), str) else None
    task = headers.get("task") if isinstance(headers, dict) and isinstance(headers.get("task"), str) else None
    letter = DeadLetter.of(
        job_id or f"raw-{os.urandom(8).hex()}",
        "MalformedMessage",
        payload=raw,
        task=task,
        queue=queue,
        message=f"not a message: {reason}",
    )
    dead_letter(letter)

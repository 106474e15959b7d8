"""Poison messages: what a worker does with a message that can never become a task call.

kombu decodes each raw queue entry with ``json.loads`` inside the worker's event loop; an entry that is not
JSON, or JSON that is not a message envelope, raises there and stops the whole worker ("Unrecoverable
error: JSONDecodeError", verified on kombu 5.7 by pushing text onto the queue list; an entry nested 100,000
levels deep raises ``RecursionError`` the same way). The guarded transports (``workers.transport``) check each
entry with ``envelope_problem`` and hand the bad ones to ``dead_letter_raw`` instead. Envelopes that are well
formed but cannot become a task request (a body of JSON ``null``, a junk ``timelimit`` header) are refused by
``Consumer`` (below, through ``refuse``); those that name an unknown task or carry a foreign
content type reach Celery, which rejects them; ``workers.signals`` dead-letters those (through ``refuse`` too).

Every letter written here is kept under the message's task id when ``workers.kinds.check_job_id`` accepts it
(so ``requeue`` can publish the job again under it), else under a unique generated id (``letter_id``), so two
such letters never replace each other; it records the attempts the coordination store counted for the job
(``attempts_of``), 0 when it never started.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from celery.worker.consumer import Consumer as CeleryConsumer

from memory_core.errors import InvalidRequest
from workers.dead_letters import DeadLetter, keep
from workers.execution import runtime
from workers.kinds import check_job_id

__all__ = [
    "BODY_ENCODINGS",
    "Consumer",
    "attempts_of",
    "dead_letter",
    "dead_letter_raw",
    "envelope_problem",
    "header_problem",
    "letter_id",
    "message_payload",
    "refuse",
]

log = logging.getLogger(__name__)

BODY_ENCODINGS = frozenset({"base64"})
"""``properties.body_encoding`` codecs of kombu's virtual channel (``Channel.codecs``, looked up as given; a blank
value or ``utf-8`` in any case means the body is plain text: ``Channel.decode_body`` in
``kombu/transport/virtual/base.py``); any other value makes ``Message()`` raise ``AttributeError``."""


def letter_id(candidate: Any, kind: str) -> str:
    """``candidate`` when it can name a job (``workers.kinds.check_job_id``), else ``<kind>-<32 hex digits>``.

    One rule for both: a letter kept under an id ``check_job_id`` refuses (too long, control characters) could
    never be requeued, since publishing the job again under its id is refused. A message without a task id
    must not share a fixed id ("unknown", "undecodable") with every other one: a dead letter replaces the one
    with its id.
    """
    try:
        return check_job_id(candidate)
    except InvalidRequest:
        return f"{kind}-{uuid.uuid4().hex}"


def attempts_of(job_id: str) -> int:
    """How many times the flow started ``job_id`` (the coordination store's count); 0 if unknown or unreadable."""
    try:
        return runtime().coordination.attempts(job_id)
    except Exception as exc:  # a letter is still written; the count is only unknown
        log.warning("attempts of %s unknown: %s", job_id, exc)
        return 0


def dead_letter(letter: DeadLetter) -> None:
    """Keep a dead letter in this process's ``Runtime`` store, logged as one warning line (``dead_letters.keep``)."""
    keep(lambda: runtime().letters, letter)


_UNREAD = object()


def _decoded(message: Any) -> tuple[Any, Any]:
    """A message's body (bytes as text) and its JSON value (``_UNREAD`` unless JSON that decodes)."""
    body = getattr(message, "body", None)
    if isinstance(body, bytes | bytearray):
        body = bytes(body).decode("utf-8", errors="replace")
    if getattr(message, "content_type", None) == "application/json" and isinstance(body, str):
        try:
            return body, json.loads(body)
        except (ValueError, RecursionError):
            pass
    return body, _UNREAD


def message_payload(message: Any) -> Any:
    """A message's payload for its dead letter: the job JSON when the body is ``[[job], {…}, {…}]``."""
    body, decoded = _decoded(message)
    if decoded is _UNREAD:
        return body
    if isinstance(decoded, list) and decoded and isinstance(decoded[0], list) and len(decoded[0]) == 1:
        return decoded[0][0]
    return decoded


def message_engine(message: Any) -> str | None:
    """The ``engine`` keyword argument of a task message body ``[args, {"engine": …}, embed]``, if any."""
    decoded = _decoded(message)[1]
    kwargs = decoded[1] if isinstance(decoded, list) and len(decoded) > 1 else None
    engine = kwargs.get("engine") if isinstance(kwargs, dict) else None
    return engine if isinstance(engine, str) else None


def refuse(
    message: Any,
    exc: BaseException | str,
    *,
    message_text: str | None = None,
    kind: str = "refused",
    job_id: Any = None,
    task: str | None = None,
) -> DeadLetter:
    """Dead-letter a kombu message that reached the worker but cannot become (or run as) a task request.

    Used by ``Consumer`` and by the signal handlers for messages Celery rejected or whose task it does not know.

    Args:
        message: The kombu ``Message``.
        exc: Why (the exception raised while building the request, or an error name).
        message_text: The letter's message (default: ``not a task message: <exc>``).
        kind: The generated letter id's prefix when the message has no usable id (``letter_id``).
        job_id: The job id when the caller knows it (default: the ``id`` header).
        task: The task name when the caller knows it (default: the ``task`` header, when a string).

    Returns:
        The letter written (or logged, when no store answers).
    """
    headers = getattr(message, "headers", None)
    headers = headers if isinstance(headers, dict) else {}
    info = getattr(message, "delivery_info", None)
    queue = info.get("routing_key") if isinstance(info, dict) else None
    jid = letter_id(job_id if isinstance(job_id, str) else headers.get("id"), kind)
    if task is None and isinstance(headers.get("task"), str):
        task = headers["task"]
    letter = DeadLetter.of(
        jid,
        exc,
        payload=message_payload(message),
        task=task,
        queue=queue if isinstance(queue, str) else None,
        attempts=attempts_of(jid),
        message=message_text if message_text is not None else f"not a task message: {exc}",
        engine=message_engine(message),
    )
    dead_letter(letter)
    return letter


def envelope_problem(message: Any) -> str | None:
    """Why a decoded queue entry is not a kombu message envelope, or None when it is one.

    Checks what kombu's virtual ``Message`` and Celery's consumer read without guarding: an object with a
    ``properties`` object holding a ``delivery_tag``; optional ``headers``/``delivery_info`` objects; string
    ``content-type``/``content-encoding``; a ``body_encoding`` kombu can decode (``BODY_ENCODINGS``); a base64
    ``body`` that decodes; and a task message's string ``id``.
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
    encoding = props.get("body_encoding")
    if encoding and not (isinstance(encoding, str) and (encoding in BODY_ENCODINGS or encoding.lower() == "utf-8")):
        return f"properties.body_encoding {encoding!r} is neither base64 nor utf-8"
    body = message.get("body")
    if body is not None and not isinstance(body, str):
        return "body is not a string"
    if body and encoding == "base64":
        try:
            base64.b64decode(body)
        except (binascii.Error, ValueError):
            return "body is not valid base64"
    if isinstance(headers, dict) and "task" in headers and not isinstance(headers.get("id"), str):
        return "a task message without a string headers.id"
    return None


def header_problem(headers: Any) -> str | None:
    """Why a task message's headers would break the worker after Celery accepted them, or None.

    Celery 5.7 copies ``timelimit`` unchecked (``Request.__init__``) and billiard converts it only when the pool
    starts the job, inside the event loop, outside any guard: a ``timelimit`` of ``"xx"`` unpacks into
    ``("x", "x")`` and ``float("x")`` stops the worker ("Unrecoverable error", issue 5 audit). It must be absent,
    or ``[hard, soft]`` with each a non-negative number or null (``celery/app/amqp.py`` writes it so).
    """
    if not isinstance(headers, dict):
        return None
    limits = headers.get("timelimit")
    if not limits:
        return None
    if not isinstance(limits, list | tuple) or len(limits) != 2:
        return f"headers.timelimit {limits!r} is not [hard, soft]"
    for value in limits:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
            return f"headers.timelimit {limits!r} is not [hard, soft] in seconds"
    return None


def dead_letter_raw(raw: Any, queue: str | None, reason: str) -> None:
    """Dead-letter a queue entry that never reached Celery (kept as text when it is not JSON)."""
    headers = raw.get("headers") if isinstance(raw, dict) else None
    job_id = headers.get("id") if isinstance(headers, dict) else None
    task = headers.get("task") if isinstance(headers, dict) and isinstance(headers.get("task"), str) else None
    jid = letter_id(job_id, "raw")
    letter = DeadLetter.of(
        jid,
        "MalformedMessage",
        payload=raw,
        task=task,
        queue=queue,
        attempts=attempts_of(jid) if jid == job_id else 0,
        message=f"not a message: {reason}",
    )
    dead_letter(letter)


class Consumer(CeleryConsumer):  # type: ignore[misc]
    """Celery's consumer (``worker_consumer``); a message that cannot become a task request is dead-lettered and acked.

    Two gaps in Celery 5.7's consumer (``celery/worker/consumer/consumer.py``) stop a whole worker on one bad
    message: ``on_task_received`` catches only ``InvalidTaskError``, ``ContentDisallowed`` and ``DecodeError``, so
    anything else raised while the request is built (a body of JSON ``null`` → ``TypeError``; a JSON object →
    ``ValueError``; a ``timelimit`` header ``"xx"``, which fails only when the pool starts the job) reaches the
    event loop as "Unrecoverable error", and the message, restored as the worker dies, kills every worker after
    it (issue 5 audit); and ``on_decode_error`` acks an undecodable body with no signal to hook. Here headers the
    pool would choke on are refused first (``header_problem``) and any other exception but a broker connection
    error is dead-lettered (``refuse``) and acked. Connection errors propagate: Celery reconnects and the message
    stays unacked for redelivery.
    """

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        """Celery's ``on_task_received``, guarded (see the class docstring)."""
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

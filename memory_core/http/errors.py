"""The one boundary where an error becomes an HTTP status: the contract's error variants (reference §1.11).

| error | status |
| --- | --- |
| ``InvalidRequest`` | 400 (413 for a body over the limit, 415 for a body that is not JSON by its content type) |
| ``Unauthorized`` | 401, with ``WWW-Authenticate: Bearer`` |
| ``OutOfScope`` (an ``Unauthorized``) | 403: a valid token naming a root or agent it is not bound to |
| ``NotFound`` | 404 |
| ``Conflict`` | 409 |
| ``Unsupported`` | 501 |
| ``EngineUnavailable`` | 503, with ``Retry-After`` |
| ``EngineError``, ``ConfigError``, anything else | 500 |

The body is ``{"error": <variant>, "message": …, "field"?: …}``. Below 500 it is the error's ``to_dict()`` (the
message tells the caller what to fix). From 500 up it is the variant and a fixed message (``GENERIC_MESSAGES``):
an engine's message names its address (``postgresql://user:***@host:port/db: …``) and the driver's text, which
are the operator's business, so the detail is logged here and never sent (OWASP ASVS v4 §7.4.1: "a generic
message is shown when an unexpected or security sensitive error occurs"). ``public_pack`` and ``public_log_error``
apply the same rule to the engine errors a pack or ``pre_turn`` reports instead of raising, and ``public_job_error``
to a failed job's error (``GET /v1/jobs/{job_id}``): its category and a fixed message, never the worker's text.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from starlette.responses import JSONResponse

from memory_core.errors import (
    Conflict,
    EngineUnavailable,
    InvalidRequest,
    MemoryCoreError,
    NotFound,
    Unauthorized,
    Unsupported,
)
from memory_core.public_errors import INTERNAL_MESSAGE, UNAVAILABLE_MESSAGE, UNSUPPORTED_MESSAGE, variant
from memory_core.recall.pack import EMPTY_REASON
from memory_core.recall.types import ContextPack

__all__ = [
    "GENERIC_MESSAGES",
    "JOB_ERRORS",
    "BodyTooLarge",
    "OutOfScope",
    "UnsupportedMediaType",
    "error_body",
    "error_response",
    "public_job_error",
    "public_log_error",
    "public_pack",
    "public_reason",
    "status_for",
]

log = logging.getLogger(__name__)

RETRY_AFTER_S = 1
"""Seconds a client is told to wait after a 503 (the engine's transient failure)."""


class OutOfScope(Unauthorized):
    """Raised when a valid token names a layout root or agent it is not bound to (403)."""


class BodyTooLarge(InvalidRequest):
    """Raised when a request body is over the server's limit (413); ``field="body"``."""


class UnsupportedMediaType(InvalidRequest):
    """Raised when a request body's ``Content-Type`` is not JSON (415); ``field="content-type"``."""


_STATUS: tuple[tuple[type[MemoryCoreError], int], ...] = (
    (BodyTooLarge, 413),
    (UnsupportedMediaType, 415),
    (InvalidRequest, 400),
    (OutOfScope, 403),
    (Unauthorized, 401),
    (NotFound, 404),
    (Conflict, 409),
    (Unsupported, 501),
    (EngineUnavailable, 503),
)


def status_for(exc: BaseException) -> int:
    """The HTTP status for ``exc`` (the module's table; first match, so subclasses come first); pure."""
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return 500


GENERIC_MESSAGES: dict[int, str] = {501: UNSUPPORTED_MESSAGE, 503: UNAVAILABLE_MESSAGE}
"""The message sent for a status from 500 up; any other such status says ``INTERNAL_MESSAGE`` (the messages are
``public_errors``', which the MCP server sends too)."""

UNAVAILABLE_REASON = "unavailable (see the server's log)"
"""The reason a pack's failed section reports over HTTP (``public_reason``)."""


def error_body(exc: BaseException, status: int) -> dict[str, Any]:
    """The JSON body for ``exc`` answered with ``status`` (pure).

    Below 500: ``exc.to_dict()``. From 500 up: ``{"error": <variant>, "message": <fixed>}``, the variant being the
    error's class name (``EngineError`` for an exception that is no ``MemoryCoreError``); nothing of the error's
    own text.
    """
    if status < 500 and isinstance(exc, MemoryCoreError):
        return exc.to_dict()
    return {"error": variant(exc), "message": GENERIC_MESSAGES.get(status, INTERNAL_MESSAGE)}


def error_response(exc: BaseException) -> JSONResponse:
    """The response for ``exc``: its status, its body (``error_body``), and the headers its status calls for.

    From 500 up the detail is logged (with the traceback for a 500: an unexpected error is a bug) and not sent.
    """
    status = status_for(exc)
    if status == 500:
        log.error("error serving a request: %s", exc, exc_info=exc)
    elif status > 500:
        log.warning("error serving a request: %s", exc)
    body = error_body(exc, status)
    headers: dict[str, str] = {}
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="memory-core"'
    elif status == 503:
        headers["Retry-After"] = str(RETRY_AFTER_S)
    return JSONResponse(body, status_code=status, headers=headers)


def public_reason(reason: str) -> str:
    """A pack's skip reason as sent over HTTP: ``"empty"`` as it is, an error's text as ``UNAVAILABLE_REASON``.

    The error's text (an engine's address, a driver's message) was logged where the section failed
    (``recall.gather``, ``recall.pack``); the CLI, run by the operator, still shows it.
    """
    return reason if reason == EMPTY_REASON else UNAVAILABLE_REASON


def public_pack(pack: ContextPack) -> ContextPack:
    """``pack`` with every skip reason made public (``public_reason``); pure (a copy when one changes)."""
    if all(s.reason == public_reason(s.reason) for s in pack.skipped):
        return pack
    skipped = tuple(s.model_copy(update={"reason": public_reason(s.reason)}) for s in pack.skipped)
    return pack.model_copy(update={"skipped": skipped})


def public_log_error(log_error: str | None) -> str | None:
    """``pre_turn``'s ``log_error`` as sent over HTTP: None stays None; an error's text is logged, not sent."""
    if log_error is None:
        return None
    log.warning("pre_turn: the turn was not logged: %s", log_error)
    return "the turn was not logged (see the server's log)"


_SEE_LOG = " (see the server's log)"
JOB_ERRORS: dict[str, str] = {
    "InvalidRequest": "the job was refused as malformed and dead-lettered" + _SEE_LOG,
    "EngineUnavailable": "the engine did not answer through every retry; the job was dead-lettered" + _SEE_LOG,
    "GaveUp": "the job's runs were lost (killed or timed out) too many times; it was dead-lettered" + _SEE_LOG,
    "WrongEngine": "the job reached a worker of another engine, was not run and was dead-lettered" + _SEE_LOG,
}
"""The categories of a failed job a client is told, each with its fixed message: the dead letter's ``error``
(``workers.dead_letters.DeadLetter``) for the failures a worker expects. Any other category is ``EngineError``
with ``JOB_FAILED_MESSAGE``."""

JOB_FAILED_MESSAGE = "the job failed" + _SEE_LOG
"""The message of a failed job whose category is not in ``JOB_ERRORS``."""

_CATEGORY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def public_job_error(error: str | None) -> tuple[str, str] | None:
    """A failed job's ``(category, message)`` as sent over HTTP, from the worker's error text; pure.

    The text is the result backend's: ``"<category>: <detail>"`` for a dead-lettered job (``workers.celery_app``
    raises ``DeadLettered`` with the letter's ``error`` and ``message``), where the detail may name the engine's
    (masked) address, a driver's message or the payload. Only the category is kept, and only when it is one of
    ``JOB_ERRORS``; anything else reads ``("EngineError", JOB_FAILED_MESSAGE)``. None stays None.
    """
    if error is None:
        return None
    head = error.partition(":")[0].strip()
    category = head if _CATEGORY.fullmatch(head) else ""
    if category in JOB_ERRORS:
        return category, JOB_ERRORS[category]
    return "EngineError", JOB_FAILED_MESSAGE

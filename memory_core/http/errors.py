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
| ``EngineError``, ``ConfigError``, anything else | 500 (an unexpected error's text is not sent) |

The body is the error's ``to_dict()``: ``{"error": <variant>, "message": …, "field"?: …}``; messages are the
library's, which carry no credentials.
"""

from __future__ import annotations

import logging

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

__all__ = ["BodyTooLarge", "OutOfScope", "UnsupportedMediaType", "error_response", "status_for"]

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


def error_response(exc: BaseException) -> JSONResponse:
    """The response for ``exc``: its status, its ``to_dict()`` body, and the headers its status calls for.

    An exception that is no ``MemoryCoreError`` is a bug: it is logged with its traceback and answered with a
    500 whose body names no detail.
    """
    status = status_for(exc)
    if isinstance(exc, MemoryCoreError):
        body = exc.to_dict()
    else:
        log.error("unexpected error serving a request", exc_info=exc)
        body = {"error": "EngineError", "message": "internal error (see the server's log)"}
    headers: dict[str, str] = {}
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="memory-core"'
    elif status == 503:
        headers["Retry-After"] = str(RETRY_AFTER_S)
    return JSONResponse(body, status_code=status, headers=headers)

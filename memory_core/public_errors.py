"""What a remote caller is told of an error (the HTTP API, the MCP server): its own mistakes in full, the rest generic.

A caller's error (``CALLER_ERRORS``: a malformed request, a rejected credential, a missing or conflicting thing)
is sent as the library wrote it: the message names the field and tells the caller what to fix, and carries no
credentials (``memory_core.errors``). Any other error is the operator's business: an engine's message names its
address (``postgresql://user:***@host:port/db: …``) and the driver's text, and an unexpected exception may name
files and code. Those are sent as a fixed message (``generic_message``) and the detail goes to the server's log
(OWASP ASVS v4 §7.4.1: "a generic message is shown when an unexpected or security sensitive error occurs").

Pure: the surfaces log, this module only decides.
"""

from __future__ import annotations

from typing import Final

from memory_core.errors import (
    Conflict,
    EngineUnavailable,
    InvalidRequest,
    MemoryCoreError,
    NotFound,
    Unauthorized,
    Unsupported,
)

__all__ = [
    "CALLER_ERRORS",
    "INTERNAL_MESSAGE",
    "UNAVAILABLE_MESSAGE",
    "UNSUPPORTED_MESSAGE",
    "generic_message",
    "is_callers",
    "public_text",
    "variant",
]

CALLER_ERRORS: Final[tuple[type[MemoryCoreError], ...]] = (InvalidRequest, Unauthorized, NotFound, Conflict)
"""Errors whose own text is sent: they are about what the caller gave, and say what to fix."""

UNAVAILABLE_MESSAGE: Final = "the engine is unavailable; retry later"
"""What an ``EngineUnavailable`` says to a remote caller."""
UNSUPPORTED_MESSAGE: Final = "not supported by this server's engine"
"""What an ``Unsupported`` says to a remote caller."""
INTERNAL_MESSAGE: Final = "internal error (see the server's log)"
"""What any other error that is not the caller's says."""


def is_callers(exc: BaseException) -> bool:
    """True when ``exc``'s own text may be sent: one of ``CALLER_ERRORS``; pure."""
    return isinstance(exc, CALLER_ERRORS)


def variant(exc: BaseException) -> str:
    """The error's public name: its class name for a ``MemoryCoreError``, else ``"EngineError"``; pure."""
    return type(exc).__name__ if isinstance(exc, MemoryCoreError) else "EngineError"


def generic_message(exc: BaseException) -> str:
    """The fixed message sent instead of ``exc``'s text when it is not the caller's; pure."""
    if isinstance(exc, EngineUnavailable):
        return UNAVAILABLE_MESSAGE
    if isinstance(exc, Unsupported):
        return UNSUPPORTED_MESSAGE
    return INTERNAL_MESSAGE


def public_text(exc: BaseException) -> str:
    """One line for a remote caller; pure.

    ``str(exc)`` for a caller's error (``invalid request: limit: must be at most 100``); for an
    ``EngineUnavailable`` or ``Unsupported`` its prefix and the fixed message (``unavailable: the engine is
    unavailable; retry later``); else ``INTERNAL_MESSAGE``.
    """
    if is_callers(exc):
        return str(exc)
    if isinstance(exc, (EngineUnavailable, Unsupported)):
        return f"{exc.prefix}: {generic_message(exc)}"
    return INTERNAL_MESSAGE

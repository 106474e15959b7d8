"""The one boundary where CortexDB answers and transport failures become the contract's errors (reference §5.2).

| status | error |
| --- | --- |
| 401, 403 | ``Unauthorized`` |
| 402 | ``EngineError``, message prefixed ``[USER_INSUFFICIENT_CREDITS]`` (``is_insufficient_credits``) |
| 404 | ``NotFound`` |
| 400, 413, 422 | ``InvalidRequest`` |
| 409 | ``Conflict`` |
| 408, 429, 5xx | ``EngineUnavailable`` |
| any other 3xx/4xx | ``EngineError`` |

httpx's own failures: timeouts, network and protocol errors (the server went away) are ``EngineUnavailable``; an
unusable URL or scheme is ``ConfigError``; anything else (decoding, redirects, a misused stream) is
``EngineError``. A message quotes at most 300 characters of the answer's body, and never a credential.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Final

import httpx

from memory_core.errors import (
    ConfigError,
    Conflict,
    EngineError,
    EngineUnavailable,
    InvalidRequest,
    MemoryCoreError,
    NotFound,
    Unauthorized,
)

__all__ = [
    "ERROR_BODY_CAP",
    "EXCERPT_CHARS",
    "INSUFFICIENT_CREDITS",
    "is_insufficient_credits",
    "status_error",
    "transport_error",
]

ERROR_BODY_CAP: Final = 64 * 1024
"""Most bytes of an error answer read (reference §5.2)."""
EXCERPT_CHARS: Final = 300
"""Most characters of an error answer quoted in a message (reference §5.2)."""
INSUFFICIENT_CREDITS: Final = "[USER_INSUFFICIENT_CREDITS]"
"""Prefix of a 402's message."""
_UNAVAILABLE_STATUSES: Final = frozenset({408, 429})
_INVALID_STATUSES: Final = frozenset({400, 413, 422})


def is_insufficient_credits(error: BaseException) -> bool:
    """True for the error a 402 maps to (the account is out of credits: an account-wide refusal)."""
    return isinstance(error, EngineError) and error.message.startswith(INSUFFICIENT_CREDITS)


def _redact(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return text


def _reason(body: bytes, hosted: bool) -> str:
    """The answer's own words: a hosted ``[errorCode] error``, a JSON ``message``/``error``/``code``, else text."""
    text = body[:ERROR_BODY_CAP].decode("utf-8", "replace").strip()
    try:
        data = json.loads(text) if text else None
    except ValueError:
        data = None
    if isinstance(data, dict):
        message = data.get("error") if hosted else data.get("message", data.get("error"))
        if isinstance(message, dict):
            message = message.get("message")
        code = data.get("errorCode") if hosted else data.get("code")
        if message is not None or code is not None:
            said = str(message) if message is not None else ""
            return f"[{code}] {said}".strip() if code is not None else said
    return " ".join(text.split())


def status_error(status: int, body: bytes, *, hosted: bool, route: str, secrets: Iterable[str] = ()) -> MemoryCoreError:
    """The contract error for an HTTP answer of ``status`` (>= 300) on ``route``.

    Args:
        status: The HTTP status.
        body: The answer's body (at most ``ERROR_BODY_CAP`` bytes are read).
        hosted: The TinyHumans wire (its failures are ``{success: false, error, errorCode}``).
        route: The route asked (``v1/recall``), for the message.
        secrets: Strings that must never appear in the message (the bearer in use).
    """
    reason = _redact(_reason(body, hosted), secrets)[:EXCERPT_CHARS]
    said = f"{route} answered {status}" + (f": {reason}" if reason else "")
    if status in (401, 403):
        return Unauthorized(said)
    if status == 402:
        return EngineError(f"{INSUFFICIENT_CREDITS} {said}")
    if status == 404:
        return NotFound(said)
    if status in _INVALID_STATUSES:
        return InvalidRequest(said)
    if status == 409:
        return Conflict(said)
    if status in _UNAVAILABLE_STATUSES or 500 <= status <= 599:
        return EngineUnavailable(said)
    return EngineError(said)


def transport_error(exc: Exception, *, route: str, secrets: Iterable[str] = ()) -> MemoryCoreError:
    """The contract error for an httpx failure raised while asking ``route``.

    Args:
        exc: An httpx exception (``httpx.HTTPError``, ``httpx.InvalidURL``, ``httpx.CookieConflict``, a
            ``StreamError``) or any other exception the transport raised.
        route: The route asked, for the message.
        secrets: Strings that must never appear in the message.
    """
    said = _redact(f"{route}: {type(exc).__name__}: {exc}", secrets)[: EXCERPT_CHARS + len(route) + 40]
    if isinstance(exc, httpx.TimeoutException | httpx.NetworkError | httpx.RemoteProtocolError | httpx.ProxyError):
        return EngineUnavailable(said)
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
        return ConfigError(said)
    return EngineError(said)

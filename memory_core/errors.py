"""The one error tree every memory-core call raises from.

```
MemoryCoreError                  root; never named MemoryError (that shadows the builtin)
├── InvalidRequest (ValueError)  a malformed request; names the offending field
├── Unsupported                  the engine does not offer this operation or mode
├── Unauthorized                 a credential is missing or was rejected
├── NotFound                     a named thing does not exist
├── Conflict                     the request conflicts with what is stored
├── EngineUnavailable            transient; the only retryable error (``retryable = True``)
├── EngineError                  the engine's own failure, already sanitised
└── ConfigError                  unknown engine scheme, missing setting, unusable URL
```

Messages are lowercase and carry no credentials, and ``str(error)`` starts with the variant's prefix
(``invalid request: ``, ``unsupported: ``, …), as in the TinyMemory contract reference §1.11.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "Conflict",
    "ConfigError",
    "EngineError",
    "EngineUnavailable",
    "InvalidRequest",
    "MemoryCoreError",
    "NotFound",
    "Unauthorized",
    "Unsupported",
]


class MemoryCoreError(Exception):
    """Root of every error memory-core raises.

    Attributes:
        message: The human-readable reason, without the variant prefix.
        retryable: True only for transient failures (``EngineUnavailable``).
    """

    prefix: ClassVar[str] = "error"
    retryable: ClassVar[bool] = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.prefix}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"

    def to_dict(self) -> dict[str, Any]:
        """The error as a JSON object ``{"error": <class name>, "message": …}`` for job reports."""
        return {"error": type(self).__name__, "message": self.message}


class InvalidRequest(MemoryCoreError, ValueError):
    """Raised when a request is malformed; nothing stored changes.

    Attributes:
        field: Dotted path of the offending field (``"limit"``, ``"filter.reach.at"``), or None when the
            request as a whole is wrong.
        reason: What is wrong, without the field (``message`` is ``"<field>: <reason>"``); re-raise with
            ``InvalidRequest(err.reason, field=...)`` to name the field differently without doubling it.
    """

    prefix = "invalid request"

    def __init__(self, message: str, field: str | None = None) -> None:
        self.field = field
        self.reason = message
        super().__init__(f"{field}: {message}" if field else message)

    def to_dict(self) -> dict[str, Any]:
        """The error as a JSON object, with its ``field``."""
        return {**super().to_dict(), "field": self.field}


class Unsupported(MemoryCoreError):
    """Raised when the engine does not offer an operation or fetch mode."""

    prefix = "unsupported"


class Unauthorized(MemoryCoreError):
    """Raised when a credential is missing or rejected."""

    prefix = "unauthorized"


class NotFound(MemoryCoreError):
    """Raised when a named thing (an engine file, a dead letter, a job) does not exist."""

    prefix = "not found"


class Conflict(MemoryCoreError):
    """Raised when a request conflicts with stored state (for example a schema from a newer version)."""

    prefix = "conflict"


class EngineUnavailable(MemoryCoreError):
    """Raised when the engine is transiently unavailable (locked, unreachable). Safe to retry."""

    prefix = "unavailable"
    retryable = True


class EngineError(MemoryCoreError):
    """Raised when the engine failed in a way that retrying will not fix."""

    prefix = "engine error"


class ConfigError(MemoryCoreError):
    """Raised when configuration is unusable: an unknown engine scheme, a bad URL, a missing setting."""

    prefix = "configuration error"

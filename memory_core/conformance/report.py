"""What a conformance run reports: one ``CheckResult`` per check, gathered in a ``SuiteReport``.

A check passes, is skipped (an optional feature the engine does not offer, or a check not reached because an
earlier one failed), or fails. A failure says whether the engine answered wrongly (``check``) or failed a call
it must serve (``engine``), after the contract reference §2 (``Error::Check`` / ``Error::Engine``).

Checks signal their outcome by raising ``CheckFailed``, ``EngineFailed`` or ``CheckSkipped``; the runner turns
those into results, so a check body reads as a list of assertions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from memory_core.errors import MemoryCoreError

__all__ = [
    "CheckFailed",
    "CheckResult",
    "CheckSkipped",
    "CheckStatus",
    "ConformanceFailure",
    "EngineFailed",
    "FailureKind",
    "SuiteReport",
]


class CheckStatus(StrEnum):
    """How one check ended."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


class FailureKind(StrEnum):
    """Why a check failed: a wrong answer (``check``) or a failed call the engine must serve (``engine``)."""

    CHECK = "check"
    ENGINE = "engine"


class ConformanceFailure(MemoryCoreError):
    """Raised inside a check when the engine does not conform; the runner records it as a failed result.

    Attributes:
        check: The name of the check that failed (``"round_trip"``).
    """

    prefix = "conformance"
    kind: ClassVar[FailureKind] = FailureKind.CHECK

    def __init__(self, check: str, message: str) -> None:
        self.check = check
        super().__init__(message)


class CheckFailed(ConformanceFailure):
    """Raised when the engine answered a call, but wrongly (reference §2 ``Error::Check``)."""

    prefix = "check failed"
    kind = FailureKind.CHECK


class EngineFailed(ConformanceFailure):
    """Raised when the engine failed a call it must serve (reference §2 ``Error::Engine``).

    Attributes:
        source: The exception the engine raised.
    """

    prefix = "engine failed"
    kind = FailureKind.ENGINE

    def __init__(self, check: str, source: BaseException) -> None:
        self.source = source
        text = str(source) if isinstance(source, MemoryCoreError) else f"{type(source).__name__}: {source}"
        super().__init__(check, text)


class CheckSkipped(Exception):
    """Raised by a check whose feature the engine does not offer (``export``, ``erase``); not a failure."""


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome.

    Attributes:
        name: The check (``"health"`` … ``"cleanup"``, reference §2 order).
        status: passed, failed or skipped.
        ms: Wall time of the check, milliseconds (0 for a check not reached).
        detail: What was checked, why it was skipped, or what went wrong.
        failure: For a failed check, whether the answer was wrong (``check``) or the call failed (``engine``).
    """

    name: str
    status: CheckStatus
    ms: float = 0.0
    detail: str = ""
    failure: FailureKind | None = None

    @property
    def failed(self) -> bool:
        """True when the check failed."""
        return self.status is CheckStatus.FAILED

    def to_dict(self) -> dict[str, Any]:
        """``{name, status, ms, detail, failure?}`` as JSON-ready values."""
        out: dict[str, Any] = {
            "name": self.name,
            "status": self.status.value,
            "ms": round(self.ms, 3),
            "detail": self.detail,
        }
        if self.failure is not None:
            out["failure"] = self.failure.value
        return out


@dataclass(frozen=True)
class SuiteReport:
    """The results of one run, in check order (cleanup last).

    Attributes:
        engine: The engine's descriptor id (or its class name when the descriptor could not be read).
        nonce: The run's nonce; its items live under ``memory-core-conformance/<nonce>``.
        results: One result per check, in order.
    """

    engine: str
    nonce: str
    results: tuple[CheckResult, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        """True when no check failed (skips are allowed)."""
        return not any(r.failed for r in self.results)

    @property
    def failures(self) -> list[CheckResult]:
        """The failed checks, in order (at most one before cleanup, plus cleanup's own)."""
        return [r for r in self.results if r.failed]

    @property
    def first_failure(self) -> CheckResult | None:
        """The first failed check, or None."""
        return next((r for r in self.results if r.failed), None)

    def result(self, name: str) -> CheckResult:
        """The result of the check called ``name``.

        Raises:
            KeyError: no check of that name ran.
        """
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(name)

    def render(self) -> str:
        """A plain-text table, one line per check, for test failures and logs."""
        width = max((len(r.name) for r in self.results), default=5)
        lines = [f"conformance of `{self.engine}` (run {self.nonce}): {'passed' if self.passed else 'FAILED'}"]
        for r in self.results:
            status = r.status.value if r.failure is None else f"failed ({r.failure.value})"
            line = f"  {r.name:<{width}}  {status:<15} {r.ms:9.1f} ms"
            if r.detail:
                line += f"  {r.detail}"
            lines.append(line)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """``{engine, nonce, passed, checks: [...]}`` as JSON-ready values."""
        return {
            "engine": self.engine,
            "nonce": self.nonce,
            "passed": self.passed,
            "checks": [r.to_dict() for r in self.results],
        }

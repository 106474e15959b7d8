"""Running the suite: the 23 checks in order, and the fault self-test.

The checks are the 18 of the contract reference §2, then the 5 of memory as a log (seed 002).

``run(engine)`` executes the checks in order and stops at the first failure; the checks not reached are
reported as skipped, and ``cleanup`` runs whatever happened. ``run_faults(open_inner)`` wraps a fresh engine in
each fault of ``faults.Fault`` and reports which check caught it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from memory_core.conformance import (
    checks_answers,
    checks_filters,
    checks_forget,
    checks_items,
    checks_log,
    checks_namespaces,
    checks_reads,
    checks_writes,
)
from memory_core.conformance.context import CheckContext, Run
from memory_core.conformance.faults import FAULT_CHECKS, Fault, FaultyEngine, applicable
from memory_core.conformance.report import (
    CheckResult,
    CheckSkipped,
    CheckStatus,
    ConformanceFailure,
    FailureKind,
    SuiteReport,
)
from memory_core.engine import MemoryEngine

__all__ = ["CHECKS", "CHECK_NAMES", "Check", "FaultResult", "run", "run_faults"]


class Check(NamedTuple):
    """A named check: a function of a ``CheckContext`` returning a short detail for the report."""

    name: str
    body: Callable[[CheckContext], str]


CHECKS: Final[tuple[Check, ...]] = (
    Check("health", checks_items.health),
    Check("round_trip", checks_items.round_trip),
    Check("export", checks_items.export),
    Check("replay", checks_items.replay),
    Check("explore", checks_reads.explore),
    Check("get", checks_reads.get),
    Check("store_many", checks_writes.store_many),
    Check("store_with", checks_writes.store_with),
    Check("fetch_filters", checks_filters.fetch_filters),
    Check("unsupported_modes", checks_filters.unsupported_modes),
    Check("namespaces", checks_namespaces.namespaces),
    Check("erase", checks_namespaces.erase),
    Check("empty_forget", checks_forget.empty_forget),
    Check("forget_by_id", checks_forget.forget_by_id),
    Check("forget_by_filter", checks_forget.forget_by_filter),
    Check("recall", checks_answers.recall),
    Check("consolidate", checks_answers.consolidate),
    Check("log", checks_log.log),
    Check("retract", checks_log.retract),
    Check("as_of", checks_log.as_of),
    Check("tombstone", checks_log.tombstone),
    Check("tiers", checks_log.tiers),
    Check("cleanup", checks_forget.cleanup),
)
"""The 23 checks in execution order (reference §2, then the log checks of seed 002, skipped for engines that do
not declare ``log``); ``cleanup`` is last and always runs."""

CHECK_NAMES: Final[tuple[str, ...]] = tuple(check.name for check in CHECKS)
"""The check names, in order."""


def _run_one(check: Check, engine: MemoryEngine, run: Run) -> CheckResult:
    ctx = CheckContext(engine, run, check.name)
    start = time.perf_counter()
    status, failure = CheckStatus.PASSED, None
    try:
        detail = check.body(ctx)
    except CheckSkipped as exc:
        status, detail = CheckStatus.SKIPPED, str(exc)
    except ConformanceFailure as exc:
        status, failure, detail = CheckStatus.FAILED, exc.kind, exc.message
    except Exception as exc:  # an answer the suite could not even read is a wrong answer
        status, failure = CheckStatus.FAILED, FailureKind.CHECK
        detail = f"the engine's answer broke the check: {type(exc).__name__}: {exc}"
    ms = (time.perf_counter() - start) * 1000.0
    return CheckResult(name=check.name, status=status, ms=ms, detail=detail, failure=failure)


def _engine_id(engine: MemoryEngine) -> str:
    try:
        return engine.descriptor().id
    except Exception:
        return type(engine).__name__


def run(engine: MemoryEngine, *, nonce: str | None = None) -> SuiteReport:
    """Run the conformance suite against ``engine``.

    Writes only under ``memory-core-conformance/<nonce>`` (probes under ``…/probes``), stops at the first
    failed check (later checks are reported as skipped), and always runs ``cleanup``.

    Args:
        engine: The engine under test; a fresh one. Its items outside the run's workspace are never written,
            but the log checks roll back to LSNs of their own, which undoes every later record store-wide
            (seed 002), another writer's too, and the run's log records stay behind (``conformance.fresh``).
        nonce: The run's nonce (lowercase letters and digits); a fresh one by default.

    Returns:
        One result per check, in order.

    Raises:
        InvalidRequest: a malformed ``nonce``.
    """
    identity = Run.fresh(nonce)
    results: list[CheckResult] = []
    failed: str | None = None
    for check in CHECKS[:-1]:
        if failed is not None:
            results.append(CheckResult(check.name, CheckStatus.SKIPPED, detail=f"not run: {failed} failed"))
            continue
        result = _run_one(check, engine, identity)
        results.append(result)
        if result.failed:
            failed = check.name
    results.append(_run_one(CHECKS[-1], engine, identity))
    return SuiteReport(engine=_engine_id(engine), nonce=identity.nonce, results=tuple(results))


@dataclass(frozen=True)
class FaultResult:
    """How the suite fared against one injected fault.

    Attributes:
        fault: The fault injected.
        expected: The check the contract names for it (``FAULT_CHECKS``).
        caught_by: The first check that failed, or None when the fault went uncaught.
        detail: That check's failure detail.
        report: The full run.
    """

    fault: Fault
    expected: str
    caught_by: str | None
    detail: str
    report: SuiteReport

    @property
    def caught(self) -> bool:
        """True when some check failed."""
        return self.caught_by is not None

    @property
    def as_named(self) -> bool:
        """True when the check that caught the fault is the one the contract names."""
        return self.caught_by == self.expected

    def to_dict(self) -> dict[str, Any]:
        """``{fault, expected, caught_by, as_named, detail}`` as JSON-ready values."""
        return {
            "fault": self.fault.value,
            "expected": self.expected,
            "caught_by": self.caught_by,
            "as_named": self.as_named,
            "detail": self.detail,
        }


def run_faults(open_inner: Callable[[], MemoryEngine], faults: tuple[Fault, ...] = tuple(Fault)) -> list[FaultResult]:
    """Run the suite once per fault, each against ``FaultyEngine(open_inner(), fault)``.

    Args:
        open_inner: Opens the engine to wrap; called once per fault so each run starts from a fresh engine.
        faults: The faults to inject (every one by default). Faults of a capability the inner engine does not
            declare (the log faults, for an engine without ``log``) are left out: there is nothing to break.

    Returns:
        One result per injected fault, in order.
    """
    out: list[FaultResult] = []
    for fault in faults:
        with open_inner() as inner:
            if not applicable(fault, inner.descriptor()):
                continue
            report = run(FaultyEngine(inner, fault))
        first = report.first_failure
        out.append(
            FaultResult(
                fault=fault,
                expected=FAULT_CHECKS[fault],
                caught_by=first.name if first else None,
                detail=first.detail if first else "",
                report=report,
            )
        )
    return out

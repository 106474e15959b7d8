"""The conformance suite: 23 checks (contract reference §2, and memory as a log, seed 002).

The 18 of the contract every engine must pass; the 5 of the log are skipped for engines that do not declare ``log``.

```python
from memory_core.conformance import run
report = run(engine)          # SuiteReport: one CheckResult per check, cleanup last
assert report.passed, report.render()
```

| module | holds |
| --- | --- |
| ``context`` | the run's identity (workspace, probe workspace, marker) and the check helpers |
| ``fixtures`` | the round-trip items and the per-field filter probes |
| ``checks_*`` | the checks, in the order of ``runner.CHECKS`` |
| ``runner`` | ``run`` (stop at the first failure, always clean up) and ``run_faults`` |
| ``faults`` | ``FaultyEngine`` and its 23 faults, each with the check that must catch it |
| ``testing`` | ``conformance_test`` / ``assert_conforms`` for an engine's own test module |
| ``fresh`` | ``held_data``: what an engine already holds (the CLI refuses a store that is not fresh) |

The CLI is ``memory-core conformance --engine URL [--faults] [--json] [--allow-existing]``.
"""

from memory_core.conformance.context import Run
from memory_core.conformance.faults import FAULT_CHECKS, LOG_FAULTS, Fault, FaultyEngine, applicable
from memory_core.conformance.report import (
    CheckFailed,
    CheckResult,
    CheckSkipped,
    CheckStatus,
    ConformanceFailure,
    EngineFailed,
    FailureKind,
    SuiteReport,
)
from memory_core.conformance.runner import CHECK_NAMES, CHECKS, FaultResult, run, run_faults

__all__ = [
    "CHECKS",
    "CHECK_NAMES",
    "FAULT_CHECKS",
    "LOG_FAULTS",
    "CheckFailed",
    "CheckResult",
    "CheckSkipped",
    "CheckStatus",
    "ConformanceFailure",
    "EngineFailed",
    "FailureKind",
    "Fault",
    "FaultResult",
    "FaultyEngine",
    "Run",
    "SuiteReport",
    "applicable",
    "run",
    "run_faults",
]

"""Run the conformance suite from an engine's own test module, in one line.

```python
# tests/test_sqlite_conformance.py
from memory_core.conformance.testing import conformance_test
from memory_core.engines import open_engine

test_conformance = conformance_test(lambda tmp_path: open_engine(f"sqlite:///{tmp_path}/memory.db"))
```

The test runs every check against a fresh engine and, on failure, fails with the whole report: one line per
check with its result, time and detail, so the first failure is read in context.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

from memory_core.conformance.report import SuiteReport
from memory_core.conformance.runner import run
from memory_core.engine import MemoryEngine

__all__ = ["EngineFactory", "assert_conforms", "conformance_test"]

EngineFactory = Callable[[Path], MemoryEngine] | Callable[[], MemoryEngine]
"""Opens the engine under test: given pytest's ``tmp_path``, or no argument at all."""


def _fail(report: SuiteReport) -> None:
    try:
        import pytest
    except ImportError:  # pragma: no cover - pytest is a dev dependency
        raise AssertionError(report.render()) from None
    pytest.fail(report.render(), pytrace=False)


def assert_conforms(engine: MemoryEngine, *, nonce: str | None = None) -> SuiteReport:
    """Run the suite against ``engine`` and fail the calling test unless every check passes.

    Returns:
        The report (every check passed or was skipped).

    Raises:
        pytest.fail.Exception (or AssertionError without pytest): some check failed; the message is the report.
    """
    report = run(engine, nonce=nonce)
    if not report.passed:
        _fail(report)
    return report


def conformance_test(factory: EngineFactory) -> Callable[[Path], None]:
    """A pytest test function that runs the suite against ``factory``'s engine and closes it afterwards.

    Args:
        factory: Opens a fresh engine: called with pytest's ``tmp_path`` when it has a required positional
            parameter (``lambda tmp_path: …``), else with no argument (``ReferenceEngine``).

    Returns:
        A function to bind to a ``test_*`` name in a test module.
    """
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    takes_path = any(
        p.kind in positional and p.default is inspect.Parameter.empty
        for p in inspect.signature(factory).parameters.values()
    )

    def test_conformance(tmp_path: Path) -> None:
        engine = factory(tmp_path) if takes_path else factory()  # type: ignore[call-arg]
        with engine:
            assert_conforms(engine)

    return test_conformance

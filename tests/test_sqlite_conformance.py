"""The conformance suite against the SQLite engine, plus its fault injections over the same engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_core.conformance import Fault, run_faults
from memory_core.conformance.testing import conformance_test
from memory_core.engines import open_engine

test_conformance = conformance_test(lambda tmp_path: open_engine(f"sqlite:///{tmp_path}/memory.db"))


def test_suite_leaves_a_shared_file_clean_and_foreign_items_alone(tmp_path: Path) -> None:
    from memory_core import Document, ListRequest, MemoryMeta
    from memory_core.conformance import run

    with open_engine(f"sqlite:///{tmp_path}/memory.db") as engine:
        foreign = Document.of("kept across the suite", MemoryMeta(workspace="someone-else"))
        engine.store(foreign)
        report = run(engine)
        assert report.passed, report.render()
        assert [h.id for h in engine.list(ListRequest(limit=10)).items] == [foreign.id]


@pytest.mark.slow
def test_every_fault_is_caught_by_its_check(tmp_path: Path) -> None:
    counter = iter(range(1000))
    results = run_faults(lambda: open_engine(f"sqlite:///{tmp_path}/f{next(counter)}.db"), tuple(Fault))
    uncaught = [r.fault.value for r in results if not r.as_named]
    assert not uncaught, [(r.fault.value, r.expected, r.caught_by) for r in results if not r.as_named]

"""The conformance suite (and its fault injections) against the PostgreSQL engine, each on a fresh database."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from memory_core import Document, ListRequest, MemoryMeta
from memory_core.conformance import Fault, run, run_faults
from memory_core.conformance.testing import assert_conforms
from memory_core.engines import open_engine

pytestmark = pytest.mark.postgres


def test_conformance(pg_url: str) -> None:
    with open_engine(pg_url) as engine:
        assert_conforms(engine)


def test_suite_leaves_a_shared_database_clean_and_foreign_items_alone(pg_url: str) -> None:
    with open_engine(pg_url) as engine:
        foreign = Document.of("kept across the suite", MemoryMeta(workspace="someone-else"))
        engine.store(foreign)
        report = run(engine)
        assert report.passed, report.render()
        assert [h.id for h in engine.list(ListRequest(limit=10)).items] == [foreign.id]


@pytest.mark.slow
def test_every_fault_is_caught_by_its_check(pg_databases: Callable[[], str]) -> None:
    results = run_faults(lambda: open_engine(pg_databases()), tuple(Fault))
    uncaught = [r.fault.value for r in results if not r.as_named]
    assert not uncaught, [(r.fault.value, r.expected, r.caught_by) for r in results if not r.as_named]

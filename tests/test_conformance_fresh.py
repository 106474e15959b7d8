"""``conformance.fresh.held_data``: whether a store holds anything, read through the contract on every engine.

The conformance command refuses a store that is not fresh (its rollbacks are store-wide, seed 002); these tests
pin what counts as holding something: a live item, a forgotten one (a log record or an exported tombstone), and
the leftovers of a finished suite run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from memory_core import Document, MemoryMeta
from memory_core.conformance import run
from memory_core.conformance.fresh import held_data
from memory_core.engine import MemoryEngine
from memory_core.engines import open_engine
from memory_core.engines.cortexdb.double import direct_double, double_engine

Opener = Callable[[Path], MemoryEngine]

ENGINES: dict[str, Opener] = {
    "reference": lambda _: open_engine("reference://"),
    "sqlite": lambda tmp: open_engine(f"sqlite:///{tmp / 'm.db'}"),
    "cortexdb": lambda _: double_engine(direct_double()),  # keeps no log
}


@pytest.fixture(params=sorted(ENGINES))
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> MemoryEngine:
    opened = ENGINES[request.param](tmp_path)
    request.addfinalizer(opened.close)
    return opened


def _doc(text: str) -> Document:
    return Document.of(text, MemoryMeta(workspace="host"))


def test_a_fresh_store_holds_nothing(engine: MemoryEngine) -> None:
    assert held_data(engine) is None


def test_a_host_item_is_held(engine: MemoryEngine) -> None:
    receipt = engine.store(_doc("the host's turn: I moved to Lisbon in March"))
    held = held_data(engine)
    assert held is not None
    assert ("its log is at LSN" in held) if engine.descriptor().log else (receipt.id in held)


@pytest.mark.parametrize("name", ["reference", "sqlite"])
def test_a_forgotten_item_still_counts_on_a_log(name: str, tmp_path: Path) -> None:
    with ENGINES[name](tmp_path) as engine:
        receipt = engine.store(_doc("forget me later"))
        engine.forget({"ids": [receipt.id]})
        assert engine.list({"limit": 1}).items == ()  # nothing listed: the log (and its tombstone) is what is held
        assert held_data(engine) == f"its log is at LSN {engine.current_lsn()}"


def test_a_finished_suite_run_leaves_the_store_not_fresh(engine: MemoryEngine) -> None:
    report = run(engine)
    assert report.passed, report.render()
    if engine.descriptor().log:
        assert held_data(engine) == f"its log is at LSN {engine.current_lsn()}"  # the run's records stay
    else:
        assert held_data(engine) is None  # without a log, cleanup removes all the run wrote

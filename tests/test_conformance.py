"""The conformance suite against the reference engine, against injected faults, and through its CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import memory_core.conformance.runner
import memory_core.engines
from memory_core import (
    Consolidation,
    Document,
    EngineDescriptor,
    EngineHealth,
    EngineUnavailable,
    InvalidRequest,
    Learning,
    ListPage,
    ListRequest,
    MemoryMeta,
    open_engine,
)
from memory_core.cli import load_commands
from memory_core.conformance import (
    CHECK_NAMES,
    FAULT_CHECKS,
    CheckStatus,
    FailureKind,
    Fault,
    FaultyEngine,
    run,
    run_faults,
)
from memory_core.conformance.context import Run
from memory_core.conformance.testing import assert_conforms, conformance_test
from memory_core.engine import AnyItem, MemoryEngine
from memory_core.engines.reference import ReferenceEngine
from memory_core.query import (
    ExportPage,
    FetchPage,
    FetchRequest,
    ForgetReport,
    ForgetTarget,
    RecallAnswer,
    RecallRequest,
    StoreReceipt,
)

MODES = [c.value for c in Consolidation]

# the helper under test, used exactly as an engine's own test module would use it
test_reference_conforms_through_the_helper = conformance_test(lambda tmp_path: ReferenceEngine())
test_an_engine_class_is_a_factory_too = conformance_test(ReferenceEngine)


def test_the_suite_runs_the_18_checks_of_the_contract_then_the_5_log_checks_in_order() -> None:
    assert CHECK_NAMES == (
        "health", "round_trip", "export", "replay", "explore", "get", "store_many", "store_with",
        "fetch_filters", "unsupported_modes", "namespaces", "erase", "empty_forget", "forget_by_id",
        "forget_by_filter", "recall", "consolidate", "log", "retract", "as_of", "tombstone", "tiers", "cleanup",
    )  # fmt: skip


@pytest.mark.parametrize("mode", MODES)
def test_reference_passes_every_check_under_each_consolidation_mode_and_cleans_up(mode: str) -> None:
    engine = ReferenceEngine(mode)
    report = run(engine)
    assert report.passed, report.render()
    assert [r.name for r in report.results] == list(CHECK_NAMES)
    assert all(r.status is CheckStatus.PASSED for r in report.results), report.render()
    assert mode in report.result("consolidate").detail
    assert engine.is_empty()


@pytest.mark.parametrize("mode", MODES)
def test_reference_passes_when_opened_by_url(mode: str) -> None:
    engine = open_engine(f"reference://?consolidation={mode}")
    assert engine.descriptor().consolidation is Consolidation(mode)
    report = run(engine)
    assert report.passed, report.render()
    assert isinstance(engine, ReferenceEngine) and engine.is_empty()


def test_the_suite_leaves_foreign_items_alone() -> None:
    engine = ReferenceEngine()
    foreign: list[AnyItem] = [
        Document.of("someone else's note"),
        Learning(text="a neighbour's learning", meta=MemoryMeta(workspace="memory-core-conformance/other")),
        Document.of("tmconf other run", MemoryMeta.model_validate({"namespace": "agent:other", "tags": ["erase"]})),
    ]
    engine.store_many(foreign)
    report = run(engine)
    assert report.passed, report.render()
    assert engine.snapshot() == foreign


class _Recording(ReferenceEngine):
    """Remembers every item stored through it."""

    def __init__(self) -> None:
        super().__init__()
        self.stored: list[AnyItem] = []

    def _store(self, item: AnyItem) -> StoreReceipt:
        self.stored.append(item)
        return super()._store(item)


def test_every_item_a_run_writes_is_in_its_workspace_and_carries_its_marker() -> None:
    engine = _Recording()
    report = run(engine, nonce="abc123")
    assert report.passed and report.nonce == "abc123"
    assert engine.stored
    for item in engine.stored:
        assert item.item_meta.workspace in {"memory-core-conformance/abc123", "memory-core-conformance/abc123/probes"}
        assert "tmconfabc123" in item.render_text()


def test_a_malformed_nonce_is_refused() -> None:
    with pytest.raises(InvalidRequest) as info:
        Run.fresh("Not/A-Nonce")
    assert info.value.field == "nonce"


@pytest.mark.parametrize("fault", list(Fault), ids=lambda f: f.value)
def test_each_fault_is_caught_by_the_check_the_contract_names(fault: Fault) -> None:
    inner = ReferenceEngine()
    report = run(FaultyEngine(inner, fault))
    first = report.first_failure
    assert first is not None, f"{fault.value} went uncaught:\n{report.render()}"
    assert first.name == FAULT_CHECKS[fault], report.render()
    assert first.failure is FailureKind.CHECK, report.render()
    after = report.results[CHECK_NAMES.index(first.name) + 1 : -1]
    assert all(r.status is CheckStatus.SKIPPED and "not run" in r.detail for r in after)
    assert report.result("cleanup").status is CheckStatus.PASSED
    assert inner.is_empty()


def test_the_fault_table_names_a_check_for_each_of_the_23_faults() -> None:
    assert len(Fault) == 23
    assert set(FAULT_CHECKS) == set(Fault)
    assert set(FAULT_CHECKS.values()) <= set(CHECK_NAMES)


@pytest.mark.parametrize("mode", ["none", "scheduled"])
def test_faults_are_caught_whatever_the_inner_engine_declares(mode: str) -> None:
    results = run_faults(lambda: ReferenceEngine(mode))
    assert [(r.fault, r.caught_by) for r in results] == [(f, FAULT_CHECKS[f]) for f in Fault]


class _Minimal(MemoryEngine):
    """Only the required hooks, forwarded to a reference engine: every default of the base is in play."""

    def __init__(self) -> None:
        self.inner = ReferenceEngine(Consolidation.NONE)

    def descriptor(self) -> EngineDescriptor:
        return self.inner.descriptor().model_copy(update={"id": "minimal", "log": False, "tiers": False})

    def health(self) -> EngineHealth:
        return EngineHealth.ok()

    def _recall(self, request: RecallRequest) -> RecallAnswer:
        return self.inner.recall(request)

    def _fetch(self, request: FetchRequest) -> FetchPage:
        return self.inner.fetch(request)

    def _store(self, item: AnyItem) -> StoreReceipt:
        return self.inner.store(item)

    def _forget(self, target: ForgetTarget) -> ForgetReport:
        return self.inner.forget(target)

    def _list(self, request: ListRequest) -> ListPage:
        return self.inner.list(request)


def test_an_engine_on_the_contract_defaults_passes_and_skips_export_and_erase() -> None:
    engine = _Minimal()
    report = run(engine)
    assert report.passed, report.render()
    skipped = {r.name for r in report.results if r.status is CheckStatus.SKIPPED}
    assert skipped == {"export", "erase", "log", "retract", "as_of", "tombstone", "tiers"}
    assert "does not declare log" in report.result("retract").detail
    assert "unsupported" in report.result("consolidate").detail
    assert engine.inner.is_empty()


class _ClaimsTheLog(_Minimal):
    def descriptor(self) -> EngineDescriptor:
        return super().descriptor().model_copy(update={"log": True})


def test_an_engine_declaring_the_log_without_offering_it_fails_the_log_check() -> None:
    report = run(_ClaimsTheLog())
    first = report.first_failure
    assert first is not None and first.name == "log" and "keeps no log" in first.detail, report.render()


class _Unreachable(ReferenceEngine):
    def _list(self, request: ListRequest) -> ListPage:
        raise EngineUnavailable("the database is locked")


def test_a_failed_call_is_an_engine_failure_and_cleanup_still_runs() -> None:
    report = run(_Unreachable())
    first = report.first_failure
    assert first is not None and first.name == "round_trip"
    assert first.failure is FailureKind.ENGINE
    assert "the database is locked" in first.detail
    cleanup = report.result("cleanup")
    assert cleanup.status is CheckStatus.FAILED and cleanup.failure is FailureKind.ENGINE


class _ScoredListing(ReferenceEngine):
    def _list(self, request: ListRequest) -> ListPage:
        page = super()._list(request)
        return page.model_copy(update={"items": tuple(h.model_copy(update={"score": 0.5}) for h in page.items)})


class _EndlessListing(ReferenceEngine):
    def _list(self, request: ListRequest) -> ListPage:
        return super()._list(request.model_copy(update={"cursor": None})).model_copy(update={"next_cursor": "0"})


@pytest.mark.parametrize(
    ("engine", "words"),
    [(_ScoredListing(), "non-zero scores"), (_EndlessListing(), "repeated")],
    ids=["scored", "endless"],
)
def test_listings_must_score_zero_and_end(engine: ReferenceEngine, words: str) -> None:
    report = run(engine)
    first = report.first_failure
    assert first is not None and first.name == "round_trip" and first.failure is FailureKind.CHECK
    assert words in first.detail


def test_the_helper_fails_with_a_readable_report_naming_every_check(tmp_path: Path) -> None:
    test = conformance_test(lambda: FaultyEngine(ReferenceEngine(), Fault.GET_UNORDERED))
    with pytest.raises(pytest.fail.Exception) as info:
        test(tmp_path)
    message = str(info.value)
    assert "FAILED" in message
    assert all(name in message for name in CHECK_NAMES)
    assert "get" in message and "failed (check)" in message


def test_assert_conforms_returns_the_report_of_a_passing_engine() -> None:
    assert assert_conforms(ReferenceEngine()).passed


# CLI --------------------------------------------------------------------------------------------------------
cli = CliRunner()


def _invoke(*args: str) -> tuple[int, str]:
    result = cli.invoke(load_commands(), ["conformance", *args])
    return result.exit_code, result.output


class NoFetchEngine(ReferenceEngine):
    """A conforming engine that offers no fetch mode: the fetch faults have nothing to break."""

    @classmethod
    def from_url(cls, url: str) -> NoFetchEngine:
        return cls()

    def descriptor(self) -> EngineDescriptor:
        return super().descriptor().model_copy(update={"fetch_modes": ()})


class DownEngine(ReferenceEngine):
    @classmethod
    def from_url(cls, url: str) -> DownEngine:
        return cls()

    def health(self) -> EngineHealth:
        return EngineHealth.down("maintenance [db locked]")


@pytest.fixture
def test_schemes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(memory_core.engines._REGISTRY, "nofetch", f"{__name__}:NoFetchEngine.from_url")
    monkeypatch.setitem(memory_core.engines._REGISTRY, "down", f"{__name__}:DownEngine.from_url")


def test_cli_prints_one_row_per_check_and_exits_zero_on_the_reference_engine() -> None:
    code, out = _invoke("--engine", "reference://?consolidation=automatic")
    assert code == 0, out
    assert "passed" in out
    assert all(name in out for name in CHECK_NAMES)


def test_cli_defaults_to_the_configured_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_CORE_ENGINE", "reference://")
    code, out = _invoke("--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["engine"] == "reference" and data["passed"] is True
    assert [c["name"] for c in data["checks"]] == list(CHECK_NAMES)


def test_cli_exits_nonzero_when_a_check_fails_and_prints_its_detail_verbatim(test_schemes: None) -> None:
    result = cli.invoke(load_commands(), ["conformance", "--engine", "down://"], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "failed (check)" in result.output and "maintenance [db locked]" in result.output


def test_cli_faults_shows_every_fault_caught_by_its_check() -> None:
    code, out = _invoke("--engine", "reference://", "--faults", "--json")
    assert code == 0, out
    rows = json.loads(out)["faults"]
    assert [(r["fault"], r["caught_by"]) for r in rows] == [(f.value, FAULT_CHECKS[f]) for f in Fault]
    code, out = _invoke("--engine", "reference://", "--faults")
    assert code == 0 and "23 of 23 faults caught" in " ".join(out.split())


def test_cli_faults_table_keeps_one_readable_row_per_fault_at_80_columns() -> None:
    result = cli.invoke(load_commands(), ["conformance", "--engine", "reference://", "--faults"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    details = {r.fault: r.detail for r in run_faults(ReferenceEngine)}
    for fault in Fault:  # the fault's name, its check and the detail's first word share the row's first line
        opening = details[fault].split()[0]
        row = [line for line in lines if fault.value in line]
        assert row and FAULT_CHECKS[fault] in row[0] and "caught" in row[0] and opening in row[0], (fault, row)


def test_cli_faults_exits_nonzero_when_a_fault_goes_uncaught(test_schemes: None) -> None:
    assert _invoke("--engine", "nofetch://")[0] == 0  # the engine itself conforms
    code, out = _invoke("--engine", "nofetch://", "--faults", "--json")
    assert code == 1
    uncaught = [r["fault"] for r in json.loads(out)["faults"] if r["caught_by"] is None]
    assert "IgnoreFetchFilter" in uncaught


class _ExportingFaultyEngine(FaultyEngine):
    """A wrapper that also forwards ``export``: ``NeverReplay`` is then caught by ``export`` (re-storing an exported
    item must replay), one check before the ``replay`` check the contract names (see the ``faults`` module)."""

    def _export(self, request: ListRequest) -> ExportPage:
        return self.inner.export(request)


def test_cli_faults_exits_nonzero_when_a_fault_is_caught_by_another_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_core.conformance.runner, "FaultyEngine", _ExportingFaultyEngine)
    code, out = _invoke("--engine", "reference://", "--faults", "--json")
    assert code == 1, out
    rows = {r["fault"]: r for r in json.loads(out)["faults"]}
    assert all(r["caught_by"] is not None for r in rows.values())  # every fault is caught ...
    never = rows[Fault.NEVER_REPLAY.value]
    # ... but not every one by its named check
    assert (never["caught_by"], never["expected"], never["as_named"]) == ("export", "replay", False)
    args = ["conformance", "--engine", "reference://", "--faults"]
    result = cli.invoke(load_commands(), args, env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "22 of 23 faults caught by their named check" in " ".join(result.output.split())
    row = next(line for line in result.output.splitlines() if Fault.NEVER_REPLAY.value in line)
    assert "export" in row and "elsewhere" in row and "expected replay" in row


def test_cli_unknown_scheme_prints_the_known_schemes_and_exits_2() -> None:
    result = CliRunner().invoke(load_commands(), ["conformance", "--engine", "nosuch://x"])
    assert result.exit_code == 2
    assert "unknown engine scheme" in result.output and "reference" in result.output

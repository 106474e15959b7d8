"""The conformance suite, its fault injections and the agent loop over both CortexDB doubles, in process."""

from __future__ import annotations

import re

import pytest

from memory_core.conformance import FAULT_CHECKS, LOG_FAULTS, Fault, run, run_faults
from memory_core.conformance.testing import conformance_test
from memory_core.engines.cortexdb.double import direct_double, double_engine, hosted_double

test_direct_double_conforms = conformance_test(lambda: double_engine(direct_double()))
test_hosted_double_conforms = conformance_test(lambda: double_engine(hosted_double()))

DOUBLES = {"direct": direct_double, "hosted": hosted_double}


@pytest.mark.parametrize("wire", DOUBLES)
def test_every_fault_is_caught_by_its_named_check(wire: str) -> None:
    results = run_faults(lambda: double_engine(DOUBLES[wire]()), tuple(Fault))
    expected = [(f, FAULT_CHECKS[f]) for f in Fault if f not in LOG_FAULTS]  # the wires keep no log
    assert [(r.fault, r.caught_by) for r in results] == expected


@pytest.mark.parametrize("wire", DOUBLES)
def test_the_suite_leaves_the_log_empty_of_its_run_and_uses_only_the_wire_s_routes(wire: str) -> None:
    double = DOUBLES[wire]()
    with double_engine(double) as engine:
        report = run(engine)
    assert report.passed, report.render()
    assert double.log.events == []
    prefix = "v1/" if wire == "direct" else "memory/"
    assert {s.path.split("/")[0] + "/" for s in double.seen} == {prefix}
    assert all(s.status < 500 for s in double.seen)


def test_the_direct_run_builds_through_v1_beliefs_build_and_never_waits_on_accepted_turns() -> None:
    double = direct_double()
    with double_engine(double) as engine:
        assert run(engine).passed
    builds = double.requests("POST", "v1/beliefs/build")
    assert builds and all(set(s.body) == {"scope"} for s in builds)
    assert len({s.body["scope"] for s in builds}) == len(builds)  # once per scope
    writes = double.requests("POST", "v1/experience")
    accepted = [s for s in writes if "store with accepted" in s.body["content"]["text"]]
    assert len(accepted) == 1 and accepted[0].param("wait") is None
    assert all(s.param("wait") == "indexed" for s in writes if s not in accepted)


@pytest.mark.parametrize("wire", DOUBLES)
def test_the_agent_loop_runs_over_the_double(wire: str, capsys: pytest.CaptureFixture[str]) -> None:
    from memory_core.examples.agent_loop import main

    double = DOUBLES[wire]()
    with double_engine(double) as engine:
        main(engine)
    out = capsys.readouterr().out
    before, after = out.split("background: running 4 queued job(s)")
    assert "job queued" in before and "## Brain" in before
    assert "- Billing architecture: Billing runs on Postgres 16 in eu-west-1." in out
    history = after.split("## This agent's history")[1].split("##")[0]
    assert "user: We are moving billing to Postgres 16 next sprint" in history
    if wire == "direct":
        assert after.count("build_beliefs  done") == 4
        marked = re.findall(r"^  Learnings · belief \(tagged belief\): (.*)$", after, re.MULTILINE)
        assert any("Billing" in text for text in marked)
        scopes = [s.body["scope"] for s in double.requests("POST", "v1/beliefs/build")]
        assert "app:tinymemory/team:acme/source:notion/app:documents" in scopes
    else:
        assert after.count("build_beliefs  scheduled") == 4
        assert not [s for s in double.seen if "beliefs" in s.path]


@pytest.mark.parametrize("mode", ["none", "scheduled", "automatic"])
def test_a_consolidation_override_keeps_its_promise(mode: str) -> None:
    double = direct_double()
    with double_engine(double, consolidation=mode) as engine:
        report = run(engine)
    assert report.passed, report.render()
    assert mode in report.result("consolidate").detail
    assert bool(double.requests("POST", "v1/beliefs/build")) == (mode == "automatic")

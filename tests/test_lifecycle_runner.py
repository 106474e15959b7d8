"""BackgroundRunner: outcome mapping per consolidation mode, IngestBrain, job input forms (reference §4.6)."""

from __future__ import annotations

import json

import pytest
from _lifecycle_doubles import Recording, StartedEngine, stored

from memory_core.consolidation import ConsolidateRequest, ConsolidateStatus, Consolidation
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import EngineError, EngineUnavailable, InvalidRequest
from memory_core.items import Conversation, Role, Turn
from memory_core.lifecycle import (
    BackgroundRunner,
    BrainDocument,
    BuildBeliefs,
    IngestBrain,
    JobOutcome,
    JobReport,
    MemoryLayout,
    OutcomeKind,
)
from memory_core.meta import ItemKind, MemoryMeta
from memory_core.namespace import Reach

LAYOUT = MemoryLayout("team:acme")


def build_job() -> BuildBeliefs:
    return BuildBeliefs(request=ConsolidateRequest(reach=Reach.subtree("team:acme"), kinds=(ItemKind.CONVERSATION,)))


def seeded(engine: ReferenceEngine) -> ReferenceEngine:
    turn = Turn(role=Role.USER, text="The deploy window is Tuesday. Later text.")
    engine.store(Conversation(turns=(turn,), meta=MemoryMeta().at("team:acme/agent:ops")))
    return engine


def test_a_completed_build_is_done_with_its_receipt():
    report = BackgroundRunner(seeded(ReferenceEngine()), LAYOUT).run(build_job())
    assert report.outcome == JobOutcome.done()
    assert report.consolidation is not None and report.consolidation.status is ConsolidateStatus.COMPLETED
    assert report.consolidation.built == 1 and report.stored == () and report.follow_ups == ()


def test_a_scheduled_build_is_scheduled():
    report = BackgroundRunner(seeded(ReferenceEngine(Consolidation.SCHEDULED)), LAYOUT).run(build_job())
    assert report.outcome.outcome is OutcomeKind.SCHEDULED
    assert report.consolidation is not None and report.consolidation.status is ConsolidateStatus.SCHEDULED


def test_a_started_build_is_started():
    report = BackgroundRunner(StartedEngine(), LAYOUT).run(build_job())
    assert report.outcome.outcome is OutcomeKind.STARTED
    assert report.consolidation is not None and report.consolidation.jobs == ("job-1",)


def test_an_automatic_engine_still_builds_on_request():
    report = BackgroundRunner(seeded(ReferenceEngine(Consolidation.AUTOMATIC)), LAYOUT).run(build_job())
    assert report.outcome == JobOutcome.done()


def test_unsupported_is_skipped_with_its_reason_not_an_error():
    report = BackgroundRunner(ReferenceEngine(Consolidation.NONE), LAYOUT).run(build_job())
    assert report.outcome == JobOutcome.skipped("engine `reference` does not consolidate")
    assert report.consolidation is None
    assert json.loads(report.to_json())["outcome"] == {
        "outcome": "skipped",
        "reason": "engine `reference` does not consolidate",
    }


@pytest.mark.parametrize("error", [EngineUnavailable("locked"), EngineError("corrupt index")])
def test_other_engine_errors_raise(error):
    engine = Recording()
    engine.fail_when("consolidate", error)
    with pytest.raises(type(error)):
        BackgroundRunner(engine, LAYOUT).run(build_job())


def test_ingest_brain_stores_and_returns_the_builds_as_follow_ups():
    engine = ReferenceEngine()
    job = IngestBrain(
        documents=(
            BrainDocument.new("notion", "Refunds take five days."),
            BrainDocument.new("github", "CI runs on every push."),
            BrainDocument.new("notion", "Support answers within a day."),
        )
    )
    report = BackgroundRunner(engine, LAYOUT).run(job)
    assert report.outcome == JobOutcome.done() and report.consolidation is None
    assert [r.id for r in report.stored] == [i.id for i in stored(engine)]
    assert [j.request.reach.at for j in report.follow_ups] == [LAYOUT.brain("notion"), LAYOUT.brain("github")]


def test_ingest_brain_under_automatic_has_no_follow_ups():
    job = IngestBrain(documents=(BrainDocument.new("web", "A page."),))
    report = BackgroundRunner(ReferenceEngine(Consolidation.AUTOMATIC), LAYOUT).run(job)
    assert report.follow_ups == () and len(report.stored) == 1
    assert "follow_ups" not in json.loads(report.to_json())


def test_the_runner_accepts_a_dict_json_text_and_bytes():
    runner = BackgroundRunner(seeded(ReferenceEngine()), LAYOUT)
    job = build_job()
    as_dict = job.to_dict()
    assert runner.run(as_dict).job == job
    assert runner.run(job.to_json()).job == job
    assert runner.run(job.to_json().encode()).job == job


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"job": "reindex"}, "job"),
        ('{"job": "build_beliefs"}', "request"),
        ({"job": "ingest_brain", "documents": []}, "documents"),
        (42, "job"),
    ],
)
def test_a_malformed_job_is_refused_and_nothing_runs(raw, field):
    engine = Recording()
    with pytest.raises(InvalidRequest) as err:
        BackgroundRunner(engine, LAYOUT).run(raw)
    assert err.value.field == field
    assert engine.calls == []


def test_an_ingest_job_with_one_invalid_document_stores_nothing():
    engine = Recording()
    raw = {"job": "ingest_brain", "documents": [{"source": "notion", "text": "ok"}, {"source": "notion", "text": " "}]}
    with pytest.raises(InvalidRequest) as err:
        BackgroundRunner(engine, LAYOUT).run(raw)
    assert err.value.field == "documents.1.text"
    assert engine.calls == []


def test_a_report_round_trips_through_json():
    report = BackgroundRunner(ReferenceEngine(), LAYOUT).run(IngestBrain(documents=(BrainDocument.new("pdf", "é"),)))
    assert JobReport.model_validate_json(report.to_json()) == report

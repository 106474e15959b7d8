"""BackgroundRunner: outcome mapping per consolidation mode, IngestBrain, job input forms (reference §4.6)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from _lifecycle_doubles import Recording, StartedEngine, stored
from typer.testing import CliRunner

from memory_core.consolidation import ConsolidateRequest, ConsolidateStatus, Consolidation
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import EngineError, EngineUnavailable, InvalidRequest
from memory_core.items import Conversation, Role, Turn
from memory_core.lifecycle import (
    BackgroundRunner,
    Brain,
    BrainDocument,
    BuildBeliefs,
    IngestBrain,
    JobOutcome,
    JobReport,
    MemoryLayout,
    OutcomeKind,
)
from memory_core.meta import ItemKind, MemoryMeta
from memory_core.namespace import Namespace, Reach

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


# the job's layout root ----------------------------------------------------------------------------------
def test_an_ingest_job_is_stored_under_its_root_not_the_runners():
    engine = ReferenceEngine()
    host = MemoryLayout("team:watch")
    job = Brain(engine, host).ingest_job([BrainDocument.new("notion", "Refunds take five days.")], collection="faq")
    worker = BackgroundRunner(engine, MemoryLayout())  # a worker configured with another root
    report = worker.run(job.to_json())  # as it crosses the queue
    (item,) = stored(engine)
    assert item.meta.namespace == Namespace.parse("team:watch/source:notion/project:faq")
    assert [j.request.reach for j in report.follow_ups] == [Reach.subtree("team:watch/source:notion")]


def test_an_ingest_job_without_a_root_uses_the_runners_layout_and_keeps_the_contract_json():
    engine = ReferenceEngine()
    job = IngestBrain(documents=(BrainDocument.new("notion", "A page."),))
    assert "root" not in json.loads(job.to_json())
    BackgroundRunner(engine, LAYOUT).run(job)
    assert [str(i.meta.namespace) for i in stored(engine)] == ["team:acme/source:notion"]
    assert json.loads(job.placed_at("team:watch").to_json())["root"] == "team:watch"


@pytest.mark.parametrize(("root", "message"), [("team", "kind:id"), ("/".join(["team:a"] * 8), "exceeds 7")])
def test_a_bad_root_is_refused_before_anything_runs(root, message):
    engine = Recording()
    raw = {"job": "ingest_brain", "documents": [{"source": "notion", "text": "ok"}], "root": root}
    with pytest.raises(InvalidRequest) as err:
        BackgroundRunner(engine, LAYOUT).run(raw)
    assert err.value.field == "root" and message in str(err.value)
    assert engine.calls == []


def test_a_build_is_self_contained_whatever_the_runners_layout():
    engine = Recording(seeded(ReferenceEngine()))
    job = build_job()
    BackgroundRunner(engine, MemoryLayout("team:elsewhere")).run(job)
    assert [c.arg for c in engine.of("consolidate")] == [job.request]


class _Queue:
    """Stands in for ``workers.queue.JobQueue``: keeps what was submitted."""

    def __init__(self) -> None:
        self.jobs: list[IngestBrain] = []

    def send(self, job: IngestBrain) -> SimpleNamespace:
        self.jobs.append(job)
        return SimpleNamespace(id=f"job-{len(self.jobs)}", state="published")

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("args", "root"), [((), "team:watch"), (("--root", "team:other"), "team:other")])
def test_the_ingest_command_names_the_layout_root_in_its_jobs(monkeypatch, tmp_path, args, root):
    import memory_core.cli.ingest as ingest_cli
    from memory_core.cli import load_commands
    from memory_core.settings import get_settings

    (tmp_path / "faq.md").write_text("# FAQ\n\nRefunds take five days.\n")
    queue = _Queue()
    monkeypatch.setattr(ingest_cli, "open_queue", lambda: queue)
    env = {"MEMORY_CORE_LAYOUT_ROOT": "team:watch", "MEMORY_CORE_VAR_DIR": str(tmp_path / "var")}
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(load_commands(), ["ingest", str(tmp_path / "faq.md"), *args], env=env)
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert queue.jobs and {str(job.root) for job in queue.jobs} == {root}
    engine = ReferenceEngine()
    BackgroundRunner(engine, MemoryLayout()).run(queue.jobs[0].to_json())
    assert {str(i.meta.namespace) for i in stored(engine)} == {f"{root}/source:markdown"}

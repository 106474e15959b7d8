"""ToolWrites: learn/forget never fail the caller; when the engine is away the scrubbed request becomes a
``tool_write`` job, queued behind the place's earlier ones; applying a job twice changes nothing.

The job flow itself (a real worker, the outbox while Redis is down, dead letters) is tested in
``tests/workers/test_workers_tool_writes.py``; here a sink records the jobs and a test applies them as a worker
would (``apply_tool_write``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memory_core import ListRequest
from memory_core.consolidation import WriteOptions
from memory_core.engine import AnyItem
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import EngineUnavailable, InvalidRequest
from memory_core.facts.model import content_hash, read_tags, user_tags
from memory_core.items import Learning
from memory_core.meta import MemoryMeta
from memory_core.namespace import Namespace, Reach
from memory_core.query import ForgetReport, ForgetTarget, StoreReceipt
from memory_core.safety.jobs import scrub_job
from memory_core.tools import ToolScope
from memory_core.tools.jobs import ORDER_HOLD_S, ToolWrite, apply_tool_write
from memory_core.tools.writes import QUEUED_REMOVE, QUEUED_SAVE, ToolWrites

AWS = "AKIAIOSFODNN7EXAMPLE"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class Flaky(ReferenceEngine):
    """An engine that can stop answering; records the texts it stored, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.up = True
        self.stored: list[str] = []

    def _check(self) -> None:
        if not self.up:
            raise EngineUnavailable("connection refused")

    def _store_with(self, item: AnyItem, options: WriteOptions) -> StoreReceipt:
        self._check()
        self.stored.append(item.render_text())
        return super()._store_with(item, options)

    def _forget(self, target: ForgetTarget) -> ForgetReport:
        self._check()
        return super()._forget(target)

    def _forget_within(self, ids: Sequence[str], reach: Reach) -> ForgetReport:
        self._check()
        return super()._forget_within(ids, reach)


@dataclass
class Sink:
    """The job flow as a list: ``submit`` keeps the job; ``run`` applies the next one as a worker would."""

    engine: ReferenceEngine
    jobs: dict[str, ToolWrite] = field(default_factory=dict)
    finished_ids: set[str] = field(default_factory=set)
    down: bool = False

    def submit(self, job: ToolWrite) -> str:
        job_id = f"job-{len(self.jobs) + 1}"
        self.jobs[job_id] = ToolWrite.model_validate_json(job.to_json())  # it travels as JSON
        return job_id

    def finished(self, job_id: str) -> bool:
        if self.down:
            raise EngineUnavailable("coordination store unreachable")
        return job_id in self.finished_ids

    def run(self, job_id: str) -> dict[str, object]:
        job = self.jobs[job_id]
        assert job.after is None or job.after in self.finished_ids, "a job ran before the one it follows"
        out = apply_tool_write(self.engine, job)
        self.finished_ids.add(job_id)
        return out


@pytest.fixture
def engine() -> Flaky:
    return Flaky()


@pytest.fixture
def sink(engine: Flaky) -> Sink:
    return Sink(engine)


@pytest.fixture
def writes(engine: Flaky, sink: Sink) -> ToolWrites:
    return ToolWrites(engine, sink, ToolScope.at("agent:writer"), clock=lambda: NOW)


def _texts(engine: ReferenceEngine) -> list[str]:
    return sorted(h.text for h in engine.list(ListRequest(limit=100)).items)


def test_with_an_engine_that_answers_learn_is_saved_at_once_and_scrubbed(
    writes: ToolWrites, engine: Flaky, sink: Sink
) -> None:
    ack = writes.learn(f"the deploy key is {AWS}", tags=["ops"])
    assert (ack.state, ack.message, ack.job_id) == ("saved", "saved", None)
    assert _texts(engine) == ["the deploy key is [REDACTED]"] and sink.jobs == {}
    (hit,) = engine.list(ListRequest(limit=10)).items
    assert user_tags(hit.meta.tags) == ("ops",)
    # a fact's content hash is of the scrubbed text, never of the secret (issue 20)
    assert read_tags(hit.meta.tags).content_hash == content_hash("the deploy key is [REDACTED]")


def test_when_the_engine_is_away_learn_becomes_a_scrubbed_job_and_a_worker_applies_it(
    writes: ToolWrites, engine: Flaky, sink: Sink
) -> None:
    engine.up = False
    ack = writes.learn(f"the deploy key is {AWS}", evidence=f"pasted {AWS}")
    assert (ack.state, ack.message) == ("queued", QUEUED_SAVE) and ack.to_dict()["job_id"] == ack.job_id
    job = sink.jobs[str(ack.job_id)]
    assert AWS not in job.to_json() and job.op == "learn" and job.place == Namespace.parse("agent:writer")
    assert job.learning is not None and job.learning.id == ack.id
    engine.up = True
    assert sink.run(str(ack.job_id))["replayed"] is False
    assert _texts(engine) == ["the deploy key is [REDACTED]"]


def test_requests_for_one_place_queue_behind_an_unfinished_one_and_apply_in_order(
    writes: ToolWrites, engine: Flaky, sink: Sink
) -> None:
    engine.up = False
    first = writes.learn("Prefers tea")
    engine.up = True  # the engine is back, but the first request has not been applied yet
    second = writes.learn("Prefers green tea")
    forget = writes.forget([str(first.id)])  # a forget of a queued learning queues behind it
    assert [a.state for a in (first, second, forget)] == ["queued", "queued", "queued"]
    assert forget.message == QUEUED_REMOVE and engine.stored == []
    chain = [sink.jobs[str(a.job_id)] for a in (first, second, forget)]
    assert [j.after for j in chain] == [None, first.job_id, second.job_id]
    for ack in (first, second, forget):
        sink.run(str(ack.job_id))
    assert engine.stored == ["Prefers tea", "Prefers green tea"] and _texts(engine) == ["Prefers green tea"]
    # every queued request finished: the next one goes to the engine at once
    assert not writes.waiting and writes.learn("Drinks it at nine").state == "saved"


def test_while_the_flow_cannot_say_a_job_finished_the_order_is_kept(
    writes: ToolWrites, engine: Flaky, sink: Sink
) -> None:
    engine.up = False
    first = writes.learn("Prefers tea")
    engine.up = True
    sink.finished_ids.add(str(first.job_id))
    sink.down = True
    second = writes.learn("Prefers coffee")
    assert second.state == "queued" and sink.jobs[str(second.job_id)].after == first.job_id
    sink.down = False
    assert writes.waiting  # the second has not finished
    sink.finished_ids.add(str(second.job_id))
    assert not writes.waiting


def test_forget_with_an_engine_that_answers_removes_only_ids_under_the_reach(writes: ToolWrites, engine: Flaky) -> None:
    mine = writes.learn("Prefers tea")
    other = engine.store(Learning(text="Lives in Lisbon", meta=MemoryMeta(namespace=Namespace.parse("agent:other"))))
    ack = writes.forget([str(mine.id), other.id, str(mine.id)])
    assert (ack.state, ack.forgotten) == ("removed", 1) and _texts(engine) == ["Lives in Lisbon"]


def test_applying_a_job_twice_changes_nothing(engine: Flaky) -> None:
    learning = Learning(text="Prefers tea", meta=MemoryMeta(namespace=Namespace.parse("agent:writer")))
    learn = ToolWrite(op="learn", place="agent:writer", learning=learning, made_at=NOW)
    assert apply_tool_write(engine, learn)["replayed"] is False
    assert apply_tool_write(engine, learn) == {
        "job": "tool_write",
        "op": "learn",
        "place": "agent:writer",
        "id": learning.id,
        "replayed": True,
    }
    forget = ToolWrite(op="forget", place="agent:writer", ids=(learning.id,), made_at=NOW)
    assert [apply_tool_write(engine, forget)["forgotten"] for _ in range(2)] == [1, 0]
    assert _texts(engine) == []


def test_bad_requests_are_refused_and_nothing_is_stored_or_queued(
    writes: ToolWrites, engine: Flaky, sink: Sink
) -> None:
    engine.up = False
    for call, field_name in (
        (lambda: writes.learn("   "), "text"),
        (lambda: writes.learn("x", kind="rumour"), "kind"),
        (lambda: writes.learn("x", confidence=1.5), "confidence"),
        (lambda: writes.forget([]), "ids"),
        (lambda: writes.forget(["ok", " "]), "ids"),
        (lambda: writes.forget([f"id-{i}" for i in range(201)]), "ids"),
    ):
        with pytest.raises(InvalidRequest) as info:
            call()
        assert info.value.field == field_name
    assert sink.jobs == {} and engine.stored == []


@pytest.mark.parametrize(
    ("fields", "field_name"),
    [
        ({"op": "learn"}, "learning"),
        ({"op": "learn", "ids": ["a"], "learning": "L"}, "ids"),
        ({"op": "forget"}, "ids"),
        ({"op": "forget", "ids": ["a"], "learning": "L"}, "learning"),
        ({"op": "learn", "learning": "L", "place": "agent:else"}, "learning"),
        ({"op": "erase", "ids": ["a"]}, "op"),
    ],
)
def test_a_tool_write_that_cannot_run_is_refused_naming_the_field(fields: dict[str, object], field_name: str) -> None:
    learning = Learning(text="Prefers tea", meta=MemoryMeta(namespace=Namespace.parse("agent:writer")))
    raw = {"job": "tool_write", "place": "agent:writer", "made_at": "2026-12-01T12:00:00Z", **fields}
    if raw.get("learning") == "L":
        raw["learning"] = learning.to_dict()
    with pytest.raises(InvalidRequest) as info:
        ToolWrite.model_validate(raw)
    assert info.value.field == field_name


def test_a_job_holds_for_the_one_before_it_only_so_long() -> None:
    job = ToolWrite(op="forget", place="agent:writer", ids=("a",), made_at=NOW)
    assert not job.holds_for(NOW)  # nothing before it
    chained = job.model_copy(update={"after": "job-1"})
    assert chained.holds_for(NOW + timedelta(seconds=ORDER_HOLD_S - 1))
    assert not chained.holds_for(NOW + timedelta(seconds=ORDER_HOLD_S + 1))
    assert chained.describe() == "tool_write forget 1 id agent:writer"


def test_scrub_job_scrubs_a_tool_writes_learning_and_leaves_a_clean_one_alone() -> None:
    meta = MemoryMeta(namespace=Namespace.parse("agent:writer"))
    dirty = ToolWrite(
        op="learn", place="agent:writer", learning=Learning(text=f"key {AWS}", evidence=AWS, meta=meta), made_at=NOW
    )
    scrubbed = scrub_job(dirty)
    assert AWS not in scrubbed.to_json() and scrubbed.learning is not None
    assert scrubbed.learning.text == "key [REDACTED]"
    clean = ToolWrite(op="learn", place="agent:writer", learning=Learning(text="Prefers tea", meta=meta), made_at=NOW)
    assert scrub_job(clean) is clean


def test_a_learning_records_the_agent_the_writes_serve_saved_or_queued(engine: Flaky, sink: Sink) -> None:
    scope = replace(ToolScope.at("agent:writer"), agent_id="writer")
    writes = ToolWrites(engine, sink, scope, clock=lambda: NOW)
    writes.learn("Prefers tea")
    engine.up = False
    queued = writes.learn("Prefers coffee")
    learning = sink.jobs[str(queued.job_id)].learning
    assert learning is not None and learning.meta.agent_id == "writer"
    engine.up = True
    sink.run(str(queued.job_id))
    assert {h.meta.agent_id for h in engine.list(ListRequest(limit=10)).items} == {"writer"}


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda w: w.forget(["a\x00b"]), "ids"),
        (lambda w: w.learn("The UI theme is dark", key="ui\x00theme"), "key"),
        (lambda w: w.learn("The UI theme is dark", key="ui.theme", importance=float("nan")), "importance"),
    ],
    ids=["nul-id", "nul-key", "nan-importance"],
)
def test_a_request_no_engine_could_store_is_refused_while_the_engine_is_away_and_nothing_is_queued(
    writes: ToolWrites, engine: Flaky, sink: Sink, call: Any, named: str
) -> None:
    engine.up = False  # before: the request was queued ("queued"), then failed in the worker
    with pytest.raises(InvalidRequest) as caught:
        call(writes)
    assert caught.value.field == named and sink.jobs == {} and engine.stored == []

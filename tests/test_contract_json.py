"""The JSON shapes of the contract reference §1 (and the job values of §4.6), pinned as literal JSON.

``pinned`` compares the compact JSON text, so field order and omission rules are pinned too, then parses the
literal back and checks it is the same value.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import Any

import pytest

from memory_core import (
    BeliefsRequest,
    Bucket,
    Citation,
    ConsolidateReceipt,
    ConsolidateRequest,
    ConsolidateStatus,
    Consolidation,
    Conversation,
    Document,
    DocumentBody,
    EngineDescriptor,
    EngineHealth,
    EraseReport,
    EraseRequest,
    ExplorePage,
    ExploreRequest,
    Exported,
    ExportPage,
    Facet,
    FetchMode,
    FetchPage,
    FetchRequest,
    ForgetReport,
    ForgetTarget,
    GetRequest,
    Hit,
    ItemKind,
    Learning,
    LearningKind,
    ListPage,
    ListRequest,
    MemoryMeta,
    MetaFilter,
    ObservedActor,
    Reach,
    RecallAnswer,
    RecallRequest,
    Role,
    SourceKind,
    SourceRef,
    StoreReceipt,
    TimeHint,
    ToolCallMeta,
    ToolCallRef,
    Turn,
    TurnRange,
    WriteOptions,
    parse_item,
)
from memory_core._model import ContractModel
from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.jobs import BuildBeliefs, IngestBrain, JobOutcome, JobReport, OutcomeKind, parse_job

AGENT = {"kind": "agent"}


def compact(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def pinned(value: ContractModel, expected: dict[str, Any]) -> None:
    assert value.to_json() == compact(expected)
    assert type(value).model_validate_json(compact(expected)) == value


# items (§1.4) -----------------------------------------------------------------------------------------------
def test_a_minimal_document_is_tagged_type_and_omits_unset_fields() -> None:
    pinned(Document.of("hello"), {"type": "document", "body": {"text": "hello"}, "meta": {"source": AGENT}})


def test_a_full_document_keeps_declared_field_order() -> None:
    doc = Document(
        title="Plan",
        body=DocumentBody(text="Step one."),
        mime="text/markdown",
        meta=MemoryMeta.model_validate({"namespace": "team:acme/agent:writer", "workspace": "w", "tags": ["t"]}),
    )
    pinned(
        doc,
        {
            "type": "document",
            "title": "Plan",
            "body": {"text": "Step one."},
            "mime": "text/markdown",
            "meta": {"namespace": "team:acme/agent:writer", "workspace": "w", "source": AGENT, "tags": ["t"]},
        },
    )


def test_a_uri_body_serialises_as_uri() -> None:
    assert DocumentBody(uri="https://x.test/a").to_dict() == {"uri": "https://x.test/a"}


def test_a_conversation_turn_omits_empty_tool_calls_and_prints_rfc3339_times() -> None:
    conv = Conversation(
        turns=(
            Turn(role=Role.USER, text="hi", at=datetime(2025, 5, 6, 7, 8, 9, tzinfo=UTC)),
            Turn(
                role=Role.ASSISTANT,
                text="hello",
                at=datetime(2025, 5, 6, 7, 8, 9, 250000, tzinfo=UTC),
                tool_calls=(ToolCallRef(name="search", id="c1"), ToolCallRef(name="read")),
            ),
        ),
        meta=MemoryMeta(source=SourceRef(kind=SourceKind.CONVERSATION, id="t1")),
    )
    pinned(
        conv,
        {
            "type": "conversation",
            "turns": [
                {"role": "user", "text": "hi", "at": "2025-05-06T07:08:09Z"},
                {
                    "role": "assistant",
                    "text": "hello",
                    "at": "2025-05-06T07:08:09.250Z",
                    "tool_calls": [{"name": "search", "id": "c1"}, {"name": "read"}],
                },
            ],
            "meta": {"source": {"kind": "conversation", "id": "t1"}},
        },
    )


def test_a_learning_carries_kind_confidence_and_evidence_in_order() -> None:
    learning = Learning(text="prefers tea", kind=LearningKind.PREFERENCE, confidence=0.75, evidence="said so")
    pinned(
        learning,
        {
            "type": "learning",
            "text": "prefers tea",
            "kind": "preference",
            "confidence": 0.75,
            "evidence": "said so",
            "meta": {"source": AGENT},
        },
    )


def test_parse_item_dispatches_on_the_type_tag() -> None:
    item = parse_item({"type": "learning", "text": "x", "kind": "fact", "confidence": 0.5})
    assert isinstance(item, Learning) and item.kind is LearningKind.FACT


# meta (§1.5) and filters (§1.6) -----------------------------------------------------------------------------
def test_meta_with_every_field_serialises_in_declared_order() -> None:
    meta = MemoryMeta(
        namespace="agent:x",
        workspace="/w",
        folder="/w/src",
        file_path="/w/src/a.py",
        language="en",
        repo="owner/name",
        commit="c0ffee",
        url="https://x.test",
        thread_id="t1",
        turns=TurnRange(first=4, last=5),
        agent_id="writer",
        tool_call=ToolCallMeta(name="search", id="c1"),
        source=SourceRef(kind=SourceKind.FILE, id="f1"),
        tags=("a", "b"),
        observed_at=datetime(2001, 1, 1, tzinfo=UTC),
        observed_actor=ObservedActor(id="user:priya@acme.com", name="Priya"),
        derive=False,
    )
    pinned(
        meta,
        {
            "namespace": "agent:x",
            "workspace": "/w",
            "folder": "/w/src",
            "file_path": "/w/src/a.py",
            "language": "en",
            "repo": "owner/name",
            "commit": "c0ffee",
            "url": "https://x.test",
            "thread_id": "t1",
            "turns": {"first": 4, "last": 5},
            "agent_id": "writer",
            "tool_call": {"name": "search", "id": "c1"},
            "source": {"kind": "file", "id": "f1"},
            "tags": ["a", "b"],
            "observed_at": "2001-01-01T00:00:00Z",
            "observed_actor": {"id": "user:priya@acme.com", "name": "Priya"},
            "derive": False,
        },
    )


def test_meta_omits_a_root_namespace_empty_tags_and_unset_derive_but_always_has_a_source() -> None:
    pinned(MemoryMeta(), {"source": AGENT})
    assert MemoryMeta(derive=True).to_dict() == {"source": AGENT, "derive": True}


def test_the_empty_filter_is_an_empty_object_and_set_fields_appear() -> None:
    pinned(MetaFilter(), {})
    flt = MetaFilter(
        reach=Reach.exact("agent:x"),
        workspace="w",
        kinds=(ItemKind.LEARNING,),
        sources=(SourceKind.FILE,),
        tags_any=("a",),
        observed_after=datetime(2000, 1, 1, tzinfo=UTC),
    )
    pinned(
        flt,
        {
            "reach": {"at": "agent:x", "inherit": False, "descendants": False},
            "workspace": "w",
            "kinds": ["learning"],
            "sources": ["file"],
            "tags_any": ["a"],
            "observed_after": "2000-01-01T00:00:00Z",
        },
    )


# reach (§1.7) -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reach", "expected"),
    [
        (Reach.exact("agent:x"), {"at": "agent:x", "inherit": False, "descendants": False}),
        (Reach.of("team:acme/agent:w"), {"at": "team:acme/agent:w", "inherit": True, "descendants": False}),
        (Reach.subtree(), {"at": "root", "inherit": False, "descendants": True}),
        (Reach(), {"at": "root", "inherit": True, "descendants": False}),
    ],
    ids=["exact", "of", "subtree-root", "default"],
)
def test_a_reach_serialises_as_at_inherit_descendants(reach: Reach, expected: dict[str, Any]) -> None:
    pinned(reach, expected)


# requests and responses (§1.3, §1.8-§1.11) ------------------------------------------------------------------
def test_fetch_request_omits_beliefs_when_zero() -> None:
    pinned(FetchRequest(query="q"), {"query": "q", "mode": "hybrid", "filter": {}, "limit": 10})
    request = FetchRequest(
        query="q",
        mode=FetchMode.KEYWORD,
        limit=5,
        cursor="2",
        beliefs=3,
        refers_to=TimeHint.model_validate({"from": "2024-01-01", "to": "2024-01-02", "zone": "Europe/Paris"}),
        max_scopes=2,
    )
    pinned(
        request,
        {
            "query": "q",
            "mode": "keyword",
            "filter": {},
            "limit": 5,
            "cursor": "2",
            "beliefs": 3,
            "refers_to": {"from": "2024-01-01", "to": "2024-01-02", "zone": "Europe/Paris"},
            "max_scopes": 2,
        },
    )


def test_a_time_hint_uses_from_on_the_wire() -> None:
    hint = TimeHint.model_validate({"from": "2024-03-01", "to": "2024-03-01"})
    assert hint.from_ == date(2024, 3, 1)
    pinned(hint, {"from": "2024-03-01", "to": "2024-03-01"})


def test_hits_pages_and_receipts() -> None:
    learning = Learning(text="t", confidence=0.5)
    hit = Hit.of(learning, 0.25)
    pinned(
        hit,
        {
            "id": learning.id,
            "kind": "learning",
            "text": "t",
            "meta": {"source": AGENT},
            "score": 0.25,
            "confidence": 0.5,
        },
    )
    doc_hit = Hit.of(Document.of("d"))
    assert "confidence" not in doc_hit.to_dict()
    pinned(FetchPage(), {"hits": [], "beliefs": []})
    pinned(ListPage(next_cursor="2"), {"items": [], "next_cursor": "2"})
    pinned(StoreReceipt(id="abc"), {"id": "abc", "replayed": False})
    pinned(ForgetReport(forgotten=2), {"forgotten": 2})


def test_recall_request_and_answer() -> None:
    pinned(RecallRequest(question="why?"), {"question": "why?", "filter": {}, "limit": 10})
    answer = RecallAnswer(
        answer="because",
        citations=(Citation(id="i", kind=ItemKind.DOCUMENT, snippet="s", meta=MemoryMeta(), score=0.5),),
        model="reference",
    )
    pinned(
        answer,
        {
            "answer": "because",
            "citations": [{"id": "i", "kind": "document", "snippet": "s", "meta": {"source": AGENT}, "score": 0.5}],
            "model": "reference",
        },
    )


def test_forget_targets_are_ids_or_filter() -> None:
    pinned(ForgetTarget(ids=("a", "b")), {"ids": ["a", "b"]})
    pinned(
        ForgetTarget(filter=MetaFilter(reach=Reach.exact("agent:x"))),
        {"filter": {"reach": Reach.exact("agent:x").to_dict()}},
    )


def test_list_get_export_erase_explore_shapes() -> None:
    pinned(ListRequest(), {"filter": {}, "limit": 50})
    pinned(GetRequest(ids=("a",), reach=Reach.of("agent:x")), {"ids": ["a"], "reach": Reach.of("agent:x").to_dict()})
    doc = Document.of("d")
    pinned(
        ExportPage(items=(Exported(id=doc.id, item=doc),)),
        {"items": [{"id": doc.id, "item": doc.to_dict()}], "incomplete": []},
    )
    pinned(
        EraseRequest(reach=Reach.subtree("agent:x"), kinds=(ItemKind.LEARNING,)),
        {"reach": Reach.subtree("agent:x").to_dict(), "kinds": ["learning"], "whole_tree": False},
    )
    pinned(EraseReport(erased_scopes=1, receipts=("r",)), {"erased_scopes": 1, "receipts": ["r"]})
    pinned(ExploreRequest(facet=Facet.TAG), {"facet": "tag", "filter": {}, "limit": 50, "scan_limit": 5000})
    pinned(
        ExplorePage(facet=Facet.KIND, buckets=(Bucket(value="document", count=2),), total=2),
        {
            "facet": "kind",
            "buckets": [{"value": "document", "count": 2}],
            "total": 2,
            "missing": 0,
            "more_buckets": 0,
            "truncated": False,
        },
    )


def test_write_options_consolidation_and_beliefs() -> None:
    pinned(WriteOptions(), {"wait": "visible"})
    pinned(WriteOptions.accepted(), {"wait": "accepted"})
    pinned(ConsolidateRequest(reach=Reach.exact("agent:x")), {"reach": Reach.exact("agent:x").to_dict()})
    pinned(
        ConsolidateRequest(reach=Reach.exact("agent:x"), kinds=(ItemKind.CONVERSATION,)),
        {"reach": Reach.exact("agent:x").to_dict(), "kinds": ["conversation"]},
    )
    pinned(ConsolidateReceipt.scheduled(), {"status": "scheduled", "jobs": [], "scopes": 0})
    pinned(
        ConsolidateReceipt(status=ConsolidateStatus.COMPLETED, scopes=3, built=2),
        {"status": "completed", "jobs": [], "scopes": 3, "built": 2},
    )
    pinned(BeliefsRequest(reach=Reach.exact("agent:x")), {"reach": Reach.exact("agent:x").to_dict(), "limit": 10})


def test_descriptor_and_health() -> None:
    descriptor = EngineDescriptor(
        id="reference", label="Reference", fetch_modes=FetchMode.all(), consolidation=Consolidation.ON_DEMAND
    )
    pinned(
        descriptor,
        {
            "id": "reference",
            "label": "Reference",
            "description": "",
            "hosted": False,
            "needs_endpoint": False,
            "needs_key": False,
            "fetch_modes": ["keyword", "vector", "hybrid"],
            "consolidation": "on_demand",
        },
    )
    pinned(EngineHealth.ok(), {"state": "ok"})
    pinned(EngineHealth.down("maintenance"), {"state": "down", "reason": "maintenance"})


# background jobs (§4.6) -------------------------------------------------------------------------------------
def test_build_beliefs_job_json_matches_the_reference_example() -> None:
    job = BuildBeliefs(request=ConsolidateRequest(reach=Reach.exact("agent:x"), kinds=(ItemKind.CONVERSATION,)))
    expected = {
        "job": "build_beliefs",
        "request": {"reach": {"at": "agent:x", "inherit": False, "descendants": False}, "kinds": ["conversation"]},
    }
    pinned(job, expected)
    assert parse_job(compact(expected)) == job
    assert job.name() == "build_beliefs"
    omitted = BuildBeliefs(request=ConsolidateRequest(reach=Reach.exact("root")))
    pinned(omitted, {"job": "build_beliefs", "request": {"reach": Reach.exact("root").to_dict()}})


def test_ingest_brain_job_json() -> None:
    document = BrainDocument.new("notion", "Body text.", title="Title", mime="text/plain")
    job = IngestBrain(documents=(document,))
    expected = {
        "job": "ingest_brain",
        "documents": [
            {
                "source": "notion",
                "title": "Title",
                "text": "Body text.",
                "mime": "text/plain",
                "meta": {"source": AGENT},
            }
        ],
    }
    pinned(job, expected)
    assert parse_job(expected) == job and job.name() == "ingest_brain"


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (JobOutcome.done(), {"outcome": "done"}),
        (JobOutcome(outcome=OutcomeKind.STARTED), {"outcome": "started"}),
        (JobOutcome(outcome=OutcomeKind.SCHEDULED), {"outcome": "scheduled"}),
        (
            JobOutcome.skipped("engine does not consolidate"),
            {"outcome": "skipped", "reason": "engine does not consolidate"},
        ),
    ],
    ids=["done", "started", "scheduled", "skipped"],
)
def test_job_outcomes_are_tagged_outcome(outcome: JobOutcome, expected: dict[str, Any]) -> None:
    pinned(outcome, expected)


def test_a_job_report_omits_empty_fields() -> None:
    job = BuildBeliefs(request=ConsolidateRequest(reach=Reach.exact("agent:x")))
    report = JobReport(job=job, outcome=JobOutcome.done(), consolidation=ConsolidateReceipt.scheduled())
    pinned(
        report,
        {
            "job": job.to_dict(),
            "outcome": {"outcome": "done"},
            "consolidation": {"status": "scheduled", "jobs": [], "scopes": 0},
        },
    )
    full = JobReport(
        job=job,
        outcome=JobOutcome.done(),
        stored=(StoreReceipt(id="a", replayed=True),),
        follow_ups=(job,),
    )
    assert full.to_dict() == {
        "job": job.to_dict(),
        "outcome": {"outcome": "done"},
        "stored": [{"id": "a", "replayed": True}],
        "follow_ups": [job.to_dict()],
    }

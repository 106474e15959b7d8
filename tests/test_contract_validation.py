"""Bad input is refused with ``InvalidRequest`` naming the field, and nothing already stored changes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memory_core import (
    Document,
    ExploreRequest,
    FetchRequest,
    ForgetTarget,
    GetRequest,
    InvalidRequest,
    Learning,
    MemoryMeta,
    Namespace,
    Reach,
    RecallRequest,
)
from memory_core._model import ContractModel
from memory_core.consolidation import BeliefsRequest, ConsolidateRequest
from memory_core.engines.reference import ReferenceEngine
from memory_core.items import parse_item

NINE_DEEP = "/".join(f"agent:a{i}" for i in range(9))
DOC = {"type": "document", "body": {"text": "fine"}}


@pytest.fixture
def engine() -> ReferenceEngine:
    """An engine already holding one item of each kind, at two nodes."""
    held = ReferenceEngine()
    held.store_many(
        [
            Document.of("kept document"),
            Learning(text="kept learning", meta=MemoryMeta.model_validate({"namespace": "agent:x"})),
            {"type": "conversation", "turns": [{"role": "user", "text": "kept turn"}]},
        ]
    )
    return held


# (method, arguments, field the error must name)
BAD_CALLS: list[tuple[str, tuple[Any, ...], str]] = [
    # blank query / question
    ("fetch", ({"query": "  "},), "query"),
    ("recall", ({"question": ""},), "question"),
    ("beliefs", ({"reach": {"at": "agent:x"}, "query": " "},), "query"),
    # zero limit
    ("fetch", ({"query": "q", "limit": 0},), "limit"),
    ("list", ({"limit": 0},), "limit"),
    ("recall", ({"question": "q", "limit": 0},), "limit"),
    ("explore", ({"facet": "kind", "limit": 0},), "limit"),
    ("beliefs", ({"reach": {"at": "agent:x"}, "limit": 0},), "limit"),
    ("fetch", ({"query": "q", "max_scopes": 0},), "max_scopes"),
    # empty forget targets
    ("forget", ({"filter": {}},), "filter"),
    ("forget", ({"ids": []},), "ids"),
    ("forget", ({},), "ids"),
    ("forget", ({"ids": ["  "]},), "ids"),
    ("forget_within", ([], {"at": "agent:x"}), "ids"),
    # oversize or empty batches
    ("store_many", ([DOC] * 101,), "items"),
    ("store_many", ([],), "items"),
    ("get", ({"ids": [f"id{i}" for i in range(201)]},), "ids"),
    ("get", ({"ids": []},), "ids"),
    # bad namespace strings and depth > 8
    ("store", ({**DOC, "meta": {"namespace": "agent"}},), "item.meta.namespace"),
    ("store", ({**DOC, "meta": {"namespace": "robot:x"}},), "item.meta.namespace"),
    ("store", ({**DOC, "meta": {"namespace": "agent:bad id"}},), "item.meta.namespace"),
    ("store", ({**DOC, "meta": {"namespace": NINE_DEEP}},), "item.meta.namespace"),
    ("fetch", ({"query": "q", "filter": {"reach": {"at": NINE_DEEP}}},), "filter.reach.at"),
    ("get", ({"ids": ["a"], "reach": {"at": "agent:"}},), "reach.at"),
    # unknown type tag
    ("store", ({"type": "fact", "text": "x"},), "item.type"),
    ("store", ({"text": "x"},), "item.type"),
    # wrong types
    ("fetch", ({"query": "q", "limit": "ten"},), "limit"),
    ("fetch", ({"query": "q", "mode": "fuzzy"},), "mode"),
    ("fetch", ({"query": "q", "filter": {"kinds": "document"}},), "filter.kinds"),
    ("fetch", ({"query": "q", "colour": "red"},), "colour"),
    ("store", ({"type": "learning", "text": "x", "confidence": "high"},), "item.confidence"),
    ("store", ({"type": "conversation", "turns": [{"role": "robot", "text": "x"}]},), "item.turns.0.role"),
    ("store", (42,), "item"),
    ("list", ({"filter": {"observed_after": "yesterday"}},), "filter.observed_after"),
    ("explore", ({"facet": "colour"},), "facet"),
    ("store_with", (DOC, {"wait": "soon"}), "wait"),
    # store-time rules (reference §1.4)
    ("store", ({"type": "document", "body": {"text": " "}},), "item.body.text"),
    ("store", ({"type": "document", "body": {"uri": "https://x.test"}},), "item.body.uri"),
    ("store", ({"type": "conversation", "turns": []},), "item.turns"),
    ("store", ({"type": "conversation", "turns": [{"role": "user", "text": ""}]},), "item.turns.0.text"),
    ("store", ({"type": "learning", "text": "  "},), "item.text"),
    ("store", ({"type": "learning", "text": "x", "confidence": 1.5},), "item.confidence"),
    ("store", ({"type": "learning", "text": "x", "confidence": float("nan")},), "item.confidence"),
    ("store_many", ([DOC, {"type": "document", "body": {"text": ""}}],), "items.1.body.text"),
    # cross-field rules
    ("fetch", ({"query": "q", "refers_to": {"from": "2024-02-01", "to": "2024-01-01"}},), "refers_to.from"),
    ("fetch", ({"query": "q", "refers_to": {"from": "2024-01-01", "to": "2024-01-01", "zone": "Mars/Base"}},),
     "refers_to.zone"),
    ("list", ({"filter": {"turns": {"first": 5, "last": 4}}},), "filter.turns.first"),
    ("list", ({"cursor": "not-a-cursor"},), "cursor"),
    ("consolidate", ({"reach": {"at": "agent:x"}, "kinds": ["document", "document"]},), "kinds"),
    ("erase", ({"reach": {"at": "root", "inherit": False, "descendants": True}},), "whole_tree"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("method", "args", "field"), BAD_CALLS, ids=[f"{m}-{f}-{i}" for i, (m, _, f) in enumerate(BAD_CALLS)]
)
def test_bad_input_is_refused_naming_the_field_and_changes_nothing(
    engine: ReferenceEngine, method: str, args: tuple[Any, ...], field: str
) -> None:
    before = engine.snapshot()
    with pytest.raises(InvalidRequest) as info:
        getattr(engine, method)(*args)
    assert info.value.field == field, str(info.value)
    assert str(info.value).startswith(f"invalid request: {field}: ")
    assert engine.snapshot() == before


@pytest.mark.parametrize(
    ("model", "data", "field"),
    [
        (FetchRequest, {"query": ""}, "query"),
        (RecallRequest, {"question": "q", "limit": -1}, "limit"),
        (ExploreRequest, {"facet": "kind", "scan_limit": 50_001}, "scan_limit"),
        (ForgetTarget, {"ids": ["a"], "filter": {"workspace": "w"}}, "ids"),
        (GetRequest, {"ids": ["a", ""]}, "ids"),
        (ConsolidateRequest, {"reach": {"at": "agent:x"}, "kinds": ["learning", "learning"]}, "kinds"),
        (BeliefsRequest, {"reach": {"at": "agent:x"}, "limit": "many"}, "limit"),
        (Reach, {"at": "team:a/", "inherit": True}, "at"),
        (MemoryMeta, {"tags": "not-a-list"}, "tags"),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else None,
)
def test_models_refuse_malformed_input_on_construction(
    model: type[ContractModel], data: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidRequest) as info:
        model.model_validate(data)
    assert info.value.field == field
    with pytest.raises(InvalidRequest) as from_json:
        model.coerce(json.dumps(data))
    assert from_json.value.field == field


def test_keyword_construction_refuses_too() -> None:
    with pytest.raises(InvalidRequest) as info:
        FetchRequest(query="q", limit=0)
    assert info.value.field == "limit"


@pytest.mark.parametrize("text", ["agent", "agent:", ":x", "robot:x", "agent:a b", "agent:x//agent:y", NINE_DEEP])
def test_bad_namespace_strings_are_refused(text: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        Namespace.parse(text)
    assert info.value.field == "namespace"


def test_a_segment_id_longer_than_128_characters_is_refused() -> None:
    Namespace.parse("agent:" + "a" * 128)
    with pytest.raises(InvalidRequest):
        Namespace.parse("agent:" + "a" * 129)


def test_parse_item_names_the_type_field_for_an_unknown_tag() -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_item({"type": "fact", "text": "x"})
    assert info.value.field == "type"


def test_a_failed_batch_stores_none_of_its_items(engine: ReferenceEngine) -> None:
    before = len(engine)
    with pytest.raises(InvalidRequest):
        engine.store_many([{"type": "document", "body": {"text": "new one"}}, {"type": "learning", "text": ""}])
    assert len(engine) == before

"""Bad input is refused with ``InvalidRequest`` naming the field, and nothing already stored changes."""

from __future__ import annotations

import importlib
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from _modules import CONTRACT_MODULES

from memory_core import (
    Document,
    EraseRequest,
    ExploreRequest,
    FetchMode,
    FetchRequest,
    ForgetTarget,
    GetRequest,
    InvalidRequest,
    ItemKind,
    Learning,
    LearningKind,
    ListRequest,
    MemoryMeta,
    Namespace,
    Reach,
    RecallRequest,
    TurnRange,
)
from memory_core._model import ContractModel
from memory_core.consolidation import BeliefsRequest, ConsolidateRequest
from memory_core.engines.reference import ReferenceEngine
from memory_core.items import parse_item
from memory_core.limits import MAX_PAGE_LIMIT

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
    ("store_many", (None,), "items"),
    ("store_many", (42,), "items"),
    ("store_many", ("not a batch",), "items"),
    ("store_many", (DOC,), "items"),
    ("store_many", ({"a", "b"},), "items"),  # a set has no item order for the receipts to follow
    ("store_many_with", (None, "accepted"), "items"),
    ("get", ({"ids": [f"id{i}" for i in range(201)]},), "ids"),
    ("get", ({"ids": []},), "ids"),
    # bad namespace strings and depth > 8
    ("store", ({**DOC, "meta": {"namespace": "agent"}},), "item.meta.namespace"),
    ("store", ({**DOC, "meta": {"namespace": "robot:x"}},), "item.meta.namespace"),
    ("store", ({**DOC, "meta": {"namespace": "agent:bad id"}},), "item.meta.namespace"),
    ("store", ({**DOC, "meta": {"namespace": NINE_DEEP}},), "item.meta.namespace"),
    ("store", ({**DOC, "meta": {"namespace": "agent:x\n/agent:y"}},), "item.meta.namespace"),
    ("list", ({"filter": {"reach": {"at": "team:a/agent:b\n/agent:c"}}},), "filter.reach.at"),
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
    ("store", ({"type": "learning", "text": "x", "kind": "fact", "confidence": "high"},), "item.confidence"),
    ("store", ({"type": "conversation", "turns": [{"role": "robot", "text": "x"}]},), "item.turns.0.role"),
    ("store", (42,), "item"),
    ("list", ({"filter": {"observed_after": "yesterday"}},), "filter.observed_after"),
    ("explore", ({"facet": "colour"},), "facet"),
    ("store_with", (DOC, {"wait": "soon"}), "wait"),
    # wrong types are refused, never coerced: ints take no str, bool or float; bools take no str or int
    ("fetch", ({"query": "q", "limit": "7"},), "limit"),
    ("list", ({"limit": True},), "limit"),
    ("recall", ({"question": "q", "limit": 5.0},), "limit"),
    ("fetch", ({"query": "q", "beliefs": True},), "beliefs"),
    ("fetch", ({"query": "q", "max_scopes": "2"},), "max_scopes"),
    ("explore", ({"facet": "kind", "scan_limit": "100"},), "scan_limit"),
    ("beliefs", ({"reach": {"at": "agent:x"}, "limit": True},), "limit"),
    ("fetch", ({"query": "q", "filter": {"reach": {"at": "agent:x", "inherit": "yes"}}},), "filter.reach.inherit"),
    ("list", ({"filter": {"reach": {"at": "agent:x", "descendants": 1}}},), "filter.reach.descendants"),
    ("get", ({"ids": ["a"], "reach": {"at": "agent:x", "inherit": "false"}},), "reach.inherit"),
    ("consolidate", ({"reach": {"at": "agent:x", "descendants": "true"}},), "reach.descendants"),
    ("forget_within", (["a"], {"at": "agent:x", "inherit": 0}), "inherit"),
    ("erase", ({"reach": {"at": "root", "inherit": False, "descendants": True}, "whole_tree": "y"},), "whole_tree"),
    ("store", ({**DOC, "meta": {"derive": "no"}},), "item.meta.derive"),
    ("store", ({**DOC, "meta": {"turns": {"first": "1", "last": 2}}},), "item.meta.turns.first"),
    ("store", ({"type": "learning", "text": "x", "kind": "fact", "confidence": True},), "item.confidence"),
    ("store", ({"type": "learning", "text": "x", "kind": "fact", "confidence": "0.9"},), "item.confidence"),
    # integers past the contract's Rust types (u32 turn indices, usize counts) never reach an engine's storage
    ("store", ({**DOC, "meta": {"turns": {"first": 0, "last": 2**32}}},), "item.meta.turns.last"),
    ("store", ({**DOC, "meta": {"turns": {"first": 2**70, "last": 2**70}}},), "item.meta.turns.first"),
    ("list", ({"filter": {"turns": {"first": 2**32, "last": 2**32}}},), "filter.turns.first"),
    ("fetch", ({"query": "q", "filter": {"turns": {"first": 0, "last": 2**64}}},), "filter.turns.last"),
    ("fetch", ({"query": "q", "max_scopes": 2**63},), "max_scopes"),
    # store-time rules (reference §1.4)
    ("store", ({"type": "document", "body": {"text": " "}},), "item.body.text"),
    ("store", ({"type": "document", "body": {"uri": "https://x.test"}},), "item.body.uri"),
    ("store", ({"type": "conversation", "turns": []},), "item.turns"),
    ("store", ({"type": "conversation", "turns": [{"role": "user", "text": ""}]},), "item.turns.0.text"),
    ("store", ({"type": "learning", "text": "  ", "kind": "fact", "confidence": 0.5},), "item.text"),
    ("store", ({"type": "learning", "text": "x", "kind": "fact", "confidence": 1.5},), "item.confidence"),
    ("store", ({"type": "learning", "text": "x", "kind": "fact", "confidence": float("nan")},), "item.confidence"),
    # a learning's kind and confidence are required on the wire (reference §1.4: neither is optional)
    ("store", ({"type": "learning", "text": "x"},), "item.kind"),
    ("store", ({"type": "learning", "text": "x", "kind": "fact"},), "item.confidence"),
    ("store_many", ([DOC, {"type": "learning", "text": "x", "confidence": 0.5}],), "items.1.kind"),
    ("store_many", ([DOC, {"type": "document", "body": {"text": ""}}],), "items.1.body.text"),
    # cross-field rules
    ("fetch", ({"query": "q", "refers_to": {"from": "2024-02-01", "to": "2024-01-01"}},), "refers_to.from"),
    ("fetch", ({"query": "q", "refers_to": {"from": "2024-01-01", "to": "2024-01-01", "zone": "Mars/Base"}},),
     "refers_to.zone"),
    ("list", ({"filter": {"turns": {"first": 5, "last": 4}}},), "filter.turns.first"),
    ("list", ({"cursor": "not-a-cursor"},), "cursor"),
    ("list", ({"cursor": "²"},), "cursor"),  # str.isdigit() is true for it, int() refuses it
    ("fetch", ({"query": "q", "cursor": "²"},), "cursor"),
    ("export", ({"cursor": "²"},), "cursor"),
    ("list", ({"cursor": "١"},), "cursor"),  # int() reads this Arabic-Indic digit as 1: not a cursor we minted
    ("list", ({"cursor": "9" * 5000},), "cursor"),  # past int()'s 4300-digit limit
    ("fetch", ({"query": "q", "cursor": "-1"},), "cursor"),
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
        (ListRequest, {"limit": True}, "limit"),
        (FetchRequest, {"query": "q", "limit": 7.0}, "limit"),
        (Reach, {"at": "agent:x", "inherit": "yes"}, "inherit"),
        (EraseRequest, {"reach": Reach.subtree().to_dict(), "whole_tree": "y"}, "whole_tree"),
        (TurnRange, {"first": 0, "last": "3"}, "last"),
        (TurnRange, {"first": 0, "last": 2**32}, "last"),
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


def test_json_numbers_booleans_and_the_string_forms_of_enums_namespaces_and_times_still_parse() -> None:
    text = json.dumps(
        {
            "query": "q",
            "mode": "keyword",
            "limit": 7,
            "beliefs": 2,
            "max_scopes": 3,
            "filter": {
                "reach": {"at": "team:a/agent:b", "inherit": False, "descendants": True},
                "kinds": ["learning"],
                "turns": {"first": 1, "last": 2},
                "observed_after": "2024-01-01T00:00:00.250Z",
            },
        }
    )
    for request in (FetchRequest.coerce(text), FetchRequest.model_validate(json.loads(text))):
        assert (request.limit, request.beliefs, request.max_scopes, request.mode) == (7, 2, 3, FetchMode.KEYWORD)
        assert request.filter.reach == Reach.subtree("team:a/agent:b")
        assert request.filter.kinds == (ItemKind.LEARNING,)
        assert request.filter.observed_after == datetime(2024, 1, 1, 0, 0, 0, 250_000, tzinfo=UTC)
    erase = EraseRequest.coerce('{"reach": {"at": "root", "inherit": false, "descendants": true}, "whole_tree": true}')
    assert erase.whole_tree is True
    learning = parse_item('{"type": "learning", "text": "x", "kind": "fact", "confidence": 1}')
    assert isinstance(learning, Learning) and learning.confidence == 1.0


def test_keyword_construction_refuses_too() -> None:
    with pytest.raises(InvalidRequest) as info:
        FetchRequest(query="q", limit=0)
    assert info.value.field == "limit"


@pytest.mark.parametrize(
    "text",
    ["agent", "agent:", ":x", "robot:x", "agent:a b", "agent:x//agent:y", "agent:x\n/agent:y", "agent:x\r\n/agent:y",
     "team:a/agent:b\n/agent:c", NINE_DEEP],
)  # fmt: skip
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
        engine.store_many(
            [
                {"type": "document", "body": {"text": "new one"}},
                {"type": "learning", "text": "", "kind": "fact", "confidence": 0.5},
            ]
        )
    assert len(engine) == before


def _lax_scalars(schema: Any, path: str = "") -> list[str]:
    """Where a pydantic core schema validates an int or bool without ``strict`` (so ``"7"`` or ``1`` would pass)."""
    found: list[str] = []
    if isinstance(schema, dict):
        if schema.get("type") in ("int", "bool") and not schema.get("strict"):
            found.append(f"{path} ({schema['type']})")
        for key, value in schema.items():
            found += _lax_scalars(value, f"{path}.{key}" if key not in ("schema", "type") else path)
    elif isinstance(schema, list):
        for value in schema:
            found += _lax_scalars(value, path)
    return found


@pytest.mark.parametrize("module", CONTRACT_MODULES)
def test_every_int_and_bool_field_of_the_contract_is_strict(module: str) -> None:
    models = [
        value
        for value in vars(importlib.import_module(module)).values()
        if isinstance(value, type) and issubclass(value, ContractModel) and value.__module__ == module
    ]
    assert models
    lax = {m.__name__: _lax_scalars(m.__pydantic_core_schema__) for m in models}
    assert not {name: where for name, where in lax.items() if where}


def test_a_learning_built_in_python_takes_the_learn_defaults_but_json_must_name_both() -> None:
    made = Learning(text="prefers tea")
    assert (made.kind, made.confidence) == (LearningKind.FACT, 0.8)
    assert parse_item(made.to_json()) == made  # what it serialises names both, so it parses back
    with pytest.raises(InvalidRequest) as info:
        Learning.model_validate({"text": "prefers tea"})
    assert info.value.field == "kind"
    with pytest.raises(InvalidRequest) as info:
        Learning.model_validate_json('{"text": "prefers tea", "kind": "fact"}')
    assert info.value.field == "confidence"
    assert set(Learning.model_json_schema()["required"]) >= {"text", "kind", "confidence"}


@pytest.mark.parametrize(
    ("model", "data"),
    [
        (BeliefsRequest, {"reach": {"at": "agent:x"}}),
        (FetchRequest, {"query": "q"}),
        (RecallRequest, {"question": "q"}),
        (ListRequest, {}),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else "",
)
def test_every_page_limit_is_bounded_by_the_named_page_limit(model: type[ContractModel], data: dict[str, Any]) -> None:
    assert model.model_validate({**data, "limit": MAX_PAGE_LIMIT}).limit == MAX_PAGE_LIMIT  # type: ignore[attr-defined]
    with pytest.raises(InvalidRequest) as info:
        model.model_validate({**data, "limit": MAX_PAGE_LIMIT + 1})
    assert info.value.field == "limit" and str(MAX_PAGE_LIMIT) in info.value.message


def test_malformed_json_text_names_the_callers_field_once() -> None:
    with pytest.raises(InvalidRequest) as caught:
        FetchRequest.coerce('{"query": "x", ', "body")
    assert caught.value.field == "body"
    assert str(caught.value).count("body:") == 1 and "invalid JSON" in caught.value.reason
    with pytest.raises(InvalidRequest) as inner:  # a field inside the object keeps its own name
        FetchRequest.coerce('{"query": "x", "limit": 0}', "body")
    assert inner.value.field == "limit"

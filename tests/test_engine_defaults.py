"""The MemoryEngine base: scopes never dropped, ids recomputed on copy, strings refused naming the field."""

from __future__ import annotations

import pytest

from memory_core import ConsolidateRequest, Document, InvalidRequest, Learning, MemoryMeta, Reach, WaitFor
from memory_core.engine import scopes_by_exploring, scopes_by_listing
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import ConfigError
from memory_core.meta import ItemKind
from memory_core.settings import Settings, get_settings


def test_scopes_are_complete_past_the_explore_bucket_cap() -> None:
    engine = ReferenceEngine()
    batch = [Document.of(f"note {i}", MemoryMeta(namespace=f"agent:a{i}")) for i in range(520)]
    for start in range(0, len(batch), 100):
        engine.store_many(batch[start : start + 100])
    request = ConsolidateRequest(reach=Reach.subtree(), kinds=(ItemKind.DOCUMENT,))
    scopes = engine.scopes(request)
    assert len(scopes) == 520
    assert scopes == scopes_by_listing(engine, request)
    assert scopes == scopes_by_exploring(engine, request)


def test_scopes_list_each_node_once_with_the_kinds_it_holds() -> None:
    engine = ReferenceEngine()
    engine.store(Document.of("doc", MemoryMeta(namespace="agent:x")))
    engine.store(Learning(text="fact", meta=MemoryMeta(namespace="agent:x")))
    engine.store(Learning(text="elsewhere", meta=MemoryMeta(namespace="agent:y")))
    scopes = engine.scopes({"reach": Reach.subtree("agent:x").to_dict()})
    assert [(str(s.namespace), s.kinds) for s in scopes] == [("agent:x", (ItemKind.DOCUMENT, ItemKind.LEARNING))]


def test_a_copied_item_gets_its_own_id() -> None:
    item = Learning(text="original")
    assert item.id  # computed and cached
    changed = item.model_copy(update={"text": "changed"})
    assert changed.id != item.id
    assert changed.id == Learning(text="changed").id


def test_write_options_accept_a_wait_name() -> None:
    engine = ReferenceEngine()
    receipt = engine.store_with(Learning(text="quick"), "accepted")
    assert receipt.id == Learning(text="quick").id
    assert engine.store_with(Learning(text="quick"), WaitFor.VISIBLE).replayed


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda e: e.forget_within(["x"], "agent:x"), "reach"),
        (lambda e: e.store_with(Learning(text="t"), "soon"), "options"),
        (lambda e: e.fetch("tea"), "request"),
    ],
)
def test_a_plain_string_where_a_request_belongs_names_the_field(call, field) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidRequest) as err:
        call(ReferenceEngine())
    assert err.value.field == field


def test_a_malformed_setting_is_a_config_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_CORE_BUDGET_TOKENS", "lots")
    get_settings.cache_clear()
    with pytest.raises(ConfigError) as err:
        get_settings()
    assert "MEMORY_CORE_BUDGET_TOKENS" in str(err.value)
    assert Settings(budget_tokens=5).budget_tokens == 5

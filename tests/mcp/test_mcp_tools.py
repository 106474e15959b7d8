"""The MCP tools over MemoryTools, in process: the five tools, their closed schemas, limits capped at 100, and a
scope the client cannot widen."""

from __future__ import annotations

from typing import Any

import pytest

from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import InvalidRequest
from memory_core.host.tools import scoped_tools
from memory_core.items import Learning, LearningKind
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.mcp_server import MCP_MAX_LIMIT, McpTools
from memory_core.meta import MemoryMeta
from memory_core.namespace import Namespace
from memory_core.query import ListRequest

LAYOUT = MemoryLayout("team:a")


@pytest.fixture
def engine() -> ReferenceEngine:
    return ReferenceEngine()


@pytest.fixture
def tools(engine: ReferenceEngine) -> McpTools:
    return McpTools(scoped_tools(engine, LAYOUT))


def learn(tools: McpTools, text: str = "Mara moved to Porto in March.") -> str:
    return str(tools.call("memory.learn", {"text": text})["id"])


def test_the_five_tools_are_listed_with_closed_schemas_and_hints(tools: McpTools) -> None:
    listed = tools.list()
    assert [t.name for t in listed] == ["memory.recall", "memory.fetch", "memory.list", "memory.learn", "memory.forget"]
    for tool in listed:
        assert tool.input_schema["additionalProperties"] is False
        assert "namespace" not in tool.input_schema["properties"] and "reach" not in tool.input_schema["properties"]
        if "limit" in tool.input_schema["properties"]:
            assert tool.input_schema["properties"]["limit"]["maximum"] == MCP_MAX_LIMIT
    hints = {t.name: t.hints for t in listed}
    assert hints["memory.learn"] == {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False}
    assert hints["memory.forget"] == {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True}
    assert hints["memory.recall"]["readOnlyHint"] is True
    assert set(listed[0].input_schema["properties"]) == {"question", "filter", "limit"}
    assert listed[-1].input_schema["properties"]["ids"]["maxItems"] == MCP_MAX_LIMIT


def test_learn_list_recall_forget_round_trip_at_the_scopes_learnings_node(
    tools: McpTools, engine: ReferenceEngine
) -> None:
    item = learn(tools)
    [stored] = engine.list(ListRequest(limit=10)).items
    assert stored.id == item and stored.meta.namespace == Namespace.parse("team:a")
    assert stored.confidence == 0.8
    assert [i["id"] for i in tools.call("memory.list", {})["items"]] == [item]
    fetched = tools.call("memory.fetch", {"query": "Porto"})
    assert [h["id"] for h in fetched["hits"]] == [item]
    recalled = tools.call("memory.recall", {"question": "Where did Mara move?"})
    assert item in [c["id"] for c in recalled["citations"]]
    assert tools.call("memory.forget", {"ids": [item, "nope"]}) == {"forgotten": 1, "skipped": 1}
    assert tools.call("memory.list", {})["items"] == []


def test_learn_takes_kind_and_confidence(tools: McpTools, engine: ReferenceEngine) -> None:
    tools.call("memory.learn", {"text": "Prefers tea.", "kind": "preference", "confidence": 0.6})
    [exported] = engine.export(ListRequest(limit=10)).items
    assert isinstance(exported.item, Learning)
    assert (exported.item.kind, exported.item.confidence) == (LearningKind.PREFERENCE, 0.6)


def test_learn_takes_a_facts_key_and_importance(tools: McpTools, engine: ReferenceEngine) -> None:
    for text in ("The UI theme is dark.", "The UI theme is light."):
        tools.call("memory.learn", {"text": text, "key": "ui.theme", "importance": 0.9})
    assert [h.text for h in engine.list(ListRequest(limit=10)).items] == ["The UI theme is light."]
    with pytest.raises(InvalidRequest) as err:
        tools.call("memory.learn", {"text": "Prefers tea.", "kind": "preference", "key": "drink"})
    assert err.value.field == "key"  # the argument the client gave (not memory_store's learning.key)


def test_an_agent_scope_writes_at_the_agents_node(engine: ReferenceEngine) -> None:
    tools = McpTools(scoped_tools(engine, LAYOUT, "bot"))
    learn(tools)
    [stored] = engine.list(ListRequest(limit=10)).items
    assert stored.meta.namespace == LAYOUT.conversations("bot")


@pytest.mark.parametrize("limit", [101, 1000])
def test_a_limit_over_100_is_refused(tools: McpTools, limit: int) -> None:
    with pytest.raises(InvalidRequest) as err:
        tools.call("memory.list", {"limit": limit})
    assert err.value.field == "limit"


def test_a_limit_over_the_tools_page_is_served_as_a_full_page(tools: McpTools) -> None:
    for i in range(55):
        learn(tools, f"Fact number {i} about Mara.")
    page = tools.call("memory.list", {"limit": 80})
    assert len(page["items"]) == 50 and "next_cursor" in page


def test_more_than_100_ids_are_refused(tools: McpTools) -> None:
    with pytest.raises(InvalidRequest):
        tools.call("memory.forget", {"ids": [f"id-{i}" for i in range(101)]})


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("memory.learn", {"text": "x", "namespace": "team:b"}),
        ("memory.list", {"filter": {"reach": {"at": "team:b", "inherit": False, "descendants": True}}}),
        ("memory.recall", {"question": "q", "filter": {"namespace": "team:b"}}),
        ("memory.fetch", {"query": "q", "reach": {"at": "root"}}),
    ],
)
def test_a_client_cannot_name_where_memory_is_read_or_written(
    tools: McpTools, engine: ReferenceEngine, name: str, args: dict[str, Any]
) -> None:
    with pytest.raises(InvalidRequest, match="host"):
        tools.call(name, args)
    assert engine.list(ListRequest(limit=10)).items == ()


def test_another_tenants_items_are_neither_read_nor_forgotten(tools: McpTools, engine: ReferenceEngine) -> None:
    other = engine.store(Learning(text="Mara moved to Porto.", meta=MemoryMeta(namespace=Namespace.parse("team:b"))))
    shared = engine.store(Learning(text="Mara likes Porto.", meta=MemoryMeta(namespace=Namespace.parse("root"))))
    assert tools.call("memory.list", {})["items"] == []  # neither a sibling tenant nor the root above it
    assert tools.call("memory.fetch", {"query": "Porto"})["hits"] == []
    assert tools.call("memory.forget", {"ids": [other.id, shared.id]}) == {"forgotten": 0, "skipped": 2}
    assert len(engine.list(ListRequest(limit=10)).items) == 2


def test_an_unknown_tool_is_refused(tools: McpTools) -> None:
    with pytest.raises(InvalidRequest, match="unknown tool"):
        tools.call("memory.store", {})

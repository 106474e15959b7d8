"""MemoryTools.call: the reference's refusals, confinement to the ToolScope, writes at the place, scrubbed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from memory_core import Learning, ListRequest, MemoryMeta
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import InvalidRequest, Unsupported
from memory_core.namespace import Namespace, Reach
from memory_core.query import ForgetReport, ForgetTarget
from memory_core.safety.engine import ScrubbingEngine
from memory_core.tools import MemoryTools, ToolScope

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class Counting(ReferenceEngine):
    def __init__(self) -> None:
        super().__init__()
        self.forgets = 0

    def _forget(self, target: ForgetTarget) -> ForgetReport:
        self.forgets += 1
        return super()._forget(target)


@pytest.fixture
def engine() -> Counting:
    return Counting()


@pytest.fixture
def tools(engine: Counting) -> MemoryTools:
    return MemoryTools(engine, clock=lambda: NOW).placed_at("agent:writer")


def _stored(engine: ReferenceEngine) -> list[Any]:
    return list(engine.list(ListRequest(limit=100)).items)


def test_an_unknown_tool_is_invalid(tools: MemoryTools) -> None:
    with pytest.raises(InvalidRequest) as err:
        tools.call("memory_delete_everything", {})
    assert err.value.field == "name"


def test_a_write_tool_on_read_only_tools_is_unsupported_before_its_arguments_are_read(tools: MemoryTools) -> None:
    read_only = tools.read_only()
    for name in ("memory_store", "memory_forget"):
        with pytest.raises(Unsupported):
            read_only.call(name, "not even an object")  # type: ignore[arg-type]


def test_null_arguments_are_an_empty_object_and_a_null_field_is_absent(tools: MemoryTools) -> None:
    assert tools.call("memory_list", None) == {"items": []}
    assert tools.call("memory_list", {"limit": None, "filter": None, "cursor": None}) == {"items": []}


@pytest.mark.parametrize("args", [[1, 2], "limit=3", 7])
def test_arguments_that_are_not_an_object_are_invalid(tools: MemoryTools, args: Any) -> None:
    with pytest.raises(InvalidRequest) as err:
        tools.call("memory_list", args)
    assert err.value.field == "arguments"


@pytest.mark.parametrize(
    ("name", "args", "field"),
    [
        ("memory_list", {"namespace": "agent:other"}, "namespace"),
        ("memory_list", {"filter": {"reach": {"at": "root", "descendants": True}}}, "filter.reach"),
        ("memory_store", {"learning": {"text": "x", "namespace": "agent:other"}}, "learning.namespace"),
        (
            "memory_store",
            {"conversation": {"turns": [{"role": "user", "text": "hi", "reach": {}}]}},
            "conversation.turns.0.reach",
        ),
        ("memory_list", {"bogus": 1, "filter": {"deep": [{"namespace": "root"}]}}, "filter.deep.0.namespace"),
    ],
)
def test_a_namespace_or_reach_key_at_any_depth_is_refused_before_unknown_keys(
    tools: MemoryTools, engine: Counting, name: str, args: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidRequest) as err:
        tools.call(name, args)
    assert err.value.field == field and "set by the host" in err.value.reason
    assert _stored(engine) == []


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 51}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": 2.5}, "limit"),
        ({"colour": "red"}, "colour"),
        ({"filter": {"kinds": ["email"]}}, "filter.kinds.0"),
        ({"filter": {"observed_after": "yesterday"}}, "filter.observed_after"),
    ],
)
def test_bad_arguments_are_invalid_naming_the_field(tools: MemoryTools, args: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        tools.call("memory_list", args)
    assert err.value.field == field


def test_limit_defaults_to_ten(tools: MemoryTools) -> None:
    for i in range(12):
        tools.call("memory_store", {"learning": {"text": f"fact number {i}"}})
    assert len(tools.call("memory_list", {})["items"]) == 10
    assert len(tools.call("memory_list", {"limit": 50})["items"]) == 12


def test_store_takes_exactly_one_item(tools: MemoryTools, engine: Counting) -> None:
    for args in ({}, {"learning": {"text": "a"}, "document": {"text": "b"}}, {"tags": ["x"]}):
        with pytest.raises(InvalidRequest):
            tools.call("memory_store", args)
    assert _stored(engine) == []


def test_writes_land_at_the_scopes_place_with_the_tools_metadata(tools: MemoryTools, engine: Counting) -> None:
    first = tools.call(
        "memory_store",
        {"learning": {"text": "Prefers green tea", "learning_kind": "preference", "confidence": 0.9}, "tags": ["diet"]},
    )
    again = tools.call(
        "memory_store",
        {"learning": {"text": "Prefers green tea", "learning_kind": "preference", "confidence": 0.9}, "tags": ["diet"]},
    )
    assert first["id"] == again["id"] and (first["replayed"], again["replayed"]) == (False, True)
    tools.call("memory_store", {"document": {"title": "Notes", "text": "Standup at nine."}})
    tools.call("memory_store", {"conversation": {"turns": [{"role": "user", "text": "hello"}]}})
    stored = _stored(engine)
    assert len(stored) == 3
    for hit in stored:
        assert hit.meta.namespace == Namespace.parse("agent:writer")
        assert hit.meta.source.kind.value == "agent" and hit.meta.observed_at == NOW
    learning = next(h for h in stored if h.kind.value == "learning")
    assert learning.meta.tags == ("diet",) and learning.confidence == 0.9


def test_what_a_model_stores_is_scrubbed(tools: MemoryTools, engine: Counting) -> None:
    assert isinstance(tools.engine, ScrubbingEngine)
    tools.call("memory_store", {"learning": {"text": "the AWS key is AKIAIOSFODNN7EXAMPLE", "evidence": "pw=hunter22"}})
    (hit,) = _stored(engine)
    assert hit.text == "the AWS key is [REDACTED]"


def test_reads_use_the_scopes_reach_and_never_render_the_namespace(tools: MemoryTools, engine: Counting) -> None:
    engine.store(Learning(text="the writer likes tea", meta=MemoryMeta.model_validate({"namespace": "agent:writer"})))
    engine.store(Learning(text="the editor likes tea", meta=MemoryMeta.model_validate({"namespace": "agent:editor"})))
    engine.store(Learning(text="everyone likes tea"))
    listed = tools.call("memory_list", {})["items"]
    assert sorted(h["text"] for h in listed) == ["everyone likes tea", "the writer likes tea"]
    fetched = tools.call("memory_fetch", {"query": "tea"})["hits"]
    assert sorted(h["text"] for h in fetched) == ["everyone likes tea", "the writer likes tea"]
    for hit in fetched:
        assert set(hit) <= {"id", "kind", "text", "score", "confidence", "meta"} and "namespace" not in hit["meta"]
        assert hit["score"] == round(hit["score"], 4)
    answer = tools.call("memory_recall", {"question": "who likes tea?"})
    assert answer["citations"] and all("editor" not in c["snippet"] for c in answer["citations"])
    buckets = tools.call("memory_explore", {"facet": "kind"})["buckets"]
    assert buckets == [{"value": "learning", "count": 2}]


def test_explore_refuses_the_namespace_facet(tools: MemoryTools) -> None:
    with pytest.raises(InvalidRequest) as err:
        tools.call("memory_explore", {"facet": "namespace"})
    assert err.value.field == "facet"


def test_fetch_refuses_an_undeclared_mode(engine: Counting) -> None:
    from test_tool_contracts import KeywordOnly

    tools = MemoryTools(KeywordOnly())
    with pytest.raises(InvalidRequest) as err:
        tools.call("memory_fetch", {"query": "tea", "mode": "vector"})
    assert err.value.field == "mode"
    assert tools.call("memory_fetch", {"query": "tea"}) == {"hits": []}  # default: the engine's only mode


def test_get_dedupes_ids_and_out_of_reach_ids_look_unknown(tools: MemoryTools, engine: Counting) -> None:
    mine = tools.call("memory_store", {"learning": {"text": "mine"}})["id"]
    other = engine.store(Learning(text="theirs", meta=MemoryMeta.model_validate({"namespace": "agent:editor"}))).id
    got = tools.call("memory_get", {"ids": [mine, other, mine, "no-such-id"]})
    assert [h["id"] for h in got["items"]] == [mine] and got["missing"] == [other, "no-such-id"]
    with pytest.raises(InvalidRequest) as err:
        tools.call("memory_get", {"ids": [f"id-{i}" for i in range(201)]})
    assert err.value.field == "ids"


def test_forget_forgets_only_ids_it_can_read_back(tools: MemoryTools, engine: Counting) -> None:
    mine = tools.call("memory_store", {"learning": {"text": "mine"}})["id"]
    other = engine.store(Learning(text="theirs", meta=MemoryMeta.model_validate({"namespace": "agent:editor"}))).id
    assert tools.call("memory_forget", {"ids": [other, "nope"]}) == {"forgotten": 0, "skipped": 2}
    assert engine.forgets == 0  # nothing readable: the engine is not called
    assert tools.call("memory_forget", {"ids": [mine, other]}) == {"forgotten": 1, "skipped": 1}
    assert [h.text for h in _stored(engine)] == ["theirs"]


def test_forget_by_filter_applies_the_reach_and_needs_a_field(tools: MemoryTools, engine: Counting) -> None:
    tools.call("memory_store", {"learning": {"text": "mine"}, "tags": ["old"]})
    engine.store(
        Learning(text="theirs", meta=MemoryMeta.model_validate({"namespace": "agent:editor", "tags": ["old"]}))
    )
    for empty in ({}, {"tags_any": []}):
        with pytest.raises(InvalidRequest) as err:
            tools.call("memory_forget", {"filter": empty})
        assert err.value.field == "filter"
    assert tools.call("memory_forget", {"filter": {"tags_any": ["old"]}}) == {"forgotten": 1, "skipped": 0}
    assert [h.text for h in _stored(engine)] == ["theirs"]
    with pytest.raises(InvalidRequest):
        tools.call("memory_forget", {"ids": ["a"], "filter": {"tags_any": ["old"]}})


def test_a_reach_wider_than_the_scope_is_refused_and_a_narrower_one_confines(
    tools: MemoryTools, engine: Counting
) -> None:
    for wider in (Reach.subtree(), Reach.of("agent:editor"), Reach.subtree("agent:writer")):
        with pytest.raises(InvalidRequest) as err:
            tools.confined(wider)
        assert err.value.field == "reach"
    engine.store(Learning(text="shared at the root"))
    tools.call("memory_store", {"learning": {"text": "the writer's own"}})
    narrow = tools.confined(Reach.exact("agent:writer"))
    assert [h["text"] for h in narrow.call("memory_list", {})["items"]] == ["the writer's own"]
    assert MemoryTools(engine).confined(Reach.subtree()).scope.reach == Reach.subtree()  # no reach: anything


def test_tool_scope_at_reads_the_place_and_its_ancestors() -> None:
    scope = ToolScope.at("team:acme/agent:writer")
    assert scope.reach == Reach.of("team:acme/agent:writer") and scope.writes
    assert ToolScope() == ToolScope(Namespace.parse("root"), None, True)


def test_scrub_off_leaves_the_engine_bare(monkeypatch: pytest.MonkeyPatch, engine: Counting) -> None:
    from memory_core.settings import get_settings

    monkeypatch.setenv("MEMORY_CORE_SCRUB", "off")
    get_settings.cache_clear()
    assert MemoryTools(engine).engine is engine
    assert isinstance(MemoryTools(engine, scrub=True).engine, ScrubbingEngine)


def test_learnings_record_the_agent_that_learned_them(engine: Counting) -> None:
    """Reference §6.4: ``learn`` stamps the agent id (and source ``agent``); a host's tools serve one agent."""
    from memory_core.host.tools import scoped_tools
    from memory_core.lifecycle.layout import MemoryLayout

    layout = MemoryLayout("user:ana")
    writer = scoped_tools(engine, layout, "writer")
    editor = scoped_tools(engine, layout, "editor")
    shared = scoped_tools(engine, layout)
    writer.call("memory_store", {"learning": {"text": "Prefers green tea"}})
    editor.call("memory_store", {"learning": {"text": "Prefers black coffee"}})
    shared.call("memory_store", {"learning": {"text": "Lives in Lisbon"}})
    by_text = {h.text: h.meta for h in _stored(engine)}
    assert by_text["Prefers green tea"].agent_id == "writer"
    assert by_text["Prefers black coffee"].agent_id == "editor"
    assert by_text["Lives in Lisbon"].agent_id is None
    assert {m.source.kind.value for m in by_text.values()} == {"agent"}
    # the model can ask for one agent's learnings (agent_id is a model-facing filter field)
    hits = shared.call("memory_list", {"filter": {"agent_id": "writer"}})["items"]
    assert [h["text"] for h in hits] == ["Prefers green tea"]
    # the agent survives every builder and cannot be blank
    tools = MemoryTools(engine, clock=lambda: NOW).as_agent("scribe").placed_at("agent:scribe").read_only()
    assert tools.scope.agent_id == "scribe"
    with pytest.raises(InvalidRequest) as info:
        MemoryTools(engine).as_agent("  ")
    assert info.value.field == "agent_id"

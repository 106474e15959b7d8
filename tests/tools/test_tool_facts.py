"""Facts through the model-facing tools and ToolWrites (issue 20): key and importance, limits, late deliveries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memory_core.consolidation import WriteOptions
from memory_core.engine import AnyItem
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import EngineUnavailable, InvalidRequest
from memory_core.facts.model import MAX_FACT_CHARS, MAX_KEY_CHARS, read_tags
from memory_core.facts.store import FactStore
from memory_core.namespace import Namespace
from memory_core.query import ListRequest, StoreReceipt
from memory_core.tools import MemoryTools, ToolScope
from memory_core.tools.jobs import ToolWrite, apply_tool_write
from memory_core.tools.writes import ToolWrites

T1 = datetime(2026, 5, 1, 8, 0, tzinfo=UTC)
T2 = T1 + timedelta(minutes=5)
PLACE = Namespace.parse("agent:writer")


class Jobs:
    """The job flow as a list: ``submit`` keeps the job as it travels (JSON); ``run_all`` applies them as a worker."""

    def __init__(self) -> None:
        self.jobs: list[ToolWrite] = []

    def submit(self, job: ToolWrite) -> str:
        self.jobs.append(ToolWrite.model_validate_json(job.to_json()))
        return f"job-{len(self.jobs)}"

    def finished(self, job_id: str) -> bool:
        return True

    def run_all(self, engine: ReferenceEngine) -> int:
        done = [apply_tool_write(engine, job) for job in self.jobs]
        self.jobs = []
        return len(done)


class Switch(ReferenceEngine):
    """The reference engine; its writes fail while ``up`` is False."""

    def __init__(self) -> None:
        super().__init__()
        self.up = True

    def _store_with(self, item: AnyItem, options: WriteOptions) -> StoreReceipt:
        if not self.up:
            raise EngineUnavailable("connection refused")
        return super()._store_with(item, options)


def _texts(engine: ReferenceEngine) -> list[str]:
    return sorted(h.text for h in engine.list(ListRequest(limit=100)).items)


@pytest.fixture
def tools() -> MemoryTools:
    return MemoryTools(ReferenceEngine(), clock=lambda: T1).placed_at(PLACE)


def test_the_store_schema_offers_key_and_importance(tools: MemoryTools) -> None:
    store = next(s for s in tools.specs() if s.name == "memory_store")
    learning = store.parameters["properties"]["learning"]["properties"]
    assert learning["key"]["maxLength"] == MAX_KEY_CHARS and learning["key"]["minLength"] == 1
    assert (learning["importance"]["minimum"], learning["importance"]["maximum"]) == (0, 1)
    assert learning["text"]["maxLength"] == MAX_FACT_CHARS


def test_memory_store_with_a_key_replaces_the_value(tools: MemoryTools) -> None:
    first = tools.call("memory_store", {"learning": {"text": "The UI theme is dark", "key": "ui.theme"}})
    later = MemoryTools(tools.engine, tools.scope, scrub=False, clock=lambda: T2)
    second = later.call(
        "memory_store", {"learning": {"text": "The UI theme is light", "key": "ui.theme", "importance": 0.9}}
    )
    assert first["id"] != second["id"]
    (hit,) = tools.call("memory_list", {})["items"]
    assert hit["text"] == "The UI theme is light"
    stored = tools.engine.list(ListRequest(limit=10)).items[0]
    facts = read_tags(stored.meta.tags)
    assert (facts.key, facts.importance) == ("ui.theme", 0.9)


def test_memory_store_dedupes_unkeyed_facts(tools: MemoryTools) -> None:
    first = tools.call("memory_store", {"learning": {"text": "Likes tea"}})
    again = tools.call("memory_store", {"learning": {"text": "likes TEA"}})
    assert again == {"id": first["id"], "replayed": True}


@pytest.mark.parametrize(
    ("learning", "field"),
    [
        ({"text": "x" * (MAX_FACT_CHARS + 1)}, "learning.text"),
        ({"text": "ok", "key": ""}, "learning.key"),
        ({"text": "ok", "key": "   "}, "learning.key"),
        ({"text": "ok", "key": "k" * (MAX_KEY_CHARS + 1)}, "learning.key"),
        ({"text": "ok", "importance": 2}, "learning.importance"),
        ({"text": "ok", "importance": "high"}, "learning.importance"),
        ({"text": "ok", "learning_kind": "procedure", "key": "k"}, "learning.key"),
        ({"text": "y" * (MAX_FACT_CHARS + 1), "learning_kind": "procedure"}, "learning.text"),
    ],
)
def test_bad_facts_through_the_tool_name_the_field_and_store_nothing(
    tools: MemoryTools, learning: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidRequest) as err:
        tools.call("memory_store", {"learning": learning})
    assert err.value.field == field
    assert tools.call("memory_list", {}) == {"items": []}


@pytest.mark.parametrize("order", ["stated order", "reversed"])
def test_queued_statements_delivered_in_any_order_leave_the_latest_current(order: str) -> None:
    engine = Switch()
    scope = ToolScope.at(PLACE)
    early_jobs, late_jobs = Jobs(), Jobs()
    early = ToolWrites(engine, early_jobs, scope, clock=lambda: T1, scrub=False)
    late = ToolWrites(engine, late_jobs, scope, clock=lambda: T2, scrub=False)
    engine.up = False
    assert early.learn("The UI theme is dark", key="ui.theme").state == "queued"
    assert late.learn("The UI theme is light", key="ui.theme").state == "queued"
    engine.up = True
    for jobs in (early_jobs, late_jobs) if order == "stated order" else (late_jobs, early_jobs):
        assert jobs.run_all(engine) == 1
    current = FactStore(engine, PLACE).current("ui.theme")
    assert current is not None and current.text == "The UI theme is light"
    assert _texts(engine) == ["The UI theme is light"]


def test_tool_writes_refuse_bad_facts_before_queueing() -> None:
    engine = Switch()
    outbox = Jobs()
    writes = ToolWrites(engine, outbox, ToolScope.at(PLACE), clock=lambda: T1)
    engine.up = False
    for call, field in (
        (lambda: writes.learn("x" * (MAX_FACT_CHARS + 1)), "text"),
        (lambda: writes.learn("ok", key=" "), "key"),
        (lambda: writes.learn("ok", importance=1.01), "importance"),
        (lambda: writes.learn("ok", kind="procedure", importance=0.5), "importance"),
    ):
        with pytest.raises(InvalidRequest) as err:
            call()
        assert err.value.field == field
    assert outbox.jobs == []

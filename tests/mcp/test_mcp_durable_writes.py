"""memory.learn / memory.forget through ToolWrites (``memory-core mcp --queue-writes``): with the engine down they
answer "queued" and a worker's apply stores or removes them; the MCP argument checks still come first. Without
ToolWrites a write while the engine is down fails as any call does (today's behaviour, docs/mcp.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from memory_core.consolidation import WriteOptions
from memory_core.engine import AnyItem
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import EngineUnavailable, InvalidRequest
from memory_core.host.tools import scoped_tools
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.mcp_server import McpTools
from memory_core.namespace import Reach
from memory_core.query import ForgetReport, ListRequest, StoreReceipt
from memory_core.tools import ToolScope, ToolWrite, ToolWrites
from memory_core.tools.jobs import apply_tool_write
from memory_core.tools.writes import QUEUED_REMOVE, QUEUED_SAVE

LAYOUT = MemoryLayout("team:a")


class Flaky(ReferenceEngine):
    def __init__(self) -> None:
        super().__init__()
        self.up = True

    def _store_with(self, item: AnyItem, options: WriteOptions) -> StoreReceipt:
        if not self.up:
            raise EngineUnavailable("connection refused")
        return super()._store_with(item, options)

    def _store(self, item: AnyItem) -> StoreReceipt:
        if not self.up:
            raise EngineUnavailable("connection refused")
        return super()._store(item)

    def _forget_within(self, ids: Sequence[str], reach: Reach) -> ForgetReport:
        if not self.up:
            raise EngineUnavailable("connection refused")
        return super()._forget_within(ids, reach)


@dataclass
class Sink:
    jobs: list[ToolWrite] = field(default_factory=list)
    done: set[str] = field(default_factory=set)

    def submit(self, job: ToolWrite) -> str:
        self.jobs.append(ToolWrite.model_validate_json(job.to_json()))
        return f"job-{len(self.jobs)}"

    def finished(self, job_id: str) -> bool:
        return job_id in self.done


@pytest.fixture
def engine() -> Flaky:
    return Flaky()


def _mcp(engine: Flaky, sink: Sink, agent: str | None = None) -> McpTools:
    tools = scoped_tools(engine, LAYOUT, agent)
    return McpTools(tools, ToolWrites(engine, sink, tools.scope))


def test_with_the_engine_down_learn_and_forget_answer_queued_and_a_worker_applies_them(engine: Flaky) -> None:
    sink = Sink()
    tools = _mcp(engine, sink, "bot")
    kept = tools.call("memory.learn", {"text": "Mara lives in Porto.", "key": "mara.city"})
    assert kept == {"id": kept["id"], "replayed": False}  # the engine answered: saved at once
    engine.up = False
    queued = tools.call("memory.learn", {"text": "Mara has a cat.", "kind": "preference", "confidence": 0.6})
    assert queued["state"] == "queued" and queued["message"] == QUEUED_SAVE and queued["job_id"] == "job-1"
    gone = tools.call("memory.forget", {"ids": [kept["id"]]})
    assert gone == {"forgotten": 0, "skipped": 0, "state": "queued", "message": QUEUED_REMOVE, "job_id": "job-2"}
    engine.up = True
    for i, job in enumerate(sink.jobs, start=1):
        apply_tool_write(engine, job)
        sink.done.add(f"job-{i}")
    [item] = engine.list(ListRequest(limit=10)).items
    assert item.id == queued["id"] and item.meta.namespace == LAYOUT.conversations("bot")
    assert item.meta.agent_id == "bot" and item.confidence == 0.6


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"text": "x", "kind": "preference", "key": "drink"}, "key"),
        ({"text": "x", "importance": 2}, "importance"),
        ({"text": "x", "confidence": "high"}, "confidence"),
        ({"text": "x", "kind": "gossip"}, "kind"),
        ({"text": "Mara\x00lives"}, "text"),
    ],
)
def test_bad_arguments_are_refused_by_name_and_nothing_is_queued(
    engine: Flaky, args: dict[str, object], field: str
) -> None:
    sink = Sink()
    engine.up = False
    with pytest.raises(InvalidRequest) as err:
        _mcp(engine, sink).call("memory.learn", args)
    assert err.value.field == field
    with pytest.raises(InvalidRequest) as ids:
        _mcp(engine, sink).call("memory.forget", {"ids": []})
    assert ids.value.field == "ids"
    assert sink.jobs == []


def test_writes_at_another_scope_are_refused(engine: Flaky) -> None:
    with pytest.raises(InvalidRequest) as err:
        McpTools(scoped_tools(engine, LAYOUT), ToolWrites(engine, Sink(), ToolScope.at("team:b")))
    assert err.value.field == "writes"


def test_without_tool_writes_a_learn_while_the_engine_is_down_fails_as_today(engine: Flaky) -> None:
    engine.up = False
    with pytest.raises(EngineUnavailable):
        McpTools(scoped_tools(engine, LAYOUT)).call("memory.learn", {"text": "Mara lives in Porto."})

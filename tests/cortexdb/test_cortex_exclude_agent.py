"""``FetchRequest.exclude_agent_id`` on CortexDB: its wire has no such filter, so the agent's items are left out
client-side before the page (issue 12: a pack's Team section)."""

from __future__ import annotations

from memory_core import FetchRequest
from memory_core.engines.cortexdb.double import direct_double, double_engine
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.layout import MemoryLayout

LAYOUT = MemoryLayout()


def test_the_team_read_leaves_the_agent_out_before_the_page() -> None:
    with double_engine(direct_double()) as engine:
        bob, ann = AgentMemory(engine, LAYOUT, "bob"), AgentMemory(engine, LAYOUT, "ann")
        bob.post_turn({"thread_id": "b", "turn_index": 0, "assistant_text": "A kayak trip on the lake"})
        for i in range(3):
            ann.post_turn({"thread_id": "a", "turn_index": i, "assistant_text": f"Kayak kayak lake trip number {i}"})
        team = LAYOUT.conversations_filter(None)
        plain = engine.fetch(FetchRequest(query="kayak lake trip", filter=team, limit=10))
        assert {h.meta.agent_id for h in plain.hits} == {"ann", "bob"}
        request = FetchRequest(query="kayak lake trip", filter=team, limit=1, exclude_agent_id="ann")
        assert [h.meta.agent_id for h in engine.fetch(request).hits] == ["bob"]

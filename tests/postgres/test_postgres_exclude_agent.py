"""``FetchRequest.exclude_agent_id`` on PostgreSQL (issue 12: a pack's Team section leaves its agent out in the
query, before ranking and before the scopes are chosen)."""

from __future__ import annotations

from memory_core import FetchRequest
from memory_core.engines.postgres import PostgresEngine
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.layout import MemoryLayout

LAYOUT = MemoryLayout()


def test_the_team_read_leaves_the_agent_out_before_ranking(pg_url: str) -> None:
    with PostgresEngine(pg_url) as engine:
        ann, bob = AgentMemory(engine, LAYOUT, "ann"), AgentMemory(engine, LAYOUT, "bob")
        bob.post_turn({"thread_id": "b", "turn_index": 0, "assistant_text": "A kayak trip on the lake"})
        for i in range(12):  # ann's own turns, written last, rank first for the question
            ann.post_turn({"thread_id": "a", "turn_index": i, "assistant_text": f"Kayak kayak lake trip number {i}"})
        team = LAYOUT.conversations_filter(None)
        plain = engine.fetch(FetchRequest(query="kayak lake trip", filter=team, limit=1, max_scopes=1))
        assert [h.meta.agent_id for h in plain.hits] == ["ann"]
        request = FetchRequest(query="kayak lake trip", filter=team, limit=1, max_scopes=1, exclude_agent_id="ann")
        assert [h.meta.agent_id for h in engine.fetch(request).hits] == ["bob"]

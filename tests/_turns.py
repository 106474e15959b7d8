"""Test helper: numbered user turns stored into an agent's node, for the SQLite scale and bounded-read tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memory_core.engine import MemoryEngine
from memory_core.items import Role, Turn
from memory_core.lifecycle.agent import AgentMemory, turn_item
from memory_core.lifecycle.layout import MemoryLayout


def say(engine: MemoryEngine, layout: MemoryLayout, node_of: str, agent: str, start: int, n: int) -> list[str]:
    """Store turns ``start .. start + n - 1`` by ``agent`` in ``node_of``'s node (threads ``t0..t2``, one hour
    apart from 2023-01-01 UTC), 100 per ``store_many``; their ids in order."""
    node = AgentMemory(engine, layout, node_of).node
    items = [
        turn_item(
            node,
            agent,
            f"t{i % 3}",
            i,
            Turn(role=Role.USER, text=f"My {agent} garden grew {i} tomatoes and a kayak trip on day {i}."),
            at=datetime(2023, 1, 1, tzinfo=UTC) + timedelta(hours=i),
        )
        for i in range(start, start + n)
    ]
    for i in range(0, len(items), 100):
        engine.store_many(items[i : i + 100])
    return [item.id for item in items]

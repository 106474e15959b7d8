"""``scoped_tools``: the ``MemoryTools`` one identity may use (reference §6.4 "Confinement").

Every surface that lets a client or model store, read or forget (the MCP server, the HTTP API's learn/forget)
goes through the tools this returns, so none can bypass ``MemoryTools``' confinement and scrubbing.
"""

from __future__ import annotations

from memory_core.engine import MemoryEngine
from memory_core.lifecycle.layout import MemoryLayout, check_agent_id
from memory_core.namespace import Reach
from memory_core.tools import MemoryTools

__all__ = ["scoped_tools"]


def scoped_tools(engine: MemoryEngine, layout: MemoryLayout, agent_id: str | None = None) -> MemoryTools:
    """``MemoryTools`` for one identity: reads and forgets under the root's subtree, writes at one node.

    Learnings land at the root's learnings node, or at the agent's node when ``agent_id`` is given, and then
    record it as ``meta.agent_id`` (reference §6.4: ``learn`` stamps the agent id). Reads admit
    ``Reach.subtree(root)`` only: never a sibling tenant, never the shared nodes above the root (a tenant's
    forget must not reach them).

    Raises:
        InvalidRequest: a blank agent id.
    """
    place = layout.learnings() if agent_id is None else layout.conversations(check_agent_id(agent_id))
    return MemoryTools(engine).placed_at(place).reach(Reach.subtree(layout.root)).as_agent(agent_id)

"""``scoped_tools``: the ``MemoryTools`` one identity may use (reference §6.4 "Confinement").

Every surface that lets a client or model store, read or forget (the MCP server, the HTTP API's learn/forget)
goes through the tools this returns, or through ``ToolWrites`` over ``tool_scope`` (the same confinement, with
learn and forget that never fail the caller), so none can bypass ``MemoryTools``' confinement and scrubbing.
"""

from __future__ import annotations

from memory_core.engine import MemoryEngine
from memory_core.errors import InvalidRequest
from memory_core.lifecycle.layout import MemoryLayout, check_agent_id
from memory_core.namespace import Namespace, Reach
from memory_core.tools import MemoryTools, ToolScope

__all__ = ["scoped_tools", "tool_scope"]


def tool_scope(layout: MemoryLayout, agent_id: str | None = None, *, place: Namespace | None = None) -> ToolScope:
    """The ``ToolScope`` of one identity: reads and forgets under the root's subtree, writes at one node; pure.

    Learnings land at ``place`` when given, else at the agent's node when ``agent_id`` is given, else at the
    root's learnings node; with ``agent_id`` they record it as ``meta.agent_id`` wherever they land (reference
    §6.4: ``learn`` stamps the agent id). Reads admit ``Reach.subtree(root)`` only: never a sibling tenant, never
    the shared nodes above the root (a tenant's forget must not reach them).

    Args:
        layout: The identity's layout (its root bounds everything).
        agent_id: The agent served, or None.
        place: Where learnings land (the root or a node below it); None: as above. The HTTP API passes the
            root's learnings node, so a learning is shared by the root's agents and still says who made it.

    Raises:
        InvalidRequest: a blank agent id (``field="agent_id"``); a ``place`` outside the root (``field="place"``).
    """
    agent = None if agent_id is None else check_agent_id(agent_id)
    if place is None:
        place = layout.learnings() if agent is None else layout.conversations(agent)
    elif not isinstance(place, Namespace) or not place.is_within(layout.root):
        raise InvalidRequest(f"{place} is not within the layout root {layout.root}", field="place")
    return ToolScope(place=place, reach=Reach.subtree(layout.root), writes=True, agent_id=agent)


def scoped_tools(
    engine: MemoryEngine, layout: MemoryLayout, agent_id: str | None = None, *, place: Namespace | None = None
) -> MemoryTools:
    """``MemoryTools`` confined to ``tool_scope(layout, agent_id, place=place)``.

    Raises:
        InvalidRequest: as ``tool_scope``.
    """
    return MemoryTools(engine, tool_scope(layout, agent_id, place=place))

"""Moving an agent's history from the contract's sanitised node to the node no other id can name (issue 11 rule 7).

Before rule 7 an agent id that is not a segment id (``"Helper Bot"``) lived at ``agent:<cleaned>-<fnv1a32>``
(reference §1.7 ``Segment::sanitized``), a node a second agent could name with that valid id and so read the first
one's history. ``MemoryLayout.conversations`` now maps such ids to ``agent:--<cleaned>-<sha256>``; this module
moves what the old node holds **for that agent id** (``meta.agent_id``) there, leaving the old node to the valid id
that names it. Items another agent stored at the old node keep their place: ``meta.agent_id`` tells them apart.
"""

from __future__ import annotations

import logging

from memory_core.engine import MemoryEngine
from memory_core.errors import MemoryCoreError
from memory_core.lifecycle.layout import MemoryLayout, check_agent_id
from memory_core.limits import MAX_FORGET_IDS, MAX_STORE_MANY
from memory_core.meta import MetaFilter
from memory_core.namespace import Reach
from memory_core.query import ForgetTarget, ListRequest

__all__ = ["move_sanitised_history", "move_sanitised_history_logged"]

_log = logging.getLogger(__name__)


def move_sanitised_history(engine: MemoryEngine, layout: MemoryLayout, agent_id: str) -> int:
    """Move the items ``agent_id`` stored at its old (contract-sanitised) node to its node now.

    Reads the old node exactly (``Reach.exact``) with ``agent_id`` as a filter through ``export`` (whole items,
    ``MAX_STORE_MANY`` a page), stores each at the new node (``store_many``; a repeat is a replay) and then forgets
    the old copies by id, so a crash midway leaves copies, never a loss, and a rerun finishes the move.

    Args:
        engine: The engine holding the history.
        layout: The layout the agent lives in.
        agent_id: The agent; a segment id has one node under both rules, so nothing moves.

    Returns:
        How many items moved (0 for a segment id, or when the old node holds nothing of this agent).

    Raises:
        InvalidRequest: a malformed agent id.
        MemoryCoreError: the engine's error; ``Unsupported`` when it cannot export.
    """
    aid = check_agent_id(agent_id)
    new, old = layout.conversations(aid), layout.contract_conversations(aid)
    if new == old:
        return 0
    flt = MetaFilter(reach=Reach.exact(old), agent_id=aid)
    moved: list[str] = []
    cursor: str | None = None
    while True:
        page = engine.export(ListRequest(filter=flt, limit=MAX_STORE_MANY, cursor=cursor))
        if page.items:
            engine.store_many([e.item.with_meta(e.item.item_meta.at(new)) for e in page.items])
            moved.extend(e.id for e in page.items)
        cursor = page.next_cursor
        if cursor is None or not page.items:
            break
    for start in range(0, len(moved), MAX_FORGET_IDS):
        engine.forget(ForgetTarget.by_ids(moved[start : start + MAX_FORGET_IDS]))
    return len(moved)


def move_sanitised_history_logged(engine: MemoryEngine, layout: MemoryLayout, agent_id: str) -> int:
    """``move_sanitised_history``, logging an engine error (a warning) instead of raising it; 0 then.

    ``AgentMemory`` calls this when it is opened for an id that is not a segment id: a read-only or unreachable
    engine must not stop the agent from starting, and the next open tries again.
    """
    try:
        moved = move_sanitised_history(engine, layout, agent_id)
    except MemoryCoreError as exc:
        _log.warning("agent %r: its history at the old sanitised node was not moved: %s", agent_id, exc)
        return 0
    if moved:
        _log.info("agent %r: moved %d items from the old sanitised node", agent_id, moved)
    return moved

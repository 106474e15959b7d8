"""``host.tools``: the scope one identity's tools and writes get; an explicit place records the agent where it is."""

from __future__ import annotations

import pytest

from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import InvalidRequest
from memory_core.host.tools import scoped_tools, tool_scope
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.namespace import Namespace, Reach
from memory_core.query import ListRequest

LAYOUT = MemoryLayout("team:a")


def test_the_default_places_are_the_root_or_the_agents_node_and_reads_stay_under_the_root() -> None:
    assert tool_scope(LAYOUT).place == LAYOUT.learnings() and tool_scope(LAYOUT).agent_id is None
    bot = tool_scope(LAYOUT, " bot ")
    assert (bot.place, bot.agent_id, bot.reach) == (LAYOUT.conversations("bot"), "bot", Reach.subtree(LAYOUT.root))


def test_an_explicit_place_keeps_the_learning_there_and_still_records_the_agent() -> None:
    engine = ReferenceEngine()
    scoped_tools(engine, LAYOUT, "bot", place=LAYOUT.learnings()).call(
        "memory_store", {"learning": {"text": "Mara lives in Porto."}}
    )
    [item] = engine.list(ListRequest(limit=10)).items
    assert (item.meta.namespace, item.meta.agent_id) == (LAYOUT.root, "bot")


@pytest.mark.parametrize("place", ["team:b", "root"])
def test_a_place_outside_the_root_is_refused(place: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        tool_scope(LAYOUT, "bot", place=Namespace.parse(place))
    assert err.value.field == "place"
    with pytest.raises(InvalidRequest) as blank:
        tool_scope(LAYOUT, "  ")
    assert blank.value.field == "agent_id"

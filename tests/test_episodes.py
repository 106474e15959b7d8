"""Episodes are the turns memory already logs (seed 004, issue 20 §2): one item per turn, capped, immutable."""

from __future__ import annotations

from datetime import UTC, datetime

from memory_core.engines.reference import ReferenceEngine
from memory_core.lifecycle import AgentMemory, MemoryLayout, PostTurn, PreTurn
from memory_core.lifecycle.caps import TRUNCATION_MARKER
from memory_core.limits import ASSISTANT_TEXT_CAP, USER_TEXT_CAP
from memory_core.meta import ItemKind
from memory_core.query import ForgetTarget, GetRequest, ListRequest

AT = datetime(2026, 2, 1, tzinfo=UTC)


def test_each_turn_is_one_conversation_item_capped_with_a_marker() -> None:
    engine = ReferenceEngine()
    memory = AgentMemory(engine, MemoryLayout("team:acme"), "helper")
    memory.pre_turn(PreTurn(thread_id="t", turn_index=0, user_text="u" * USER_TEXT_CAP + " tail", at=AT))
    memory.post_turn(PostTurn(thread_id="t", turn_index=0, assistant_text="a" * ASSISTANT_TEXT_CAP + " tailed", at=AT))
    items = engine.list(ListRequest(limit=10)).items
    assert [h.kind for h in items] == [ItemKind.CONVERSATION, ItemKind.CONVERSATION]
    user, reply = sorted(items, key=lambda h: h.text[:6])[::-1]
    assert user.text == "user: " + "u" * USER_TEXT_CAP + TRUNCATION_MARKER.format(dropped=5, total=USER_TEXT_CAP + 5)
    marker = TRUNCATION_MARKER.format(dropped=7, total=ASSISTANT_TEXT_CAP + 7)
    assert reply.text == "assistant: " + "a" * ASSISTANT_TEXT_CAP + marker


def test_a_logged_turn_never_changes_only_deletion_removes_it() -> None:
    engine = ReferenceEngine()
    memory = AgentMemory(engine, MemoryLayout("team:acme"), "helper")
    first = memory.pre_turn(PreTurn(thread_id="t", turn_index=0, user_text="first words", at=AT)).logged
    again = memory.pre_turn(PreTurn(thread_id="t", turn_index=0, user_text="other words", at=AT)).logged
    assert first is not None and again is not None and first.id != again.id  # content-addressed: a new item
    (held,) = engine.get(GetRequest(ids=(first.id,)))
    assert held.text == "user: first words"
    assert engine.forget(ForgetTarget(ids=(first.id,))).forgotten == 1
    assert list(engine.get(GetRequest(ids=(first.id,)))) == []

"""Turn caps (seed 004, issue 11 rule 6): memory keeps 4,000 characters of a user turn and 8,000 of a reply.

Main logged a 999,999-character user text whole and ranked the pack for all of it (``pre_turn`` took 7.6 s).
These tests count what reaches the engine (stored text, query text), never time.
"""

from __future__ import annotations

import pytest

from memory_core.consolidation import WriteOptions
from memory_core.engine import AnyItem
from memory_core.engines.reference import ReferenceEngine
from memory_core.errors import ConfigError
from memory_core.items import Conversation
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.caps import TRUNCATION_MARKER, cap_text
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.limits import ASSISTANT_TEXT_CAP, USER_TEXT_CAP
from memory_core.query import FetchPage, FetchRequest, StoreReceipt
from memory_core.settings import get_settings

_MARKER_MAX = len(TRUNCATION_MARKER.format(dropped=10**7, total=10**7))


class CountingEngine(ReferenceEngine):
    """The reference engine, recording the text of every stored turn and of every fetch query."""

    def __init__(self) -> None:
        super().__init__()
        self.stored: list[str] = []
        self.queries: list[str] = []

    def _store_with(self, item: AnyItem, options: WriteOptions) -> StoreReceipt:
        if isinstance(item, Conversation):
            self.stored.extend(t.text for t in item.turns)
        return super()._store_with(item, options)

    def _fetch(self, request: FetchRequest) -> FetchPage:
        self.queries.append(request.query or "")
        return super()._fetch(request)


def _agent(engine: CountingEngine) -> AgentMemory:
    return AgentMemory(engine, MemoryLayout("team:acme"), "helper")


def test_a_huge_user_text_is_logged_capped_with_a_marker_and_ranked_for_the_capped_text() -> None:
    engine = CountingEngine()
    text = "refund policy " * 71_428 + "x"  # 999,993 characters
    ctx = _agent(engine).pre_turn({"thread_id": "t", "turn_index": 0, "user_text": text})
    assert ctx.log_error is None
    [logged] = engine.stored
    assert logged.startswith(text[:USER_TEXT_CAP]) and len(logged) <= USER_TEXT_CAP + _MARKER_MAX
    assert logged.endswith(f"truncated by memory: {len(text) - USER_TEXT_CAP} of {len(text)} characters left out]")
    assert engine.queries and max(len(q) for q in engine.queries) <= USER_TEXT_CAP


def test_a_huge_reply_is_logged_capped_at_8000_with_a_marker() -> None:
    engine = CountingEngine()
    text = "a" * 20_000
    _agent(engine).post_turn({"thread_id": "t", "turn_index": 0, "assistant_text": text})
    [logged] = engine.stored
    assert logged == "a" * ASSISTANT_TEXT_CAP + TRUNCATION_MARKER.format(dropped=12_000, total=20_000)


def test_texts_within_the_caps_are_kept_whole() -> None:
    engine = CountingEngine()
    agent = _agent(engine)
    agent.pre_turn({"thread_id": "t", "turn_index": 0, "user_text": "u" * USER_TEXT_CAP})
    agent.post_turn({"thread_id": "t", "turn_index": 0, "assistant_text": "a" * ASSISTANT_TEXT_CAP})
    assert engine.stored == ["u" * USER_TEXT_CAP, "a" * ASSISTANT_TEXT_CAP]
    assert cap_text("u" * (USER_TEXT_CAP + 1), USER_TEXT_CAP).startswith("u" * USER_TEXT_CAP + " [… truncated")


def test_a_retried_huge_turn_is_a_replay() -> None:
    engine = CountingEngine()
    agent = _agent(engine)
    turn = {"thread_id": "t", "turn_index": 0, "user_text": "z" * 50_000}
    first = agent.pre_turn(turn).logged
    second = agent.pre_turn(turn).logged
    assert first is not None and second is not None
    assert second.replayed and second.id == first.id


def test_the_caps_are_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_CORE_USER_TEXT_CAP", "10")
    monkeypatch.setenv("MEMORY_CORE_ASSISTANT_TEXT_CAP", "20")
    get_settings.cache_clear()
    engine = CountingEngine()
    agent = _agent(engine)
    agent.pre_turn({"thread_id": "t", "turn_index": 0, "user_text": "0123456789abc"})
    agent.post_turn({"thread_id": "t", "turn_index": 0, "assistant_text": "b" * 21})
    assert engine.stored == [
        "0123456789" + TRUNCATION_MARKER.format(dropped=3, total=13),
        "b" * 20 + TRUNCATION_MARKER.format(dropped=1, total=21),
    ]
    assert max(len(q) for q in engine.queries) <= 10
    engine.queries.clear()
    agent.recall("q" * 5_000)
    assert engine.queries and max(len(q) for q in engine.queries) <= 10


@pytest.mark.parametrize("value", ["0", "-1", "many", "1000001"])
def test_a_malformed_cap_is_a_config_error_naming_it(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("MEMORY_CORE_USER_TEXT_CAP", value)
    get_settings.cache_clear()
    with pytest.raises(ConfigError, match="MEMORY_CORE_USER_TEXT_CAP"):
        _agent(CountingEngine())

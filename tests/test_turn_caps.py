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
    kept = text[:3_997]  # the cut at 4,000 splits "pol|icy": memory keeps up to "refund " and drops the space
    assert logged == kept.rstrip() + TRUNCATION_MARKER.format(dropped=len(text) - 3_996, total=len(text))
    assert len(logged) <= USER_TEXT_CAP + _MARKER_MAX
    assert engine.queries and max(len(q) for q in engine.queries) <= USER_TEXT_CAP


def test_a_huge_reply_is_logged_capped_at_8000_with_a_marker() -> None:
    engine = CountingEngine()
    text = "a " * 10_000
    _agent(engine).post_turn({"thread_id": "t", "turn_index": 0, "assistant_text": text})
    [logged] = engine.stored
    assert logged == "a " * 3_999 + "a" + TRUNCATION_MARKER.format(dropped=12_001, total=20_000)


def test_texts_within_the_caps_are_kept_whole() -> None:
    engine = CountingEngine()
    agent = _agent(engine)
    agent.pre_turn({"thread_id": "t", "turn_index": 0, "user_text": "u" * USER_TEXT_CAP})
    agent.post_turn({"thread_id": "t", "turn_index": 0, "assistant_text": "a" * ASSISTANT_TEXT_CAP})
    assert engine.stored == ["u" * USER_TEXT_CAP, "a" * ASSISTANT_TEXT_CAP]
    assert cap_text("u " * USER_TEXT_CAP, USER_TEXT_CAP).startswith("u " * 1_999 + "u [… truncated")


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
    agent.pre_turn({"thread_id": "t", "turn_index": 0, "user_text": "0123456789 abc"})
    agent.post_turn({"thread_id": "t", "turn_index": 0, "assistant_text": "b" * 20 + " c"})
    assert engine.stored == [
        "0123456789" + TRUNCATION_MARKER.format(dropped=4, total=14),
        "b" * 20 + TRUNCATION_MARKER.format(dropped=2, total=22),
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


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("one two three", "one two"),  # the cut at 10 splits "thr|ee": the whole run goes
        ("one two th", "one two th"),  # within the cap: whole
        ("one two th ee", "one two th"),  # the cut falls on whitespace: no run is split
        ("one two th\tee", "one two th"),  # any whitespace ends a run
        ("one two   three", "one two"),  # whitespace before the split run is dropped with it
        ("onetwothree", ""),  # one run: nothing of it is kept
        ("   onetwothree", ""),
    ],
)
def test_a_cut_never_keeps_part_of_a_run(text: str, kept: str) -> None:
    capped = cap_text(text, 10)
    if len(text) <= 10:
        assert capped == text
    else:
        marker = TRUNCATION_MARKER.format(dropped=len(text) - len(kept), total=len(text))
        assert capped == (kept + marker if kept else marker.lstrip())


def test_a_cut_keeps_at_most_the_cap_for_every_length_and_cut() -> None:
    text = "ab cde  fghi\njklmn opqrst uvwxyz"
    for cap in range(1, len(text) + 2):
        capped = cap_text(text, cap)
        if cap >= len(text):
            assert capped == text
            continue
        kept, marker = capped.split("[… truncated", 1)
        assert kept == "" or kept.endswith(" ")
        kept = kept[:-1]
        assert len(kept) <= cap and text.startswith(kept) and not kept.endswith((" ", "\n"))
        assert kept.split() == text[: len(kept)].split() and set(kept.split()) <= set(text.split())  # whole runs
        assert marker.startswith(f" by memory: {len(text) - len(kept)} of {len(text)} ")

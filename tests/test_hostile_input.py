"""Input no engine could store, or that would steer a terminal, is refused where its rule lives (issue 17 follow-up).

NUL (U+0000) in any stored string, control characters in a fact key, a non-finite importance, a statement dated
past the clock's skew, and an LSN no engine can bind: each is ``InvalidRequest`` naming the field, nothing stored.
A forgotten key loses every stored value, superseded ones included.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memory_core.engines.reference import ReferenceEngine
from memory_core.engines.sqlite.engine import SQLiteEngine
from memory_core.errors import InvalidRequest
from memory_core.facts.model import MAX_STATED_SKEW, check_importance, check_key
from memory_core.facts.store import FactStore
from memory_core.host.tools import scoped_tools
from memory_core.lifecycle import AgentMemory, MemoryLayout, PostTurn, PreTurn
from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.jobs import IngestBrain
from memory_core.mcp_server import McpTools
from memory_core.memory_log import RecordOp
from memory_core.meta import MemoryMeta, MetaFilter
from memory_core.namespace import Namespace
from memory_core.query import ForgetTarget, GetRequest, ListRequest
from memory_core.replay.formats import parse_chatgpt_export, parse_jsonl, parse_locomo

ROOT = Namespace.parse("team:acme")


@pytest.fixture(autouse=True)
def _hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_CORE_EMBEDDER", "hash")


def _refused(field: str, call: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        call()
    assert caught.value.field == field, caught.value
    return caught.value


# 1. NUL in every stored string ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"thread_id": "t\x00"}, "thread_id"),
        ({"agent_id": "a\x00"}, "agent_id"),
        ({"url": "https://x/\x00"}, "url"),
        ({"tags": ("ok", "b\x00d")}, "tags.1"),
        ({"source": {"kind": "file", "id": "f\x00"}}, "source.id"),
        ({"observed_actor": {"id": "user:\x00"}}, "observed_actor.id"),
        ({"tool_call": {"name": "t\x00"}}, "tool_call.name"),
    ],
)
def test_memory_meta_refuses_nul_in_every_string_naming_the_field(changes: dict[str, Any], field: str) -> None:
    _refused(field, lambda: MemoryMeta.model_validate(changes))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"thread_id": "t\x00"}, "thread_id"),
        ({"tags_any": ["\x00"]}, "tags_any.0"),
        ({"source_id": "\x00"}, "source_id"),
    ],
)
def test_meta_filter_refuses_nul(changes: dict[str, Any], field: str) -> None:
    _refused(field, lambda: MetaFilter.model_validate(changes))


def test_ids_holding_nul_are_refused_by_get_and_forget_before_the_engine() -> None:
    engine = ReferenceEngine()
    _refused("ids", lambda: engine.forget(ForgetTarget(ids=("a\x00b",))))
    _refused("ids", lambda: engine.get(GetRequest(ids=("a\x00b",))))
    _refused("ids", lambda: engine.forget_within(["a\x00b"], {"at": "root"}))
    _refused("ids", lambda: engine.retract(["a\x00b"], "wrong"))


def test_pre_turn_and_post_turn_refuse_a_thread_id_holding_nul(tmp_path: Path) -> None:
    _refused("thread_id", lambda: PreTurn(thread_id="t\x00", turn_index=0, user_text="hi"))
    _refused("thread_id", lambda: PostTurn(thread_id="t\x00", turn_index=0, assistant_text="hello"))
    with SQLiteEngine(tmp_path / "m.db") as engine:
        memory = AgentMemory(engine, MemoryLayout("team:acme"), "writer")
        _refused("thread_id", lambda: memory.pre_turn({"thread_id": "t\x00", "turn_index": 0, "user_text": "hi"}))
        assert engine.list(ListRequest(limit=10)).items == ()


def test_brain_documents_refuse_nul_in_text_and_title_and_the_job_names_the_document() -> None:
    _refused("text", lambda: BrainDocument.new("notes", "a\x00b"))
    _refused("title", lambda: BrainDocument.new("notes", "ab", title="t\x00"))
    good = BrainDocument.new("notes", "fine").to_dict()
    bad = {**good, "title": "x\x00"}
    _refused("documents.1.title", lambda: IngestBrain.model_validate({"documents": [good, bad]}))


def test_replay_formats_refuse_nul_while_parsing_naming_the_place() -> None:
    lines = [f'{{"thread": "t", "role": "user", "content": "turn {i}"}}' for i in range(6)]
    lines.append('{"thread": "t", "role": "user", "content": "bad \\u0000 turn"}')
    _refused("line 7.content", lambda: parse_jsonl(lines))
    _refused("line 1.thread", lambda: parse_jsonl(['{"thread": "t\\u0000", "role": "user", "content": "x"}']))
    locomo = [{"sample_id": "s", "conversation": {"session_1": [{"speaker": "A\x00", "text": "hi", "dia_id": "D1:1"}]}}]
    _refused("samples.0.session_1.0.speaker", lambda: parse_locomo(locomo))
    chat = [
        {
            "conversation_id": "c",
            "current_node": "n1",
            "mapping": {"n1": {"message": {"author": {"role": "user"}, "content": {"parts": ["a\x00"]}}}},
        }
    ]
    _refused("conversations.0.mapping.n1.message.content", lambda: parse_chatgpt_export(chat))


# 2. control characters in keys ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "key",
    ["a\x1b]0;pwned\x07\nb", "a\x00b", "a\tb", "a\x7fb", "a\x9bb", "a\u202eb", "a\u2066b", "line\rbreak"],
)
def test_a_key_holding_a_control_character_is_refused(key: str) -> None:
    assert "control character" in _refused("learning.key", lambda: check_key(key, "learning.key")).reason


def test_a_key_of_printable_text_is_kept() -> None:
    assert check_key("  ui.thème/ダーク  ") == "ui.thème/ダーク"


def test_a_hostile_key_stores_nothing(tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "m.db") as engine:
        _refused("key", lambda: FactStore(engine, ROOT).learn("dark", key="a\x1b]0;pwned\x07\nb"))
        assert engine.list(ListRequest(limit=10)).items == ()


# 3. importance is finite ------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_importance_refuses_nan_and_infinities_naming_the_field(value: float) -> None:
    assert "finite" in _refused("learning.importance", lambda: check_importance(value, "learning.importance")).reason


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_mcp_learn_refuses_a_non_finite_importance_and_stores_nothing(value: float) -> None:
    engine = ReferenceEngine()
    tools = McpTools(scoped_tools(engine, MemoryLayout("team:a")))
    _refused("importance", lambda: tools.call("memory.learn", {"text": "x", "key": "k", "importance": value}))
    assert engine.list(ListRequest(limit=10)).items == ()


# 4. a statement from the future ------------------------------------------------------------------------------
def test_a_statement_dated_past_the_skew_is_refused_and_does_not_freeze_the_key(tmp_path: Path) -> None:
    with SQLiteEngine(tmp_path / "m.db") as engine:
        memory = AgentMemory(engine, MemoryLayout("team:acme"), "writer")
        now = datetime.now(UTC)
        later = now + timedelta(days=3650)
        error = _refused("at", lambda: memory.learn("The UI theme is dark", key="ui.theme", at=later))
        assert "ahead of the clock" in error.reason
        assert engine.list(ListRequest(limit=10)).items == ()
        memory.learn("The UI theme is dim", key="ui.theme", at=now + MAX_STATED_SKEW - timedelta(seconds=30))
        memory.learn("The UI theme is light", key="ui.theme")  # not "superseded on arrival": the skew is small
        current = memory.facts().current("ui.theme")
        assert current is not None and current.text in ("The UI theme is dim", "The UI theme is light")


def test_a_statement_skew_follows_the_stores_clock() -> None:
    clock_now = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    facts = FactStore(ReferenceEngine(), ROOT, clock=lambda: clock_now)
    _refused("at", lambda: facts.learn("x", key="k", at=clock_now + MAX_STATED_SKEW + timedelta(seconds=1)))
    assert facts.learn("x", key="k", at=clock_now + MAX_STATED_SKEW).superseded == ()


# 5. forget removes every stored value of a key ---------------------------------------------------------------
def test_forgetting_a_key_removes_its_superseded_values_too_leaving_tombstones(tmp_path: Path) -> None:
    t0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    with SQLiteEngine(tmp_path / "m.db") as engine:
        facts = FactStore(engine, ROOT)
        old = facts.learn("The UI theme is dark", key="ui.theme", at=t0)
        new = facts.learn("The UI theme is light", key="ui.theme", at=t0 + timedelta(hours=1))
        kept = facts.learn("Ana prefers tea", at=t0)
        assert facts.forget("ui.theme") == 2
        for item_id in (old.id, new.id):
            assert engine.history(item_id)[-1].op is RecordOp.TOMBSTONE
            assert engine.history(item_id)[-1].reason == "forget"
        as_of = engine.as_of(engine.current_lsn() - 1)  # the past cannot bring the text back either
        assert [h.id for h in as_of.list(ListRequest(limit=10)).items] == [kept.id]
        assert [h.id for h in engine.list(ListRequest(limit=10)).items] == [kept.id]

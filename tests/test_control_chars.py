"""Control characters (issue 17): NUL is refused where an item is stored, naming the field; every other control
character, terminal escape sequence and bidi override is stored as said and rendered inert in packs and
``context.md`` (``control.neutralise_control_chars``), so nothing raw comes out of a rendered block."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core import Conversation, Document, DocumentBody, Role, Turn
from memory_core.control import BIDI_CONTROLS, escape_control_chars_json, neutralise, neutralise_control_chars
from memory_core.engine import MemoryEngine
from memory_core.engines.reference import ReferenceEngine
from memory_core.engines.sqlite.engine import SQLiteEngine
from memory_core.errors import InvalidRequest
from memory_core.items import Learning
from memory_core.lifecycle.agent import AgentMemory
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.query import ListRequest
from memory_core.recall.context import ContextSpec, compile_context

AT = datetime(2026, 5, 8, 12, 0, tzinfo=UTC)
RAW = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f" + BIDI_CONTROLS + "]")
"""What must never come out of a rendered pack: C0 but tab/newline/CR, DEL, C1, bidi embeddings and overrides."""

HOSTILE = [
    "Mara's IBAN is \x1b[8mhidden\x1b[0m and her colour is \x1b[31mred\x1b[0m.",
    "Mara's title is \x1b]0;pwned\x07 set by a terminal escape.",
    "Mara's file is invoice\u202etxt.exe in the drafts folder.",
    "Mara wrote \u2066\u2067nested isolates\u2069\u2069 and \u202aembedding\u202c here.",
    "Mara pressed \x08\x08\x08 backspace and bell \x07 and form\x0cfeed and \x7fdelete.",
    "Mara's notes carry C1 \x85 next line and \x9b31m CSI.",
]


# the pure rule -----------------------------------------------------------------------------------------------
def test_every_control_character_is_shown_inert_character_for_character() -> None:
    raw = "".join(chr(c) for c in range(0x20)) + "\x7f" + "".join(chr(c) for c in range(0x80, 0xA0)) + BIDI_CONTROLS
    out = neutralise_control_chars(raw)
    assert len(out) == len(raw) and RAW.search(out) is None
    assert out[0] == "␀" and out[0x1B] == "␛" and out[0x20] == "␡"
    assert (out[9], out[10], out[13]) == ("\t", "\n", "\r")  # kept: layout, not control
    assert out.endswith("\ufffd" * len(BIDI_CONTROLS))
    assert neutralise("\x1b[31m<|im_start|>") == "␛[31m‹|im_start|›"


@pytest.mark.parametrize(
    "text",
    [
        "Mara moved to Porto.\tThen to Braga.\r\nShe likes it.",
        "مرحبا \u200fبالعالم\u200e and שלום",  # right-to-left text with implicit marks (LRM/RLM) is ordinary text
        "Café, naïve, 日本語, emoji 🎉, ‹quotes›, a < b [see]",
    ],
)
def test_ordinary_text_is_unchanged(text: str) -> None:
    assert neutralise_control_chars(text) is text


# NUL at write -------------------------------------------------------------------------------------------------
@pytest.fixture(params=["reference", "sqlite"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> MemoryEngine:
    if request.param == "sqlite":
        return SQLiteEngine(tmp_path / "m.db")
    return ReferenceEngine()


@pytest.mark.parametrize(
    ("item", "field"),
    [
        (Learning(text="Mara\x00lives in Porto."), "item.text"),
        (Learning(text="Mara lives in Porto.", evidence="chat\x00log"), "item.evidence"),
        (
            Conversation(turns=(Turn(role=Role.USER, text="ok"), Turn(role=Role.USER, text="a\x00b"))),
            "item.turns.1.text",
        ),
        (Document(title="T\x00", body=DocumentBody(text="Body.")), "item.title"),
        (Document(body=DocumentBody(text="Body\x00.")), "item.body.text"),
    ],
)
def test_nul_is_refused_at_store_naming_the_field_and_nothing_is_stored(
    engine: MemoryEngine, item: Learning | Conversation | Document, field: str
) -> None:
    with pytest.raises(InvalidRequest) as err:
        engine.store(item)
    assert err.value.field == field
    with pytest.raises(InvalidRequest) as batch:
        engine.store_many([Learning(text="fine"), item])
    assert batch.value.field == "items.1." + field.removeprefix("item.")
    assert engine.list(ListRequest(limit=10)).items == ()


def test_a_turn_holding_nul_is_refused_by_its_request_field_before_anything_is_logged(engine: MemoryEngine) -> None:
    agent = AgentMemory(engine, MemoryLayout("team:acme"), "helper")
    with pytest.raises(InvalidRequest) as pre:
        agent.pre_turn({"thread_id": "t", "turn_index": 0, "user_text": "Where\x00 is Mara?"})
    assert pre.value.field == "user_text"
    with pytest.raises(InvalidRequest) as post:
        agent.post_turn({"thread_id": "t", "turn_index": 1, "assistant_text": "In\x00 Porto."})
    assert post.value.field == "assistant_text"
    with pytest.raises(InvalidRequest):
        agent.learn("Mara\x00 lives in Porto.")
    assert engine.list(ListRequest(limit=10)).items == ()


# stored verbatim, rendered inert -------------------------------------------------------------------------------
def test_hostile_text_is_stored_as_said_and_no_raw_control_leaves_a_pack_or_context_md(engine: MemoryEngine) -> None:
    agent = AgentMemory(engine, MemoryLayout("team:acme"), "helper")
    for i, text in enumerate(HOSTILE):
        agent.post_turn({"thread_id": "t", "turn_index": i, "assistant_text": text})
        agent.learn(text.replace("Mara", "Ana"), at=AT)
    stored = {h.text for h in engine.list(ListRequest(limit=100)).items}
    for text in HOSTILE:  # what was said stays what was said
        assert any(text in s for s in stored) and text.replace("Mara", "Ana") in stored
    pack = agent.recall("Mara Ana colour title file isolates backspace notes")
    context = compile_context(engine, ContextSpec(), at=AT)
    for markdown in (pack.markdown, context.markdown):
        assert "Ana" in markdown  # the learnings are shown ...
        assert RAW.search(markdown) is None  # ... and nothing raw comes out
    shown = pack.markdown + context.markdown
    assert "␛[31mred␛[0m" in shown and "invoice\ufffdtxt.exe" in shown
    assert "\x1b" not in shown and "\u202e" not in shown and "\x00" not in shown


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(value=_JSON_VALUES, indent=st.sampled_from([None, 2]))
def test_json_escaping_keeps_the_value_and_leaves_no_raw_control(value: object, indent: int | None) -> None:
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    escaped = escape_control_chars_json(text)
    assert json.loads(escaped) == value
    assert RAW.search(escaped) is None


def test_json_escaping_writes_u_escapes_and_leaves_clean_text_as_it_is() -> None:
    assert escape_control_chars_json('"a\x9bb\u202ec\x7f"') == '"a\\u009bb\\u202ec\\u007f"'
    clean = json.dumps({"text": "Café ☕ line\nbreak"}, ensure_ascii=False, indent=2)
    assert escape_control_chars_json(clean) is clean

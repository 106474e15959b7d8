"""Conversation files: LoCoMo JSON, JSONL and ChatGPT exports become one ordered stream of turns."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory_core.errors import InvalidRequest
from memory_core.replay import load_conversations, parse_chatgpt_export, parse_jsonl, parse_locomo
from memory_core.replay.formats import parse_locomo_datetime

LOCOMO = {
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_2_date_time": "9:05 am on 3 June, 2023",
        "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "text": "Back again."}],
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I moved to Lisbon."},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "Nice!", "blip_caption": "a photo of a tram"},
            {"speaker": "Ann", "dia_id": "D1:3", "text": "   "},
        ],
    },
    "qa": [{"question": "Where did Ann move?", "answer": "Lisbon", "evidence": ["D1:1"], "category": 4}],
}


def test_locomo_sessions_come_in_number_order_with_their_time_and_dia_ids() -> None:
    parsed = parse_locomo([LOCOMO])
    assert [t.ref for t in parsed.turns] == ["D1:1", "D1:2", "D2:1"]
    assert [t.thread_id for t in parsed.turns] == ["conv-x-s1", "conv-x-s1", "conv-x-s2"]
    assert parsed.turns[0].at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert parsed.turns[2].at == datetime(2023, 6, 3, 9, 5, tzinfo=UTC)
    assert parsed.speakers == ["Ann", "Bo"]
    assert parsed.qa["conv-x"][0]["answer"] == "Lisbon"


def test_locomo_keeps_a_shared_photo_caption_and_drops_blank_turns() -> None:
    parsed = parse_locomo(LOCOMO)
    assert parsed.turns[1].text == "Nice! [shares a photo: a photo of a tram]"
    assert all(t.text.strip() for t in parsed.turns)


def test_locomo_sample_selection_and_an_unknown_sample() -> None:
    assert parse_locomo([LOCOMO], ["conv-x"]).samples == ["conv-x"]
    with pytest.raises(InvalidRequest) as err:
        parse_locomo([LOCOMO], ["conv-404"])
    assert err.value.field == "sample"


def test_locomo_time_format_and_a_bad_one() -> None:
    assert parse_locomo_datetime("10:37 am on 27 June,2023") == datetime(2023, 6, 27, 10, 37, tzinfo=UTC)
    with pytest.raises(InvalidRequest):
        parse_locomo_datetime("sometime in June")


def test_jsonl_turns_keep_roles_threads_and_times() -> None:
    lines = [
        '{"thread": "t1", "role": "user", "content": "hi", "at": "2024-01-02T03:04:05Z"}',
        "",
        '{"thread": "t1", "role": "assistant", "content": "hello"}',
    ]
    parsed = parse_jsonl(lines)
    assert [(t.role, t.text) for t in parsed.turns] == [("user", "hi"), ("assistant", "hello")]
    assert parsed.turns[0].at == datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert parsed.turns[1].at is None


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("not json", "line 1"),
        ("[1]", "line 1"),
        ('{"role": "user", "content": "x"}', "line 1.thread"),
        ('{"thread": "t", "role": "bot", "content": "x"}', "line 1.role"),
        ('{"thread": "t", "role": "user", "content": " "}', "line 1.content"),
        ('{"thread": "t", "role": "user", "content": "x", "at": "yesterday"}', "line 1.at"),
    ],
)
def test_a_bad_jsonl_line_is_refused_naming_the_line_and_field(line: str, field: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_jsonl([line])
    assert err.value.field == field


@pytest.mark.parametrize(
    ("line", "field", "why"),
    [
        ('{"thread": "t", "role": "user", "content": 5}', "content", "expected a string, got int"),
        ('{"thread": "t", "role": "user", "content": ["x"]}', "content", "expected a string, got list"),
        ('{"thread": "t", "role": "user", "content": true}', "content", "expected a string, got bool"),
        ('{"thread": 7, "role": "user", "content": "x"}', "thread", "expected a string, got int"),
        ('{"thread": {"id": 1}, "role": "user", "content": "x"}', "thread", "expected a string, got dict"),
        ('{"thread": "t", "role": "user"}', "content", "content is missing or blank"),
        ('{"thread": "t", "role": "user", "content": null}', "content", "content is missing or blank"),
        ('{"thread": " ", "role": "user", "content": "x"}', "thread", "thread is missing or blank"),
    ],
)
def test_a_jsonl_field_of_the_wrong_type_is_named_with_its_type_not_as_missing(line: str, field: str, why: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_jsonl(["", line])
    assert err.value.field == f"line 2.{field}"
    assert err.value.reason == why


def _node(node_id: str, parent: str | None, role: str | None, text: str, t: float = 1.7e9) -> dict:
    message = (
        None
        if role is None
        else {
            "id": f"m-{node_id}",
            "author": {"role": role},
            "create_time": t,
            "content": {"content_type": "text", "parts": [text]},
        }
    )
    return {"id": node_id, "parent": parent, "children": [], "message": message}


def test_chatgpt_export_follows_the_active_branch_only() -> None:
    mapping = {
        "root": _node("root", None, None, ""),
        "sys": _node("sys", "root", "system", "be nice"),
        "u1": _node("u1", "sys", "user", "first question"),
        "a_old": _node("a_old", "u1", "assistant", "an abandoned answer"),
        "a_new": _node("a_new", "u1", "assistant", "the kept answer"),
        "u2": _node("u2", "a_new", "user", "follow up"),
    }
    conv = [{"conversation_id": "c-1", "title": "x", "mapping": mapping, "current_node": "u2"}]
    parsed = parse_chatgpt_export(conv)
    assert [(t.role, t.text) for t in parsed.turns] == [
        ("user", "first question"),
        ("assistant", "the kept answer"),
        ("user", "follow up"),
    ]
    assert {t.thread_id for t in parsed.turns} == {"c-1"}
    assert parsed.turns[0].ref == "m-u1"


def test_chatgpt_export_must_be_a_list_of_conversations() -> None:
    with pytest.raises(InvalidRequest):
        parse_chatgpt_export({"mapping": {}})
    with pytest.raises(InvalidRequest):
        parse_chatgpt_export([{"title": "no mapping"}])


def test_load_detects_each_format(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"thread": "t", "role": "user", "content": "x"}\n')
    mapping = {"u": _node("u", None, "user", "hello")}
    (tmp_path / "conversations.json").write_text(json.dumps([{"mapping": mapping, "current_node": "u"}]))
    (tmp_path / "locomo.json").write_text(json.dumps([LOCOMO]))
    assert load_conversations(tmp_path / "a.jsonl").format == "jsonl"
    assert load_conversations(tmp_path / "conversations.json").format == "chatgpt"
    assert load_conversations(tmp_path / "locomo.json").format == "locomo"


def test_samples_for_a_chat_format_are_refused_not_ignored(tmp_path: Path) -> None:
    """``replay ok.jsonl --sample x`` replayed the whole file (newcomer run): a chat format has no samples."""
    (tmp_path / "a.jsonl").write_text('{"thread": "t", "role": "user", "content": "x"}\n')
    mapping = {"u": _node("u", None, "user", "hello")}
    (tmp_path / "conversations.json").write_text(json.dumps([{"mapping": mapping, "current_node": "u"}]))
    for name, fmt, kind, how in (
        ("a.jsonl", None, "jsonl", "detected"),
        ("conversations.json", None, "chatgpt", "detected"),
        ("a.jsonl", "jsonl", "jsonl", "as asked"),
    ):
        with pytest.raises(InvalidRequest) as err:
            load_conversations(tmp_path / name, fmt, ["x"])
        assert err.value.field == "sample"
        assert err.value.reason == (
            f"{name} is read as {kind} ({how}), which has no samples; only a LoCoMo file has sample ids"
        )
    assert load_conversations(tmp_path / "a.jsonl", None, None).format == "jsonl"


def test_load_names_a_missing_or_broken_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest) as err:
        load_conversations(tmp_path / "nope.json")
    assert "nope.json" in str(err.value)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(InvalidRequest) as err:
        load_conversations(tmp_path / "broken.json")
    assert "broken.json" in str(err.value)


@pytest.mark.parametrize(
    ("at", "why"),
    [
        ("1e20", "seconds past the year 9999 (OverflowError before)"),
        ("-1e20", "seconds before the year 1"),
        ("true", "a boolean (read as 1970-01-01T00:00:01 before)"),
        ("[1]", "neither text nor a number"),
        ('"0001-01-01T00:00:00+01:00"', "text whose UTC time is before the year 1"),
    ],
)
def test_a_jsonl_time_out_of_range_or_of_the_wrong_type_is_refused_naming_the_line(at: str, why: str) -> None:
    line = f'{{"thread": "t", "role": "user", "content": "x", "at": {at}}}'
    with pytest.raises(InvalidRequest) as err:
        parse_jsonl([line])
    assert err.value.field == "line 1.at", why


def test_chatgpt_create_time_is_each_turns_time_and_the_users_name_its_speaker() -> None:
    mapping = {
        "u1": _node("u1", None, "user", "I am planning a trip to Kyoto", t=1_700_000_000.5),
        "a1": _node("a1", "u1", "assistant", "Lovely in April", t=1_700_000_060),
    }
    mapping["u1"]["message"]["author"]["name"] = "Priya"
    parsed = parse_chatgpt_export([{"id": "c-9", "mapping": mapping, "current_node": "a1"}])
    assert [t.at for t in parsed.turns] == [
        datetime(2023, 11, 14, 22, 13, 20, 500000, tzinfo=UTC),
        datetime(2023, 11, 14, 22, 14, 20, tzinfo=UTC),
    ]
    assert [t.speaker for t in parsed.turns] == ["Priya", "assistant"]
    assert {t.thread_id for t in parsed.turns} == {"c-9"}


def test_a_chatgpt_create_time_out_of_range_is_refused_naming_the_node() -> None:
    mapping = {"u1": _node("u1", None, "user", "hello", t=1e30)}
    with pytest.raises(InvalidRequest) as err:
        parse_chatgpt_export([{"mapping": mapping, "current_node": "u1"}])
    assert err.value.field == "conversations.0.mapping.u1.message.create_time"


def test_chatgpt_nodes_of_the_wrong_shape_are_refused_or_skipped_never_crash() -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_chatgpt_export([{"mapping": {"u1": "not a node"}, "current_node": "u1"}])
    assert err.value.field == "conversations.0.mapping.u1"
    with pytest.raises(InvalidRequest) as err:
        parse_chatgpt_export([{"mapping": ["u1"], "current_node": "u1"}])
    assert err.value.field == "conversations.0.mapping"
    odd = {
        "a": {"parent": None, "message": {"author": "user", "content": {"parts": ["x"]}}},
        "b": {"parent": "a", "message": {"author": {"role": "user"}, "content": "just text"}},
        "c": {"parent": "b", "message": {"author": {"role": "user"}, "content": {"parts": "not a list"}}},
        "d": {"parent": "c", "message": {"author": {"role": "user"}, "content": {"parts": ["kept"]}}},
    }
    parsed = parse_chatgpt_export([{"mapping": odd, "current_node": "d"}])
    assert [t.text for t in parsed.turns] == ["kept"]


def test_a_locomo_turn_that_is_not_an_object_is_refused_naming_its_place() -> None:
    bad = json.loads(json.dumps(LOCOMO))
    bad["conversation"]["session_1"][1] = "Bo: Nice!"
    with pytest.raises(InvalidRequest) as err:
        parse_locomo([LOCOMO, bad])
    assert err.value.field == "samples.1.session_1.1"
    bad["conversation"]["session_1"][1] = {"speaker": "Bo", "text": "ok"}
    bad["conversation"]["session_1_date_time"] = "sometime"
    with pytest.raises(InvalidRequest) as err:
        parse_locomo([bad])
    assert err.value.field == "samples.0.session_1_date_time"
    bad["conversation"]["session_1_date_time"] = "1:56 pm on 8 May, 2023"
    bad["qa"] = {"question": "not a list"}
    with pytest.raises(InvalidRequest) as err:
        parse_locomo([bad])
    assert err.value.field == "samples.0.qa"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("empty.jsonl", "\n\n"),
        ("conversations.json", json.dumps([{"mapping": {}, "current_node": None}])),
        ("locomo.json", json.dumps([{"sample_id": "s", "conversation": {"session_1": [{"text": " "}]}}])),
    ],
)
def test_a_file_with_no_turn_to_replay_is_refused(tmp_path: Path, name: str, text: str) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(InvalidRequest) as err:
        load_conversations(tmp_path / name)
    assert err.value.field == "file"
    assert f"{name} holds no turn to replay" in str(err.value)


def test_a_file_error_names_the_file_once_and_keeps_the_field(tmp_path: Path) -> None:
    (tmp_path / "thread.jsonl").write_text('{"role": "user", "content": "x"}\n')
    with pytest.raises(InvalidRequest) as err:
        load_conversations(tmp_path / "thread.jsonl")
    assert str(err.value) == "invalid request: thread.jsonl: line 1.thread: thread is missing or blank"
    assert err.value.field == "line 1.thread"
    (tmp_path / "broken.jsonl").write_text("not json\n")
    with pytest.raises(InvalidRequest) as err:
        load_conversations(tmp_path / "broken.jsonl")
    assert str(err.value).startswith("invalid request: broken.jsonl: line 1: not JSON")


@pytest.mark.parametrize(
    ("name", "text", "field"),
    [
        ("deep.json", "[" * 100_000 + "]" * 100_000, "file"),
        ("deep.jsonl", '{"thread": ' + "[" * 5_000 + "]" * 5_000 + "}\n", "line 1"),
    ],
    ids=["json", "jsonl-line"],
)
def test_json_nested_past_the_decoders_limit_is_refused_naming_the_file(
    tmp_path: Path, name: str, text: str, field: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InvalidRequest) as err:
        load_conversations(path)
    assert err.value.field == field
    assert name in err.value.message and "nested deeper than the JSON decoder's recursion limit" in err.value.message


_LONG = "x" * 1_000_001  # MAX_TEXT_CHARS + 1


@pytest.mark.parametrize(
    ("parse", "field"),
    [
        (
            lambda: parse_jsonl(
                [
                    '{"thread": "t", "role": "user", "content": "ok"}',
                    json.dumps({"thread": "t", "role": "user", "content": _LONG}),
                ]
            ),
            "line 2.content",
        ),
        (
            lambda: parse_locomo(
                {"sample_id": "s", "conversation": {"session_1": [{"speaker": "Ann", "text": _LONG}]}}
            ),
            "samples.0.session_1.0.text",
        ),
        (
            lambda: parse_chatgpt_export(
                [{"id": "c", "current_node": "a", "mapping": {"a": _node("a", None, "user", _LONG)}}]
            ),
            "conversations.0.mapping.a.message.content",
        ),
    ],
    ids=["jsonl", "locomo", "chatgpt"],
)
def test_a_turn_over_the_text_limit_is_refused_while_parsing_naming_its_place(parse, field: str) -> None:  # type: ignore[no-untyped-def]
    """The lifecycle's own bound (``MAX_TEXT_CHARS``) checked in the file's terms, before anything is stored."""
    with pytest.raises(InvalidRequest) as err:
        parse()
    assert err.value.field == field
    assert err.value.reason == "1,000,001 characters, over the 1,000,000-character limit of one turn"


def test_the_file_name_is_in_front_of_a_turn_over_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "r1.jsonl"
    path.write_text(json.dumps({"thread": "t", "role": "user", "content": _LONG}))
    with pytest.raises(InvalidRequest) as err:
        load_conversations(path)
    assert str(err.value).startswith("invalid request: r1.jsonl: line 1.content: 1,000,001 characters")


def test_chatgpt_messages_holding_only_non_text_parts_are_counted_as_skipped() -> None:
    image = {"content_type": "image_asset_pointer", "asset_pointer": "file-service://x"}
    only_image = _node("b", "a", "user", "")
    only_image["message"]["content"]["parts"] = [image]
    both = _node("c", "b", "user", "")
    both["message"]["content"]["parts"] = [image, "and a caption"]
    mapping = {
        "a": _node("a", None, "system", "be helpful"),
        "b": only_image,
        "c": both,
        "d": _node("d", "c", "assistant", ""),  # empty text: skipped, not counted (nothing was dropped)
    }
    parsed = parse_chatgpt_export([{"id": "conv", "current_node": "d", "mapping": mapping}])
    assert [t.text for t in parsed.turns] == ["and a caption"]
    assert parsed.skipped == 1
    assert parse_jsonl(['{"thread": "t", "role": "user", "content": "ok"}']).skipped == 0


@pytest.mark.parametrize("name", ["text", "speaker", "blip_caption"])
@pytest.mark.parametrize("value", [5, ["a list"], {"an": "object"}])
def test_a_locomo_turn_field_of_the_wrong_type_is_named_not_stringified(name: str, value: object) -> None:
    """A LoCoMo turn's text, speaker or caption of another type was stringified (``"5"``): now named."""
    sample = copy.deepcopy(LOCOMO)
    sample["conversation"]["session_1"][0][name] = value
    with pytest.raises(InvalidRequest) as info:
        parse_locomo([sample])
    assert info.value.field == f"samples.0.session_1.0.{name}"
    assert f"got {type(value).__name__}" in str(info.value)


def test_a_locomo_turn_without_a_speaker_is_unknown_and_a_null_caption_is_none() -> None:
    sample = copy.deepcopy(LOCOMO)
    sample["conversation"]["session_1"][0].pop("speaker")
    sample["conversation"]["session_1"][1]["blip_caption"] = None
    turns = parse_locomo([sample]).turns
    assert turns[0].speaker == "unknown"
    assert turns[1].text == "Nice!"

"""A new user's files and options (issue: replay limits, UTF-16 marks, option order, help, wording).

Each test names what the user saw before the fix; every usage error exits 2 with one line naming the option
or the file's place, and nothing is stored.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory_core.engines import open_engine
from memory_core.engines.sqlite.engine import SQLiteEngine
from memory_core.items import Role, Turn
from memory_core.lifecycle.agent import turn_item
from memory_core.lifecycle.documents import BrainDocument
from memory_core.lifecycle.layout import MemoryLayout
from memory_core.limits import MAX_TEXT_CHARS
from memory_core.query import ListRequest
from tests._cli import invoke


def _db(env: dict[str, str]) -> Path:
    return Path(env["MEMORY_CORE_ENGINE"].removeprefix("sqlite:///"))


def _stored(env: dict[str, str]) -> int:
    if not _db(env).exists():
        return 0
    with SQLiteEngine(_db(env)) as engine:
        return len(engine.list(ListRequest(limit=10)).items)


def test_a_jsonl_turn_over_the_text_limit_names_file_line_and_field_and_stores_nothing(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Was: ``invalid request: user_text: string should have at most 1000000 characters``, line 1 stored."""
    path = tmp_path / "r1.jsonl"
    rows = [
        {"thread": "t1", "role": "user", "content": "a fine first turn"},
        {"thread": "t1", "role": "user", "content": "x" * (MAX_TEXT_CHARS + 1)},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    result = invoke(env, "replay", str(path), "--inline")
    assert result.exit_code == 2, result.output
    assert "r1.jsonl: line 2.content: 1,000,001 characters, over the 1,000,000-character limit" in result.stderr
    assert "user_text" not in result.output
    assert _stored(env) == 0


def test_a_jsonl_turn_at_the_text_limit_is_replayed(env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "r1.jsonl"
    path.write_text(json.dumps({"thread": "t1", "role": "user", "content": "y" * MAX_TEXT_CHARS}))
    result = invoke(env, "replay", str(path), "--inline")
    assert result.exit_code == 0, result.output
    assert "1 turn replayed" in result.output


def test_a_md_file_of_utf8_text_behind_a_utf16_mark_is_refused_as_binary(env: dict[str, str], tmp_path: Path) -> None:
    """Was: accepted and stored as CJK mojibake (``\\xff\\xfe`` then UTF-8 read two bytes at a time)."""
    bad = tmp_path / "notes.md"
    bad.write_bytes(b"\xff\xfe# Hello world\nThis is text in utf8.\n")
    good = tmp_path / "real.md"
    good.write_bytes("# Réunion\n\nOrdre du jour: budget.\n".encode("utf-16"))
    result = invoke(env, "ingest", str(bad), str(good))
    assert result.exit_code == 1, result.output
    assert "notes.md is binary (it starts with a UTF-16 byte-order mark, but the bytes after it are UTF-8" in (
        " ".join(result.output.split())
    )
    assert "1 document split into 1 passage" in result.output  # the real UTF-16 file is converted


@pytest.mark.parametrize("collection", ["", "   "])
def test_a_blank_collection_is_refused_before_any_file_is_converted(
    env: dict[str, str], tmp_path: Path, collection: str
) -> None:
    """Was: the file converted (progress bar to 1/1), then ``invalid request: collection: must not be blank``."""
    path = tmp_path / "a.md"
    path.write_text("# A\n\ntext\n")
    result = invoke(env, "ingest", str(path), "--collection", collection)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == "--collection is blank: give a value, or leave the option out for the default"
    assert "converting" not in result.output


def test_a_source_that_is_not_a_slug_is_refused_before_any_file_is_converted(
    env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "a.md"
    path.write_text("# A\n\ntext\n")
    result = invoke(env, "ingest", str(path), "--source", "Gmail App/x")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("--source 'Gmail App/x': brain source id 'Gmail App/x' is not a slug")
    assert "converting" not in result.output


def test_replay_help_says_a_replay_restores_what_was_retracted(env: dict[str, str], tmp_path: Path) -> None:
    """Was: "nothing is written twice", while a replay restores retracted turns (docs/log-model.md rule 2)."""
    text = " ".join(invoke(env, "replay", "--help").output.split())
    assert "nothing is written twice" not in text
    assert "one retracted or rolled back since is restored" in text
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"thread": "t1", "role": "user", "content": "I live in Porto."}))
    assert invoke(env, "replay", str(path), "--inline").exit_code == 0
    with SQLiteEngine(_db(env)) as engine:
        (turn,) = engine.list(ListRequest(limit=10)).items
        engine.retract([turn.id], "test")
    assert invoke(env, "replay", str(path), "--inline").exit_code == 0
    with SQLiteEngine(_db(env)) as engine:
        assert [r.op.value for r in engine.history(turn.id)] == ["put", "retract", "restore"]


def test_retention_of_one_turn_says_turn_not_turns(env: dict[str, str]) -> None:
    """Was: ``1 turns scanned`` and ``1 turns kept``."""
    layout = MemoryLayout("root")
    with SQLiteEngine(_db(env)) as engine:
        engine.store(turn_item(layout.conversations("a"), "a", "t", 0, Turn(role=Role.USER, text="hi"), at=_now()))
    result = invoke({**env, "MEMORY_CORE_RETENTION_MAX_AGE_DAYS": "1"}, "retention", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "1 turn scanned; would forget 0" in result.stdout and "1 turn kept;" in result.stdout
    assert "the last 1 day," in result.stdout
    assert "turns scanned" not in result.stdout and "1 days" not in result.stdout


def _now() -> datetime:
    return datetime.now(UTC)


def test_a_brain_holding_passages_that_do_not_match_is_not_called_empty(env: dict[str, str]) -> None:
    """Was: ``skipped: Brain (empty)`` beside a brain holding passages none of which matched."""
    with open_engine(env["MEMORY_CORE_ENGINE"]) as engine:
        doc = BrainDocument.new("files", "The boiler is serviced every October by Ferreira Lda.", title="Boiler")
        engine.store(doc.into_item(MemoryLayout("root")))
    result = invoke(env, "recall", "zebra quagga okapi")
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "Brain (nothing new matched)" in out and "(empty)" not in out


def test_chatgpt_messages_without_text_are_counted_as_skipped(env: dict[str, str], tmp_path: Path) -> None:
    """Was: an image-only message dropped without a word in the summary."""

    def node(node_id: str, parent: str | None, role: str, parts: list[object]) -> dict[str, object]:
        message = {"id": node_id, "author": {"role": role}, "content": {"content_type": "text", "parts": parts}}
        return {"id": node_id, "parent": parent, "message": message}

    image = {"content_type": "image_asset_pointer", "asset_pointer": "file-service://x"}
    mapping = {
        "a": node("a", None, "user", ["Here is my cat."]),
        "b": node("b", "a", "user", [image]),
        "c": node("c", "b", "assistant", ["What a lovely cat."]),
    }
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([{"id": "conv", "mapping": mapping, "current_node": "c"}]))
    result = invoke(env, "replay", str(path), "--inline")
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "2 turns replayed" in out and "; 1 message skipped (no text: only images or files)" in out

"""Conversation files as one stream of turns (pure parsing; no engine, no I/O beyond reading the file).

Three formats:

* ``locomo``: LoCoMo JSON (Maharana et al., ACL 2024), a list of samples, each with ``conversation.session_N``
  turn lists and ``session_N_date_time``; two named speakers per sample.
* ``jsonl``: one JSON object per line, ``{thread, role, content, at}`` (``at`` RFC 3339, optional).
* ``chatgpt``: a ChatGPT data export ``conversations.json``, a list of conversations, each a ``mapping`` tree
  walked from ``current_node`` back to the root.

Every format becomes ``ReplayTurn`` values in conversation order; a thread is a LoCoMo session, a JSONL
``thread``, or a ChatGPT conversation id.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from memory_core.errors import InvalidRequest

__all__ = [
    "ConversationFile",
    "ReplayTurn",
    "detect_format",
    "load_conversations",
    "parse_chatgpt_export",
    "parse_jsonl",
    "parse_locomo",
    "parse_locomo_datetime",
]

Format = Literal["locomo", "jsonl", "chatgpt"]
_LOCOMO_SESSION = re.compile(r"^session_(\d+)$")


@dataclass(frozen=True)
class ReplayTurn:
    """One turn of a conversation file.

    Attributes:
        thread_id: The thread (LoCoMo ``<sample>-s<session>``, a JSONL thread, a ChatGPT conversation id).
        role: ``user`` or ``assistant`` for chat formats; ``user`` for every LoCoMo turn.
        speaker: Who spoke (a LoCoMo speaker's name, or the role for chat formats).
        text: What was said.
        at: When it was said (UTC), when the file says.
        ref: The file's own id for the turn (LoCoMo ``dia_id`` such as ``D1:3``; a ChatGPT message id).
        conversation: The conversation it belongs to: a LoCoMo sample id, so the people of one sample are never
            made to hear another's turns (None for chat formats, which have one agent).
    """

    thread_id: str
    role: Literal["user", "assistant"]
    speaker: str
    text: str
    at: datetime | None = None
    ref: str | None = None
    conversation: str | None = None


@dataclass
class ConversationFile:
    """A parsed file: its turns in order, and for LoCoMo the samples' speakers and questions.

    Attributes:
        format: Which parser read it.
        turns: Every turn, in conversation order.
        speakers: Speaker names, in order of first appearance.
        samples: LoCoMo sample ids, in file order ([] for chat formats).
        qa: LoCoMo question objects per sample id ({} for chat formats).
    """

    format: Format
    turns: list[ReplayTurn] = field(default_factory=list)
    speakers: list[str] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)
    qa: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def parse_locomo_datetime(text: str) -> datetime:
    """Parse LoCoMo's ``"1:56 pm on 8 May, 2023"`` as a UTC datetime.

    Raises:
        InvalidRequest: the text is not in that form.
    """
    cleaned = " ".join(text.replace(",", ", ").split()).replace(" ,", ",")
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"):
        try:
            return datetime.strptime(cleaned, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise InvalidRequest(f"unreadable LoCoMo session time {text!r}", field="session_date_time")


def _speakers(turns: Iterable[ReplayTurn]) -> list[str]:
    return list(dict.fromkeys(t.speaker for t in turns))


def parse_locomo(data: Any, samples: Iterable[str] | None = None) -> ConversationFile:
    """Read LoCoMo JSON (a list of samples, or one sample) into turns; ``samples`` keeps only those ids.

    Threads are named ``<sample_id>-s<session>``; each turn's ``at`` is its session's time.

    Raises:
        InvalidRequest: the data is not LoCoMo-shaped, or a named sample is missing.
    """
    rows = data if isinstance(data, list) else [data]
    wanted = set(samples) if samples is not None else None
    out = ConversationFile(format="locomo")
    for i, sample in enumerate(rows):
        if not isinstance(sample, dict) or not isinstance(sample.get("conversation"), dict):
            raise InvalidRequest(f"sample {i} has no conversation object", field=f"samples.{i}")
        sample_id = str(sample.get("sample_id", f"sample-{i}"))
        if wanted is not None and sample_id not in wanted:
            continue
        conv = sample["conversation"]
        sessions = sorted(
            (int(m.group(1)), key) for key in conv if (m := _LOCOMO_SESSION.match(key)) and isinstance(conv[key], list)
        )
        for number, key in sessions:
            when_text = conv.get(f"{key}_date_time")
            at = parse_locomo_datetime(when_text) if isinstance(when_text, str) else None
            for turn in conv[key]:
                text = str(turn.get("text", "")).strip()
                if not text:
                    continue
                caption = turn.get("blip_caption")
                if caption:
                    text = f"{text} [shares a photo: {caption}]"
                out.turns.append(
                    ReplayTurn(
                        thread_id=f"{sample_id}-s{number}",
                        role="user",
                        speaker=str(turn.get("speaker", "unknown")),
                        text=text,
                        at=at,
                        ref=turn.get("dia_id"),
                        conversation=sample_id,
                    )
                )
        out.samples.append(sample_id)
        out.qa[sample_id] = list(sample.get("qa", []))
    if wanted is not None and (missing := wanted - set(out.samples)):
        raise InvalidRequest(f"no LoCoMo sample named {sorted(missing)}", field="sample")
    out.speakers = _speakers(out.turns)
    return out


def _parse_at(value: Any, where: str) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(float(value), tz=UTC)
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise InvalidRequest(f"unreadable time {value!r}", field=where) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _role(value: Any, where: str) -> Literal["user", "assistant"]:
    if value == "user":
        return "user"
    if value == "assistant":
        return "assistant"
    raise InvalidRequest(f"role must be user or assistant, got {value!r}", field=where)


def parse_jsonl(lines: Iterable[str]) -> ConversationFile:
    """Read JSONL ``{thread, role, content, at}`` lines (blank lines skipped).

    Raises:
        InvalidRequest: a line that is not a JSON object, or lacks a thread, role or content (named by line).
    """
    out = ConversationFile(format="jsonl")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidRequest(f"not JSON: {exc.msg}", field=where) from None
        if not isinstance(row, dict):
            raise InvalidRequest("not a JSON object", field=where)
        thread, content = row.get("thread"), row.get("content")
        if not isinstance(thread, str) or not thread.strip():
            raise InvalidRequest("thread is missing or blank", field=f"{where}.thread")
        if not isinstance(content, str) or not content.strip():
            raise InvalidRequest("content is missing or blank", field=f"{where}.content")
        role = _role(row.get("role"), f"{where}.role")
        out.turns.append(
            ReplayTurn(
                thread_id=thread, role=role, speaker=role, text=content, at=_parse_at(row.get("at"), f"{where}.at")
            )
        )
    out.speakers = _speakers(out.turns)
    return out


def _chatgpt_text(message: dict[str, Any]) -> str:
    content = message.get("content") or {}
    parts = content.get("parts") or []
    texts = [p for p in parts if isinstance(p, str)]
    if not texts and isinstance(content.get("text"), str):
        texts = [content["text"]]
    return "\n".join(t for t in texts if t.strip()).strip()


def _chatgpt_branch(conv: dict[str, Any]) -> Iterator[dict[str, Any]]:
    mapping = conv.get("mapping") or {}
    node_id = conv.get("current_node")
    chain: list[dict[str, Any]] = []
    seen: set[str] = set()
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
        seen.add(node_id)
        node = mapping[node_id]
        chain.append(node)
        node_id = node.get("parent")
    return iter(chain[::-1])


def parse_chatgpt_export(data: Any) -> ConversationFile:
    """Read a ChatGPT ``conversations.json``: the active branch of each conversation, user and assistant text.

    System, tool and empty messages are skipped; a conversation without ``current_node`` is skipped.

    Raises:
        InvalidRequest: the data is not a list of conversation objects.
    """
    if not isinstance(data, list):
        raise InvalidRequest("a ChatGPT export is a list of conversations", field="conversations")
    out = ConversationFile(format="chatgpt")
    for i, conv in enumerate(data):
        if not isinstance(conv, dict) or "mapping" not in conv:
            raise InvalidRequest("not a conversation object", field=f"conversations.{i}")
        thread = str(conv.get("conversation_id") or conv.get("id") or f"chatgpt-{i}")
        for node in _chatgpt_branch(conv):
            message = node.get("message")
            if not isinstance(message, dict):
                continue
            role = (message.get("author") or {}).get("role")
            if role not in ("user", "assistant"):
                continue
            text = _chatgpt_text(message)
            if not text:
                continue
            out.turns.append(
                ReplayTurn(
                    thread_id=thread,
                    role=role,
                    speaker=role,
                    text=text,
                    at=_parse_at(message.get("create_time"), f"conversations.{i}.create_time"),
                    ref=message.get("id"),
                )
            )
    out.speakers = _speakers(out.turns)
    return out


def detect_format(path: Path, head: str) -> Format:
    """Guess the format from the file name and its first characters."""
    if path.suffix == ".jsonl" or (head.lstrip().startswith("{") and "\n{" in head):
        return "jsonl"
    if '"mapping"' in head or path.name == "conversations.json":
        return "chatgpt"
    return "locomo"


def load_conversations(
    path: Path | str, fmt: Format | None = None, samples: Iterable[str] | None = None
) -> ConversationFile:
    """Read a conversation file in any supported format (detected when ``fmt`` is None).

    Raises:
        InvalidRequest: a missing, unreadable or malformed file (the message names it).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"cannot read {p}: {exc}", field="file") from None
    kind = fmt or detect_format(p, text[:4096])
    try:
        if kind == "jsonl":
            return parse_jsonl(text.splitlines())
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"{p.name} is not JSON: {exc.msg} (line {exc.lineno})", field="file") from None
    except InvalidRequest as exc:
        raise InvalidRequest(f"{p.name}: {exc.message}", field=exc.field) from None
    return parse_chatgpt_export(data) if kind == "chatgpt" else parse_locomo(data, samples)

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
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from memory_core.errors import InvalidRequest
from memory_core.limits import MAX_TEXT_CHARS

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
        skipped: Messages left out because they hold no text, only parts of another kind (a ChatGPT user or
            assistant message whose parts are all images or files); 0 for the other formats.
    """

    format: Format
    turns: list[ReplayTurn] = field(default_factory=list)
    speakers: list[str] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)
    qa: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    skipped: int = 0


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


def _checked(turn: ReplayTurn, where: str, names: dict[str, str]) -> ReplayTurn:
    """``turn`` when the lifecycle would take it: no NUL, and text within ``MAX_TEXT_CHARS``.

    No string may hold NUL (U+0000), which no engine stores (``meta.NUL_FREE``), and the text is at most
    ``MAX_TEXT_CHARS`` characters, the bound of ``PreTurn`` and ``PostTurn`` text (``limits.MAX_TEXT_CHARS``).

    Checked while the file is parsed, so a file with one bad turn anywhere stores nothing (as a bad ``at``
    does), and the error names the file's place and field rather than the lifecycle's (``user_text``).

    Args:
        turn: The parsed turn.
        where: Its place in the file (``line 7``, ``samples.0.session_1.3``).
        names: The file's name for each ``ReplayTurn`` attribute (``{"text": "content"}``); others keep theirs.

    Raises:
        InvalidRequest: ``<where>.<name>``: the string holds NUL, or the text is over ``MAX_TEXT_CHARS``.
    """
    for attr in ("thread_id", "speaker", "text", "ref", "conversation"):
        value = getattr(turn, attr)
        if isinstance(value, str) and "\x00" in value:
            raise InvalidRequest(
                f"holds a NUL character (U+0000) at offset {value.index(chr(0))}",
                field=f"{where}.{names.get(attr, attr)}",
            )
    if len(turn.text) > MAX_TEXT_CHARS:
        raise InvalidRequest(
            f"{len(turn.text):,} characters, over the {MAX_TEXT_CHARS:,}-character limit of one turn",
            field=f"{where}.{names.get('text', 'text')}",
        )
    return turn


def _locomo_turn(turn: Any, where: str, sample_id: str, number: int, at: datetime | None) -> ReplayTurn | None:
    """One LoCoMo turn object as a ``ReplayTurn`` (None for a blank one)."""
    if not isinstance(turn, dict):
        raise InvalidRequest(f"a turn is a JSON object, got {type(turn).__name__}", field=where)
    text = _optional_text(turn, "text", where).strip()
    if not text:
        return None
    caption = _optional_text(turn, "blip_caption", where)
    if caption:
        text = f"{text} [shares a photo: {caption}]"
    ref = turn.get("dia_id")
    parsed = ReplayTurn(
        thread_id=f"{sample_id}-s{number}",
        role="user",
        speaker=_optional_text(turn, "speaker", where) or "unknown",
        text=text,
        at=at,
        ref=None if ref is None else str(ref),
        conversation=sample_id,
    )
    return _checked(parsed, where, {"thread_id": "sample_id", "ref": "dia_id", "conversation": "sample_id"})


def parse_locomo(data: Any, samples: Iterable[str] | None = None) -> ConversationFile:
    """Read LoCoMo JSON (a list of samples, or one sample) into turns; ``samples`` keeps only those ids.

    Threads are named ``<sample_id>-s<session>``; each turn's ``at`` is its session's time.

    Raises:
        InvalidRequest: the data is not LoCoMo-shaped (the field names the place: ``samples.0.session_2.3``),
            or a named sample is missing.
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
            try:
                at = parse_locomo_datetime(when_text) if isinstance(when_text, str) else None
            except InvalidRequest as exc:
                raise InvalidRequest(exc.message, field=f"samples.{i}.{key}_date_time") from None
            for j, raw in enumerate(conv[key]):
                turn = _locomo_turn(raw, f"samples.{i}.{key}.{j}", sample_id, number, at)
                if turn is not None:
                    out.turns.append(turn)
        qa = sample.get("qa", [])
        if not isinstance(qa, list):
            raise InvalidRequest(f"qa is a list of questions, got {type(qa).__name__}", field=f"samples.{i}.qa")
        out.samples.append(sample_id)
        out.qa[sample_id] = list(qa)
    if wanted is not None and (missing := wanted - set(out.samples)):
        raise InvalidRequest(f"no LoCoMo sample named {sorted(missing)}", field="sample")
    out.speakers = _speakers(out.turns)
    return out


def _parse_at(value: Any, where: str) -> datetime | None:
    """A file's time as UTC: RFC 3339 text (no offset = UTC) or Unix seconds; None when absent.

    Raises:
        InvalidRequest: a boolean, a number outside the years 1-9999, or text that is not a time (``where``).
    """
    if value is None or value == "":
        return None
    if isinstance(value, bool):  # JSON true/false is not a time (Python would read True as 1970-01-01T00:00:01)
        raise InvalidRequest(f"a time is RFC 3339 text or Unix seconds, got {json.dumps(value)}", field=where)
    try:
        if isinstance(value, int | float):
            return datetime.fromtimestamp(float(value), tz=UTC)
        if not isinstance(value, str):
            raise ValueError(value)
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except (ValueError, OverflowError, OSError):  # OverflowError/OSError: seconds past year 9999 (or below 1)
        raise InvalidRequest(f"unreadable time {value!r} (RFC 3339 text or Unix seconds)", field=where) from None


def _role(value: Any, where: str) -> Literal["user", "assistant"]:
    if value == "user":
        return "user"
    if value == "assistant":
        return "assistant"
    raise InvalidRequest(f"role must be user or assistant, got {value!r}", field=where)


def _optional_text(row: dict[str, Any], name: str, where: str) -> str:
    """``row[name]`` as a string, "" when absent or null.

    Raises:
        InvalidRequest: ``<where>.<name>`` is not a string (its type named).
    """
    value = row.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidRequest(f"expected a string, got {type(value).__name__}", field=f"{where}.{name}")
    return value


def _text(row: dict[str, Any], name: str, where: str) -> str:
    """``row[name]``: a string holding more than whitespace.

    Raises:
        InvalidRequest: ``<where>.<name>``: absent, null or blank ("missing or blank"), or not a string (its type).
    """
    value = _optional_text(row, name, where)
    if not value.strip():
        raise InvalidRequest(f"{name} is missing or blank", field=f"{where}.{name}")
    return value


def parse_jsonl(lines: Iterable[str]) -> ConversationFile:
    """Read JSONL ``{thread, role, content, at}`` lines (blank lines skipped).

    Raises:
        InvalidRequest: a line that is not a JSON object, lacks a thread, role or content, has a thread or content
            that is not a string (naming its type), holds a NUL character, or has content over ``MAX_TEXT_CHARS``
            characters (named by line: ``line 7.content``).
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
        except RecursionError:
            raise InvalidRequest(_TOO_DEEP, field=where) from None
        if not isinstance(row, dict):
            raise InvalidRequest("not a JSON object", field=where)
        thread, content = _text(row, "thread", where), _text(row, "content", where)
        role = _role(row.get("role"), f"{where}.role")
        turn = ReplayTurn(
            thread_id=thread, role=role, speaker=role, text=content, at=_parse_at(row.get("at"), f"{where}.at")
        )
        out.turns.append(_checked(turn, where, {"thread_id": "thread", "text": "content"}))
    out.speakers = _speakers(out.turns)
    return out


def _chatgpt_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if not isinstance(content, dict):
        return ""
    parts = content.get("parts")
    texts = [p for p in parts if isinstance(p, str)] if isinstance(parts, list) else []
    if not texts and isinstance(content.get("text"), str):
        texts = [content["text"]]
    return "\n".join(t for t in texts if t.strip()).strip()


def _non_text_parts(message: dict[str, Any]) -> bool:
    """True when ``message.content.parts`` holds a part that is not text (an image or file pointer object)."""
    content = message.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    return isinstance(parts, list) and any(not isinstance(p, str) for p in parts)


def _chatgpt_branch(mapping: dict[str, Any], node_id: Any, where: str) -> list[tuple[str, dict[str, Any]]]:
    """(node id, node) from the root to ``node_id`` (the active branch); a cycle stops the walk."""
    chain: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
        seen.add(node_id)
        node = mapping[node_id]
        if not isinstance(node, dict):
            raise InvalidRequest(f"a node is a JSON object, got {type(node).__name__}", field=f"{where}.{node_id}")
        chain.append((node_id, node))
        node_id = node.get("parent")
    return chain[::-1]


def _is_chat_role(message: dict[str, Any]) -> bool:
    """True for a message whose ``author.role`` is ``user`` or ``assistant`` (the roles replayed)."""
    author = message.get("author")
    return isinstance(author, dict) and author.get("role") in ("user", "assistant")


def _chatgpt_turn(message: dict[str, Any], thread: str, where: str) -> ReplayTurn | None:
    if not _is_chat_role(message):
        return None
    author = message["author"]
    role = _role(author.get("role"), f"{where}.author.role")
    text = _chatgpt_text(message)
    if not text:
        return None
    name = author.get("name") if isinstance(author, dict) else None
    speaker = name.strip() if role == "user" and isinstance(name, str) and name.strip() else role
    ref = message.get("id")
    parsed = ReplayTurn(
        thread_id=thread,
        role=role,
        speaker=speaker,
        text=text,
        at=_parse_at(message.get("create_time"), f"{where}.create_time"),
        ref=None if ref is None else str(ref),
    )
    names = {"thread_id": "conversation_id", "speaker": "author.name", "text": "content", "ref": "id"}
    return _checked(parsed, where, names)


def parse_chatgpt_export(data: Any) -> ConversationFile:
    """Read a ChatGPT ``conversations.json``: the active branch of each conversation, user and assistant text.

    ``create_time`` (Unix seconds) becomes each turn's ``at``; a user message's ``author.name``, when the export
    has one, its ``speaker``. System, tool and empty messages are skipped; a conversation without
    ``current_node`` is skipped. A user or assistant message with no text but parts of another kind (an
    uploaded image, a file) is skipped and counted in ``skipped``; a message with both keeps its text.

    Raises:
        InvalidRequest: the data is not a list of conversation objects, or a node or time is malformed (the
            field names it: ``conversations.0.mapping.<node>.message.create_time``).
    """
    if not isinstance(data, list):
        raise InvalidRequest("a ChatGPT export is a list of conversations", field="conversations")
    out = ConversationFile(format="chatgpt")
    for i, conv in enumerate(data):
        if not isinstance(conv, dict) or "mapping" not in conv:
            raise InvalidRequest("not a conversation object", field=f"conversations.{i}")
        mapping = conv.get("mapping") or {}
        if not isinstance(mapping, dict):
            raise InvalidRequest("mapping is a JSON object of nodes", field=f"conversations.{i}.mapping")
        thread = str(conv.get("conversation_id") or conv.get("id") or f"chatgpt-{i}")
        for node_id, node in _chatgpt_branch(mapping, conv.get("current_node"), f"conversations.{i}.mapping"):
            message = node.get("message")
            if isinstance(message, dict):
                turn = _chatgpt_turn(message, thread, f"conversations.{i}.mapping.{node_id}.message")
                if turn is not None:
                    out.turns.append(turn)
                elif _is_chat_role(message) and _non_text_parts(message):
                    out.skipped += 1
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

    Args:
        path: The file.
        fmt: ``locomo``, ``jsonl`` or ``chatgpt``; None: detected from the name and the first characters.
        samples: Only these LoCoMo sample ids; None: every sample. Given for a chat format, it is refused
            (those have no samples) rather than ignored.

    Raises:
        InvalidRequest: a missing, unreadable or malformed file (JSON nested too deep to decode included), or
            one with no turn to replay (the message names the file, and ``field`` the place in it); ``samples``
            given for a chat format or naming a sample the file lacks (``field="sample"``).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _file_error(f"cannot read {p}: {exc}") from None
    kind = fmt or detect_format(p, text[:4096])
    if samples is not None and kind != "locomo":
        how = "detected" if fmt is None else "as asked"
        raise InvalidRequest(
            f"{p.name} is read as {kind} ({how}), which has no samples; only a LoCoMo file has sample ids",
            field="sample",
        )
    try:
        if kind == "jsonl":
            parsed = parse_jsonl(text.splitlines())
        else:
            data = json.loads(text)
            parsed = parse_chatgpt_export(data) if kind == "chatgpt" else parse_locomo(data, samples)
    except json.JSONDecodeError as exc:
        raise _file_error(f"{p.name} is not JSON: {exc.msg} (line {exc.lineno})") from None
    except RecursionError:
        raise _file_error(f"{p.name} is not readable JSON: {_TOO_DEEP}") from None
    except InvalidRequest as exc:
        raise _in_file(p, exc) from None
    if not parsed.turns:
        raise _file_error(f"{p.name} holds no turn to replay (read as {kind}: {_EMPTY[kind]})")
    return parsed


_TOO_DEEP = "arrays or objects nested deeper than the JSON decoder's recursion limit (about 1,000 levels)"
"""Why ``json.loads`` raised ``RecursionError``: CPython's decoder recurses once per nesting level and stops
at the interpreter's recursion limit (``sys.getrecursionlimit()``, 1,000 by default); no conversation file
nests more than a few levels."""

_EMPTY: dict[str, str] = {
    "locomo": "no session holds a turn with text",
    "jsonl": "no line holds a {thread, role, content} object",
    "chatgpt": "no conversation's active branch holds a user or assistant message with text",
}


def _file_error(message: str) -> InvalidRequest:
    """An error about the file as a whole: ``field`` is ``"file"``; the message names the file itself."""
    error = InvalidRequest(message)
    error.field = "file"
    return error


def _in_file(path: Path, exc: InvalidRequest) -> InvalidRequest:
    """``exc`` with the file's name in front of its message, once; ``field`` is kept."""
    named = InvalidRequest(f"{path.name}: {exc.message}")
    named.field = exc.field
    return named

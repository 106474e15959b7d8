"""Items ⇄ CortexDB events: the v3 envelope carried in labels (contract reference §5.3 append body, §5.4); pure.

An item becomes one event per text: a learning one, a conversation one per turn, a document one per chunk
(one, unless its text exceeds 256 KiB: then it is cut at page breaks, headings, paragraphs, lines or words).
``content.text`` is the plain text (so the server ranks what a reader would); the rest of the item, ``{v: 3, id,
kind, meta, title?, mime?, learning_kind?, confidence?, evidence?, turn?: {index, count, role, at, tool_calls},
chunk?: {index, count}}``, is JSON cut into slices of at most 240 bytes carried as labels ``tm:e:NN:<slice>``,
beside the readable ``kind:`` label and the lookup labels of ``layout``. An event holds at most 64 labels.

Decoding groups events by the envelope's id and rebuilds the item; a conversation or a chunked document is whole
only once every part is present. Events without a readable envelope (written by another client) are skipped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from memory_core.engine import AnyItem
from memory_core.engines.cortexdb.layout import lookup_labels
from memory_core.errors import InvalidRequest
from memory_core.items import Conversation, Document, DocumentBody, Learning, LearningKind, Role, ToolCallRef, Turn
from memory_core.meta import MemoryMeta, MetaFilter

__all__ = [
    "MAX_EVENT_BYTES",
    "MAX_LABELS",
    "Decoded",
    "EventBody",
    "admits",
    "decode_events",
    "event_index",
    "encode_item",
    "idempotency_key",
    "prefix_digests",
    "private_meta",
    "read_envelope",
    "split_text",
]

MAX_LABELS: Final = 64
"""Most labels one CortexDB event holds (reference §5.4)."""
MAX_EVENT_BYTES: Final = 768 * 1024
"""Largest event memory-core sends; CortexDB refuses anything over 1 MiB (reference §5.4)."""
CHUNK_BYTES: Final = 256 * 1024
"""A document text longer than this (UTF-8 bytes) is split into chunks, one event each (reference §5.4)."""
_BREAKS: Final = ("\f", "\n#", "\n\n", "\n", " ")
"""Where a chunk may end, best first: a page break, a heading, a paragraph, a line, a word."""
_SLICE: Final = 240
_ENVELOPE_PREFIX: Final = "tm:e:"
_VERSION: Final = 3


@dataclass(frozen=True)
class EventBody:
    """One event to append: the append body of reference §5.3 without ``scope`` and ``idempotency_key``.

    Attributes:
        item_id: The item the event belongs to.
        index: The turn or chunk index (0 for an item of one event).
        body: ``{modality, content: {kind, role, text}, context: {labels, observed_at?}}``.
    """

    item_id: str
    index: int
    body: dict[str, Any]


def split_text(text: str, limit: int = CHUNK_BYTES) -> list[str]:
    """``text`` cut into chunks of at most ``limit`` UTF-8 bytes whose concatenation is ``text``; pure.

    Each cut falls at the last page break, else heading, paragraph, line or word boundary of the chunk (the
    separator stays with the next chunk), else at a character boundary.
    """
    chunks: list[str] = []
    rest = text
    while len(rest.encode("utf-8")) > limit:
        head = rest.encode("utf-8")[:limit].decode("utf-8", "ignore")
        cut = 0
        for mark in _BREAKS:
            at = head.rfind(mark)
            if at > 0:
                cut = at
                break
        cut = cut or len(head)
        chunks.append(rest[:cut])
        rest = rest[cut:]
    chunks.append(rest)
    return chunks


_DIGEST: Final = "sha256:"
"""Prefix of an absolute workspace sent as a digest."""


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:16]


def prefix_digests(path: str) -> list[str]:
    """Digests of ``path`` and of every prefix ``path_has_prefix`` lets a filter name it by; pure.

    Those are ``path`` itself and each part before a ``/`` (``"/a/b"``: ``"/a/b"``, ``"/a"``, ``""``).
    """
    bases = {path, *(path[:i] for i, ch in enumerate(path) if ch == "/")}
    return sorted(_digest(b) for b in bases)


def private_meta(meta: MemoryMeta) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The metadata sent for ``meta``, and the digests that stand for its local paths (reference §5.4).

    Local paths never leave the machine: ``file_path`` is sent as the file name only, ``folder`` not at all, and
    an absolute ``workspace`` as ``sha256:<16 hex>``; ``paths`` carries the digests of the folder's and the
    file path's prefixes, so a filter on either still selects exactly (``path_matches``).
    """
    sent = meta.to_dict()
    paths: dict[str, list[str]] = {}
    if meta.folder is not None:
        sent.pop("folder", None)
        paths["folder"] = prefix_digests(meta.folder)
    if meta.file_path is not None:
        sent["file_path"] = meta.file_path.rstrip("/").rsplit("/", 1)[-1] or meta.file_path
        paths["file"] = prefix_digests(meta.file_path)
    if meta.workspace is not None and meta.workspace.startswith("/"):
        sent["workspace"] = _DIGEST + _digest(meta.workspace)
    return sent, paths


def admits(flt: MetaFilter, found: Decoded) -> bool:
    """``flt.matches`` for an item read back, its local paths matched by their digests."""
    meta = found.item.item_meta
    cleared: dict[str, object] = {}
    for name, key in (("folder", "folder"), ("file_path", "file")):
        wanted = getattr(flt, name)
        if wanted is None or key not in found.paths:
            continue
        held = set(found.paths[key])
        if _digest(wanted) not in held and _digest(wanted.rstrip("/")) not in held:
            return False
        cleared[name] = None
    if flt.workspace is not None and (meta.workspace or "").startswith(_DIGEST):
        if meta.workspace != _DIGEST + _digest(flt.workspace):
            return False
        cleared["workspace"] = None
    rest = flt.narrowed(**cleared) if cleared else flt
    return rest.matches(found.item.item_kind, meta)


def event_index(envelope: Mapping[str, Any]) -> int:
    """The place of an event within its item: its turn or chunk index (0 for a single-event item)."""
    for key in ("turn", "chunk"):
        part = envelope.get(key)
        if isinstance(part, dict) and isinstance(part.get("index"), int):
            return int(part["index"])
    return 0


def idempotency_key(body: Mapping[str, Any]) -> str:
    """``tm3:`` + the first 56 hex of SHA-256 over the compact body without its key (reference §5.3)."""
    bare = {k: v for k, v in body.items() if k != "idempotency_key"}
    compact = json.dumps(bare, separators=(",", ":"), ensure_ascii=False)
    return "tm3:" + hashlib.sha256(compact.encode("utf-8")).hexdigest()[:56]


def _slices(envelope: dict[str, Any]) -> list[str]:
    text = json.dumps(envelope, separators=(",", ":"), ensure_ascii=True)  # ASCII: a slice is never a split char
    return [f"{_ENVELOPE_PREFIX}{i:02d}:{text[at : at + _SLICE]}" for i, at in enumerate(range(0, len(text), _SLICE))]


def _event(
    item: AnyItem, envelope: dict[str, Any], modality: str, role: str, text: str, at: str | None
) -> dict[str, Any]:
    meta = item.item_meta
    labels = [*_slices(envelope), f"kind:{item.item_kind.value}", *lookup_labels(item.id, meta)]
    if len(labels) > MAX_LABELS:
        raise InvalidRequest(
            f"the item's metadata needs {len(labels)} labels, more than the {MAX_LABELS} a CortexDB event holds",
            field="meta",
        )
    if len(text.encode("utf-8")) > MAX_EVENT_BYTES:
        raise InvalidRequest(f"a text over {MAX_EVENT_BYTES} bytes does not fit one CortexDB event", field="text")
    context: dict[str, Any] = {"labels": labels}
    if at is not None:
        context["observed_at"] = at
    return {"modality": modality, "content": {"kind": "message", "role": role, "text": text}, "context": context}


def encode_item(item: AnyItem) -> list[EventBody]:
    """The events storing ``item``, in order (a conversation: one per turn).

    Raises:
        InvalidRequest: the envelope needs more than 64 labels (``meta``) or a text exceeds 768 KiB (``text``).
    """
    meta = item.item_meta
    sent, paths = private_meta(meta)
    base: dict[str, Any] = {"v": _VERSION, "id": item.id, "kind": item.item_kind.value, "meta": sent}
    if paths:
        base["paths"] = paths
    observed = base["meta"].get("observed_at")
    if isinstance(item, Document):
        env = {**base, **({"title": item.title} if item.title is not None else {})}
        if item.mime is not None:
            env["mime"] = item.mime
        chunks = split_text(item.text)
        if len(chunks) == 1:
            return [EventBody(item.id, 0, _event(item, env, "document", "user", item.text, observed))]
        return [
            EventBody(
                item.id,
                i,
                _event(item, {**env, "chunk": {"index": i, "count": len(chunks)}}, "document", "user", chunk, observed),
            )
            for i, chunk in enumerate(chunks)
        ]
    if isinstance(item, Learning):
        env = {**base, "learning_kind": item.kind.value, "confidence": item.confidence}
        if item.evidence is not None:
            env["evidence"] = item.evidence
        return [EventBody(item.id, 0, _event(item, env, "observation", "user", item.text, observed))]
    out: list[EventBody] = []
    count = len(item.turns)
    for index, turn in enumerate(item.turns):
        data = turn.to_dict()
        info = {"index": index, "count": count, "role": turn.role.value, "at": data.get("at")}
        info["tool_calls"] = data.get("tool_calls", [])
        env = {**base, "turn": info}
        at = data.get("at") or observed
        out.append(EventBody(item.id, index, _event(item, env, "conversation", turn.role.value, turn.text, at)))
    return out


def read_envelope(labels: Iterable[str]) -> dict[str, Any] | None:
    """The envelope an event's labels carry, or None when there is none or it does not parse."""
    parts: dict[int, str] = {}
    for label in labels:
        if not label.startswith(_ENVELOPE_PREFIX):
            continue
        number, sep, chunk = label[len(_ENVELOPE_PREFIX) :].partition(":")
        if sep and number.isdigit():
            parts[int(number)] = chunk
    if not parts or sorted(parts) != list(range(len(parts))):
        return None
    try:
        data = json.loads("".join(parts[i] for i in range(len(parts))))
    except ValueError:
        return None
    return data if isinstance(data, dict) and data.get("v") == _VERSION and isinstance(data.get("id"), str) else None


@dataclass
class Decoded:
    """A stored item read back from its events.

    Attributes:
        id: The item id the envelope names.
        item: The rebuilt item.
        scope: The scope its events live in.
        event_ids: The ids of every event carrying it (duplicates included once).
    """

    id: str
    item: AnyItem
    scope: str
    event_ids: list[str] = field(default_factory=list)
    paths: dict[str, list[str]] = field(default_factory=dict)

    @property
    def private(self) -> bool:
        """True when local paths were kept on the machine: the item read back is not the item stored."""
        return bool(self.paths) or (self.item.item_meta.workspace or "").startswith(_DIGEST)


@dataclass
class _Parts:
    scope: str
    envelope: dict[str, Any]
    texts: dict[int, str] = field(default_factory=dict)
    turns: dict[int, dict[str, Any]] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)


def _rebuild(parts: _Parts) -> AnyItem | None:
    env = parts.envelope
    try:
        meta = MemoryMeta.model_validate(env.get("meta", {}))
        kind = env.get("kind")
        if kind == "document":
            chunk = env.get("chunk")
            count = int(chunk.get("count", 1)) if isinstance(chunk, dict) else 1
            if sorted(parts.texts) != list(range(count)):
                return None
            body = DocumentBody(text="".join(parts.texts[i] for i in range(count)))
            return Document(title=env.get("title"), body=body, mime=env.get("mime"), meta=meta)
        if kind == "learning":
            return Learning(
                text=parts.texts.get(0, ""),
                kind=LearningKind(env.get("learning_kind", "fact")),
                confidence=float(env.get("confidence", 0.5)),
                evidence=env.get("evidence"),
                meta=meta,
            )
        if kind == "conversation":
            info = env.get("turn", {})
            count = int(info.get("count", 0))
            if count < 1 or sorted(parts.turns) != list(range(count)):
                return None
            turns = tuple(
                Turn(
                    role=Role(t["role"]),
                    text=parts.texts[i],
                    at=t.get("at"),
                    tool_calls=tuple(ToolCallRef.model_validate(c) for c in t.get("tool_calls", [])),
                )
                for i, t in sorted(parts.turns.items())
            )
            return Conversation(turns=turns, meta=meta)
    except (InvalidRequest, ValueError, KeyError, TypeError):
        return None
    return None


def decode_events(events: Iterable[Mapping[str, Any]]) -> list[Decoded]:
    """The whole items among ``events`` (listing or pack entries), in the order each item's first event came.

    Each event is ``{id, scope, content: {text}, context: {labels, observed_at?}}``; repeated events (the listing
    emits each twice) count once. Items with a missing turn, or whose envelope does not parse, are left out.
    """
    groups: dict[tuple[str, str], _Parts] = {}
    seen: set[str] = set()
    for event in events:
        event_id = str(event.get("id", ""))
        if not event_id or event_id in seen:
            continue
        seen.add(event_id)
        context = event.get("context") or {}
        envelope = read_envelope(context.get("labels") or [])
        if envelope is None:
            continue
        scope = str(event.get("scope", ""))
        key = (scope, envelope["id"])
        parts = groups.setdefault(key, _Parts(scope=scope, envelope=envelope))
        turn = envelope.get("turn")
        index = event_index(envelope)
        parts.texts[index] = str((event.get("content") or {}).get("text", ""))
        if isinstance(turn, dict):
            parts.turns[index] = turn
        parts.events.append(event_id)
    out: list[Decoded] = []
    for (scope, item_id), parts in groups.items():
        item = _rebuild(parts)
        if item is not None:
            raw = parts.envelope.get("paths")
            paths = (
                {k: [str(d) for d in v] for k, v in raw.items() if isinstance(v, list)} if isinstance(raw, dict) else {}
            )
            out.append(Decoded(id=item_id, item=item, scope=scope, event_ids=parts.events, paths=paths))
    return out
